// The node supervisor's parts (supervise/node_supervisor.h says what it does): the ranks it runs,
// their terminals and the commands run into them, and the NodeSupervisor class itself, whose
// methods are in node_supervisor.cpp (the loop, starting and ending steps, strays, leases) and
// node_supervisor_legs.cpp (terminal legs and commands run into ranks). Internal: include nowhere
// else.
//
// Thread-safety: the node supervisor is one thread (a poll loop); nothing here is shared.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "supervise/cgroup_pool.h"
#include "supervise/node_supervisor.h"
#include "supervise/step.h"
#include "supervise/supervisor.h"
#include "supervise/terminal.h"

namespace berth::node_supervisor_internal {

// How often leases are read while ranks run, and how long SIGKILL sweeps repeat.
constexpr int64_t kLeaseCheckMs = 200;
constexpr int64_t kKillSweepMs = 200;
// A node supervisor that no agent has connected to for this long, with nothing to run, exits.
constexpr int64_t kUnclaimedMs = 5000;
// At most this many step children on their way to their exec at once.
constexpr size_t kMaxStarting = 64;
// What an interactive rank's scrollback holds.
constexpr size_t kScrollbackBytes = 256 << 10;

// Writes all of `data` to the file `fd`; false on an error.
inline bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// An interactive rank's terminal while its run step lives (RunPlan::tty): the master side, read
// whenever the job prints, into the scrollback and output.log.
// Attached legs share it, and keep it after the rank's end until they have sent the last output
// and the exit.
struct RankTerminal {
  int master = -1;
  int log_fd = -1;  // output.log, held open while the step runs
  Scrollback scrollback{kScrollbackBytes};
  std::string to_job;  // what legs typed that the terminal has not taken yet
  bool input = true;   // it takes typing (an exec without a terminal does not: its stdin is empty)
  pid_t group = 0;     // where signals go when it has no foreground group (an exec without one)
  bool ended = false;  // the rank (or the exec) ended: with its exit code and reason
  int exit_code = 0;
  std::string reason;
  ~RankTerminal() {
    if (master >= 0) ::close(master);
    if (log_fd >= 0) ::close(log_fd);
  }
};

// One job rank and the step of it that runs now.
struct Rank {
  std::string dir;
  RunPlan plan;
  std::string tag;  // "JOB ATTEMPT RANK" from its environment: how its strays are known
  enum class Step { kPull, kSetup, kRun };
  Step step = Step::kRun;
  pid_t main = 0;                          // the step's bash while it lives
  std::unique_ptr<StartingStep> starting;  // its child until it has exec'd bash
  std::set<pid_t> groups;                  // the process groups of its steps
  bool step_over = false;                  // the step's bash has exited: waiting for what it left
  int exit_code = 0;
  std::string error;      // the step could not run
  bool stop = false;      // asked to stop (the agent, the lease, a stop signal)
  bool stopped = false;   // the step was sent SIGTERM for it
  bool kill_now = false;  // the lease is past its kill point: no grace
  int64_t kill_at = -1;
  int64_t warn_at = -1;
  std::optional<RankCgroup> cgroup;  // where its processes run (RunPlan::cgroup)
  // Its step is over and its cgroup was read empty in this round, nothing started into it since:
  // Finish neither sweeps it for a kill nor reads it again to reuse it.
  bool cgroup_seen_empty = false;
  int64_t cpu_us = 0;                      // CPU time of its processes reaped so far
  int64_t max_rss_kib = 0;                 // the largest of their peak RSS
  std::shared_ptr<RankTerminal> terminal;  // an interactive rank's, while its run step lives
};

// A command run into a live rank (`exec JSON`, see the header): its output on a terminal of its
// own (a pseudo-terminal, or a socket without one) that its one leg reads.
struct RankExec {
  std::string dir;  // its rank's
  std::shared_ptr<RankTerminal> terminal;
  bool hung_up = false;  // its leg went away: it was sent SIGHUP and SIGTERM
};

inline std::string TagOf(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::string job = get("BERTH_JOB_ID");
  if (job.empty()) return "";
  return job + " " + get("BERTH_ATTEMPT") + " " + get("BERTH_NODE_RANK");
}

// The tag of a container's monitor, which podman starts with an environment of its own: from the
// container's name on its command line ("conmon ... -n berth-JOB-ATTEMPT-RANK-STEP ...", the
// names agent/container.h gives). "" if it is none.
inline std::string TagOfContainerMonitor(pid_t pid) {
  const std::string cmdline = ReadFileOr("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args = Split(cmdline, '\0');
  if (args.empty() || args[0].substr(args[0].rfind('/') + 1) != "conmon") return "";
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "-n" || !StartsWith(args[i + 1], "berth-")) continue;
    std::vector<std::string> parts = Split(args[i + 1].substr(6), '-');
    if (parts.size() < 3) return "";
    for (size_t p = 0; p < 3; ++p) {
      if (parts[p].empty() || !std::all_of(parts[p].begin(), parts[p].end(),
                                           [](char c) { return c >= '0' && c <= '9'; }))
        return "";
    }
    return parts[0] + " " + parts[1] + " " + parts[2];
  }
  return "";
}

