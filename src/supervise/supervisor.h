// The job supervisor: a small process that runs one rank of one attempt of a job and outlives the
// agent.
//
// The agent writes <dir>/run.json and starts a supervisor for it (forked by the spawner, or
// `berth-supervisor __supervise <dir>`), which detaches into its own
// session, becomes a child subreaper (so that every process the job leaves behind stays its
// descendant), runs setup then run with bash (started with clone(CLONE_VM | CLONE_VFORK): no page
// tables copied) in the job's workdir as a process group, with output
// appended to <dir>/output.log, and records each step in <dir>/events (one line each: "setting_up",
// "running", "exited CODE PHASE REASON"). SIGTERM to the supervisor stops the job: SIGTERM to all
// of its processes, then SIGKILL after the grace period; no process of the job survives. Because
// the record lives in files, a restarted agent re-adopts a running job and reports exits that
// happened while it was away.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "supervise/cgroup.h"

namespace berth {

// What the supervisor runs: written by the agent as <dir>/run.json.
struct RunPlan {
  // Run the job's processes as this account (uid, gid, groups); the files the job gets (its
  // output log, a script too long for the command line) are made its own. Only a root supervisor
  // can; unset: as the supervisor's own user.
  struct RunAs {
    std::string user;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
  };
  std::optional<RunAs> run_as;
  std::string workdir;
  // A container job's pull step (agent/container.h): run before setup, with setup's environment,
  // as a phase of its own ("pulling" event; a failure ends the rank in phase "pull", its reason
  // from PullFailureReason). Empty: none.
  std::string pull;
  std::string setup;
  std::string run;
  std::map<std::string, std::string> setup_env;  // complete environments
  std::map<std::string, std::string> run_env;
  int64_t kill_grace_ms = 10'000;
  // The task's `signal`: sent to every process of the run step warn_after_ms after it starts (0:
  // none), so that the job can checkpoint before its time limit.
  int warn_signal = 0;
  int64_t warn_after_ms = 0;
  // The agent's lease file ("TERM_AT KILL_AT", monotonic ms). When the agent cannot renew its
  // node's lease (it is partitioned, frozen or dead), the supervisor stops the job by itself:
  // SIGTERM at TERM_AT, SIGKILL at KILL_AT, both before the server's lease runs out and it may
  // start the job elsewhere.
  std::string lease_file;
  // The rank's cgroup (supervise/cgroup.h), relative to the supervisor's own: "" runs it without
  // one. The node supervisor makes it with `limits` before the first step and removes it after the
  // last.
  std::string cgroup;
  RankLimits limits;
  // An interactive rank: its run step gets a pseudo-terminal of this size as its
  // controlling terminal and its stdin, stdout and stderr, in a session of its own; what it prints
  // goes to output.log as ever and to a scrollback ring (supervise/terminal.h). Only the node
  // supervisor runs one. Unset: stdin is /dev/null and output goes to the log.
  struct Tty {
    int rows = 24;
    int cols = 80;
  };
  std::optional<Tty> tty;
};

// Writes the lease file for a lease renewed at monotonic time `renewed_at_ms` for `lease_ms`.
Status WriteLeaseFile(const std::string& path, int64_t renewed_at_ms, int64_t lease_ms);

Status WriteRunPlan(const std::string& dir, const RunPlan& plan);
Result<RunPlan> ReadRunPlan(const std::string& dir);

// The signals the supervisor blocks and takes with sigtimedwait: SIGTERM, SIGINT and SIGHUP (stop
// the job) and SIGCHLD. Whoever forks a supervisor blocks them in the parent before the fork, so
// that the child holds them blocked from its first instruction: a stop sent the moment its pid is
// known stays pending until SupervisorMain takes it and records the job's end, instead of killing
// the supervisor before it has written anything.
sigset_t SupervisorWaitedSignals();

// Starts a supervisor for `dir` (fork + exec of `self_exe __supervise dir`) and returns its pid.
// The child starts a new session at once, so signals to the agent's process group never reach the
// job. Safe to call from any thread of a multi-threaded process; blocks SupervisorWaitedSignals()
// in the calling thread across the fork.
Result<pid_t> SpawnSupervisor(const std::string& self_exe, const std::string& dir);

// The supervisor process's main(). Returns its exit status. Expects to be entered with
// SupervisorWaitedSignals() already blocked (see above); a stop signal pending at entry ends the
// job with an "exited" event before setup or run starts.
// `clock` times the lease checks and kill deadlines (monotonic time).
int SupervisorMain(const std::string& dir, const Clock& clock = SystemClock::Get());

// A rank taken on by a supervisor: its plan, and its output log open for appending.
struct OpenedRank {
  RunPlan plan;
  int log_fd = -1;
};
// Takes on the rank of `dir`: writes `pid_line` to <dir>/supervisor.pid, opens <dir>/output.log
// (the rank's user's, if it runs as one) and reads the plan. On failure, records the rank's end
// ("exited 127 launch" with the reason) and returns nothing.
std::optional<OpenedRank> OpenRank(const std::string& dir, const std::string& pid_line);

// Why a pull step that exited with `exit_code` failed, from the rank's output log `log_path` (the
// last "Error: " line podman printed): "image pull failed: ..."; or "file_mounts: cannot place
// ..." when the file mounts placed before the pull failed.
std::string PullFailureReason(const std::string& log_path, int exit_code);
// Why a setup or run step exited 127 or 126, from the last line of the rank's output log that the
// shell printed about it: "command not found: python" (bash's "python: command not found", sh's
// "python: not found"), "not executable: ./train.sh" ("Permission denied"). "" for other codes or
// when the log says nothing of it.
std::string ExitReason(const std::string& log_path, int exit_code);
// The image a pull step resolved, from its last "berth: image REF is DIGEST" line in the log:
// "REF@DIGEST" ("" if none). The supervisor records it as a second "pulling" event.
std::string PulledImage(const std::string& log_path);

// One line of <dir>/events.
struct SupervisorEvent {
  std::string kind;    // "pulling", "setting_up", "running", "usage", "exited"
  int exit_code = 0;   // for "exited"
  std::string phase;   // "pull", "setup", "run" or "launch" for "exited"
  std::string reason;  // for "exited"; for a "pulling" after the pull, the image it resolved
  // For "usage" (written with its rank's "exited", in one write): what the rank used; -1 unknown.
  int64_t peak_memory_bytes = -1;
  int64_t cpu_ms = -1;
};
std::vector<SupervisorEvent> ParseEvents(const std::string& text);
// At the end of a rank with a cgroup: sets `end`'s reason (and exit code 137) where the kernel
// killed a process of it for its memory limit and it failed; then kills what is left in it, and
// returns what it says the rank used (RankCgroup::TakeUsage). The caller removes it, or keeps it
// for the next rank (supervise/cgroup_pool.h). `seen_empty`: the caller has just read it empty and
// started nothing into it since, so there is nothing to kill.
RankUsage EndRankCgroup(RankCgroup& cgroup, const RankLimits& limits, SupervisorEvent& end,
                        bool seen_empty = false);
// The "usage" event of a rank: peak memory from its cgroup where measured (`cgroup_peak` >= 0),
// else its largest process's RSS (`max_rss_kib`, from the kernel's rusage); CPU time from rusage.
SupervisorEvent UsageEvent(int64_t cgroup_peak, int64_t max_rss_kib, int64_t cpu_us);
// Appends one event line to <dir>/events (O_APPEND; one write).
void AppendEvent(const std::string& dir, const SupervisorEvent& event);
// A rank's end: its "usage" and "exited" lines in one write, so that a reader sees both or neither.
void AppendEnd(const std::string& dir, const SupervisorEvent& usage, const SupervisorEvent& end);

}  // namespace berth
