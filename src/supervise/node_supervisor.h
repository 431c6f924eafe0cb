// The node supervisor: one long-lived process per agent state directory that runs every job rank
// of the node (`berth-supervisor __node`), instead of one supervisor process per rank.
//
// The agent (agent/launcher.h) makes the listening unix socket <state>/supervisor.sock and starts
// the node supervisor with it as fd 3, in a session of its own; the node supervisor outlives the
// agent, and a restarted agent connects to the same socket. On each connection it first writes
// "berth-node-supervisor PID\n"; then it reads lines:
//
//   start DIR   run the job rank whose run plan is DIR/run.json (as the per-job supervisor does:
//               DIR/supervisor.pid, DIR/output.log, DIR/events; see supervisor.h)
//   stop DIR    stop that rank: SIGTERM to all of its processes, SIGKILL after its grace
//   attach DIR OFFSET
//               the connection becomes a leg of that interactive rank's terminal (RunPlan::tty);
//               from then on both ways carry frames (supervise/terminal.h: channel, length,
//               bytes). To the leg: {"from":N} on channel 3 (where its output starts: OFFSET, or
//               later when the scrollback no longer holds it), the terminal's output on channel 1
//               from there on, {"from":N} again after a gap (a leg too slow for the ring), and at
//               the rank's end {"exit":CODE,"reason":"..."}, after which the leg closes. From the
//               leg: typing on channel 0; {"resize":[ROWS,COLS]} and {"signal":N} (to the
//               terminal's foreground process group) on channel 3. Any number of legs; one that
//               goes away leaves the job running. A dir without a live terminal gets
//               {"error":"..."} and a close.
//   exec {"dir":DIR,"command":CMD,"tty":BOOL,"rows":R,"cols":C}
//               runs CMD with bash into that rank while its run step lives (`berth exec --into`):
//               as the rank's user, in its cgroup, work dir and environment, counted among its
//               processes (stopped with it; its end waits for it). The connection becomes the
//               leg of the command's own terminal, framed as above: a pseudo-terminal of R x C
//               with "tty", else a socket that takes its stdout and stderr (its stdin is empty).
//               At the command's exit {"exit":CODE,"reason":""} and a close; a leg that goes
//               away first sends the command SIGHUP and SIGTERM. A rank not running gets
//               {"error":"..."} and a close, and so does one in a container image unless the
//               request says "container":true (the command enters the container itself: the
//               agent's `podman exec`).
//
// It is a child subreaper, starts each step's bash with clone(CLONE_VM | CLONE_VFORK) straight
// from its own small image (no per-job process of its own), reaps on SIGCHLD through a signalfd,
// and records each rank's end only once every process of it is gone. Processes that outlive the
// bash that started them are re-parented to it; it tells whose they are by their process group,
// else by the BERTH_JOB_ID / BERTH_ATTEMPT / BERTH_NODE_RANK they inherited, and a process that
// shed both is counted with every rank that is ending at the time (it is stopped with them). It
// watches the lease file of each plan like the per-job supervisor. An interactive rank's run step
// (RunPlan::tty) runs on a pseudo-terminal that this process holds and reads, whether or not
// anyone is attached, into output.log and a scrollback (supervise/terminal.h). SIGTERM, SIGINT or
// SIGHUP stop
// every rank, after which it exits; it also exits when it has no rank to run and no agent
// connected. Single-threaded.
#pragma once

#include "common/clock.h"

namespace berth {

// The socket's name in the agent's state directory.
inline constexpr char kNodeSupervisorSocket[] = "supervisor.sock";
// The node supervisor's pid, in the agent's state directory (for `berth local down`).
inline constexpr char kNodeSupervisorPidFile[] = "supervisor.pid";

// main() of `berth-supervisor __node`: serves `listen_fd` (a listening unix socket) until done.
// `state_dir` is where it writes kNodeSupervisorPidFile.
int NodeSupervisorMain(int listen_fd, const std::string& state_dir,
                       const Clock& clock = SystemClock::Get());

}  // namespace berth