// The tag of a process from the environment it started with, else from its command line when it
// is a container's monitor ("" if neither or unreadable).
inline std::string TagOfProcess(pid_t pid) {
  std::string env = ReadFileOr("/proc/" + std::to_string(pid) + "/environ");
  std::map<std::string, std::string> vars;
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) end = env.size();
    std::string_view entry(env.data() + at, end - at);
    if (entry.substr(0, 6) == "BERTH_") {
      auto eq = entry.find('=');
      if (eq != std::string_view::npos) {
        vars.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
      }
    }
    at = end + 1;
  }
  std::string tag = TagOf(vars);
  return tag.empty() ? TagOfContainerMonitor(pid) : tag;
}

// A process's real uid (/proc/PID/status, which a non-dumpable process does not hide).
inline std::optional<uid_t> RealUidOf(pid_t pid) {
  for (const std::string& line :
       Split(ReadFileOr("/proc/" + std::to_string(pid) + "/status"), '\n')) {
    if (StartsWith(line, "Uid:")) {
      return static_cast<uid_t>(std::strtoul(line.c_str() + 4, nullptr, 10));
    }
  }
  return std::nullopt;
}
class NodeSupervisor {
 public:
  NodeSupervisor(int listen_fd, std::string state_dir, const Clock& clock)
      : listen_fd_(listen_fd), state_dir_(std::move(state_dir)), clock_(clock) {}

  int Run();

 private:
  struct Client {
    int fd;
    std::string buffer;
  };
  // A connection attached to an interactive rank's terminal.
  struct Leg {
    int fd = -1;
    std::shared_ptr<RankTerminal> terminal;
    std::string in;          // received, not yet a whole frame
    std::string out;         // frames being sent
    size_t out_pos = 0;      // of `out`, sent
    int64_t sent = 0;        // the scrollback's offset sent up to
    bool announced = false;  // its first {"from":N} is out
    bool exit_sent = false;
  };

  bool Done();

  void Poll();

  int64_t WaitMs();

  void TakeSignals();

  void Accept();

  void ReadClient(int fd);

  // --- terminal legs (`attach DIR OFFSET`, see the header) ---

  void Attach(int fd, const std::string& args, std::string received);

  void AddLeg(int fd, std::shared_ptr<RankTerminal> terminal, std::string received, int64_t offset);

  // Tells a would-be leg why it gets no terminal ({"error":...}), and closes it.
  static void Refuse(int fd, const std::string& why);

  // --- commands run into a live rank (`exec JSON`, see the header) ---

  void Exec(int fd, const std::string& args, std::string received);

  // The command `pid` run into a rank ended with `exit_code`: its leg gets what it printed last
  // and its exit, then closes.
  void ExecDone(pid_t pid, int exit_code);

  // A command whose client went away goes too, as over a dropped ssh connection: SIGHUP and
  // SIGTERM to its process group (SIGKILL comes with its rank's end, if it lingers).
  void HangUpUnwatchedExecs();

  static bool LegHasOutput(const Leg& leg);

  static short LegEvents(const Leg& leg);

  void ServeLeg(Leg& leg, short revents);

  // What the client sent: typing for the job, a new window size, a signal for the job's
  // foreground process group.
  void ReadLegFrames(Leg& leg);

  // Sends the leg what it has not had: where its output starts (again after a gap the ring
  // dropped), the output, and once the rank ended its exit; then closes it.
  void WriteLeg(Leg& leg);

  static void CloseLeg(Leg& leg);

  // Hands the terminal what legs typed, as much as it takes now.
  static void WriteToJob(RankTerminal& t);

  void HandleLine(std::string_view line);

  void StartWaiting();

  void Start(const std::string& dir);

  // After the pull (or without one): setup, or the run step where there is none.
  void BeginSetup(Rank& rank);

  // After setup (or without one): the run step, unless the rank was stopped first.
  void BeginRun(Rank& rank);

  void StartStep(Rank& rank, Rank::Step step);

  // The step's child has exec'd bash or failed to (or its start failed outright).
  void Started(Rank& rank);

  void Reap();

  // Children that are not a live step's bash, each with the rank it belongs to (null: unknown):
  // by its process group, the rank's cgroup it is in, or its tag (its environment, or a
  // container's name).
  std::vector<std::pair<pid_t, Rank*>> Strays();

  // Whether everything `rank` runs stays in its cgroup: it has one, its step's child is in it (no
  // longer starting), and it does not run as root, who may move its processes elsewhere.
  static bool ContainedByItsCgroup(const Rank& rank);

  // Sends `sig` to every process of `rank`: its steps' groups, its live bash and the strays given,
  // and all their descendants.
  // With a cgroup, everything in it too (a double-forked, setsid-ed leftover included), and a
  // SIGKILL kills the whole cgroup at once.
  void SignalRank(Rank& rank, int sig, const std::set<pid_t>& strays);

  void Tick();

  // Ended ranks' cgroups go while no rank is on its way to start (a burst of launches does not wait
  // for their rmdirs), or a few at a time once many are waiting; one still busy (a process not yet
  // reaped) is tried again later, a few times.
  void RemoveEndedCgroups(bool all);

  // Reads what the job printed on its terminal, into the scrollback and the log, until nothing is
  // left; at the end of the job's side (EIO: every process closed the terminal) the master closes.
  static void ReadTerminal(RankTerminal& t);

  // The step and everything it started are gone.
  void StepDone(Rank& rank);

  void Finish(Rank& rank, SupervisorEvent end);

  int listen_fd_;
  CgroupHost cgroups_;
  std::string state_dir_;
  const Clock& clock_;
  int signal_fd_ = -1;
  std::string self_;  // "PID\n"
  std::string socket_path_;
  ino_t socket_ino_ = 0;
  int64_t started_ = 0;
  bool claimed_ = false;   // an agent has connected
  bool stop_all_ = false;  // a stop signal came: stop every rank, then exit
  int64_t next_lease_check_ = 0;
  std::vector<Client> clients_;
  std::vector<Leg> legs_;
  std::map<std::string, std::unique_ptr<Rank>> ranks_;    // by job directory
  std::map<pid_t, RankExec> execs_;                       // commands run into ranks, by pid
  std::map<pid_t, Rank*> mains_;                          // live steps' bash
  std::map<int, Rank*> starting_;                         // StartingStep::fd() -> its rank
  std::deque<std::string> waiting_;                       // starts not taken on yet, in order
  std::set<std::string> stopped_waiting_;                 // of those, told to stop
  RankCgroupPool cgroup_pool_{CgroupHost{}, 0};           // idle rank cgroups, for reuse (v1)
  std::deque<std::pair<RankCgroup, int>> ended_cgroups_;  // to remove, with the tries so far
  std::map<pid_t, std::string> stray_owners_;  // strays seen, by the job dir of their rank
  size_t max_starting_ = kMaxStarting;
};

}  // namespace berth::node_supervisor_internal
