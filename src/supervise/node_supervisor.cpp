#include "supervise/node_supervisor.h"

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
#include "supervise/step.h"
#include "supervise/supervisor.h"
#include "supervise/terminal.h"

namespace berth {

namespace {

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
bool WriteAll(int fd, std::string_view data) {
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

std::string TagOf(const std::map<std::string, std::string>& env) {
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
std::string TagOfContainerMonitor(pid_t pid) {
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
std::string TagOfProcess(pid_t pid) {
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
std::optional<uid_t> RealUidOf(pid_t pid) {
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

  int Run() {
    sigset_t waited = SupervisorWaitedSignals();
    ::sigprocmask(SIG_BLOCK, &waited, nullptr);
    signal_fd_ = ::signalfd(-1, &waited, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0) return 1;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ::signal(SIGPIPE, SIG_IGN);
    ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
    ::fcntl(listen_fd_, F_SETFD, FD_CLOEXEC);
    self_ = std::to_string(::getpid()) + "\n";
    socket_path_ = state_dir_ + "/" + kNodeSupervisorSocket;
    struct stat st {};
    if (::stat(socket_path_.c_str(), &st) == 0) socket_ino_ = st.st_ino;
    WriteFileInPlace(state_dir_ + "/" + kNodeSupervisorPidFile, self_, 0644);
    started_ = clock_.Monotonic();
    cgroups_ = DetectCgroups();
    if (cgroups_.layout != CgroupLayout::kNone) {
      RemoveIdleRankCgroups(cgroups_, AgentCgroupName(state_dir_));
    }
    cgroup_pool_ = RankCgroupPool(cgroups_, kIdleRankCgroups);
    // A child on its way to its exec holds a pipe: a burst of starts must not use up the
    // descriptors this process may open.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
      max_starting_ =
          files.rlim_cur > 18 ? std::clamp<size_t>((files.rlim_cur - 16) / 2, 1, kMaxStarting) : 1;
    }
    while (true) {
      Poll();
      Reap();
      Tick();
      StartWaiting();
      RemoveEndedCgroups(/*all=*/false);
      if (Done()) break;
    }
    RemoveEndedCgroups(/*all=*/true);
    if (cgroups_.layout != CgroupLayout::kNone) {
      RemoveIdleRankCgroups(cgroups_, AgentCgroupName(state_dir_));
    }
    ::close(listen_fd_);
    // The socket and pid file go, unless a newer node supervisor has taken their names.
    if (::stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_ino_) {
      ::unlink(socket_path_.c_str());
    }
    std::string pid_file = state_dir_ + "/" + kNodeSupervisorPidFile;
    if (ReadFileOr(pid_file) == self_) ::unlink(pid_file.c_str());
    return 0;
  }

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

  bool Done() {
    if (!ranks_.empty() || !waiting_.empty() || !legs_.empty() || !execs_.empty()) return false;
    if (stop_all_) return true;
    if (!clients_.empty()) return false;
    if (!claimed_ && clock_.Monotonic() - started_ < kUnclaimedMs) return false;
    // Nothing to run and no agent: leave, unless an agent is connecting right now.
    Accept();
    return clients_.empty();
  }

  void Poll() {
    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
    const size_t first_starting = fds.size();
    for (const auto& [fd, rank] : starting_) fds.push_back({fd, POLLIN, 0});
    const size_t first_terminal = fds.size();
    std::vector<RankTerminal*> terminals;
    auto add = [&](RankTerminal* t) {
      if (!t || t->master < 0) return;
      const short out = t->to_job.empty() ? 0 : POLLOUT;
      fds.push_back({t->master, static_cast<short>(POLLIN | out), 0});
      terminals.push_back(t);
    };
    for (const auto& [dir, rank] : ranks_) add(rank->terminal.get());
    for (const auto& [pid, exec] : execs_) add(exec.terminal.get());
    const size_t first_leg = fds.size();
    for (const Leg& leg : legs_) fds.push_back({leg.fd, LegEvents(leg), 0});
    ::poll(fds.data(), fds.size(), static_cast<int>(WaitMs()));
    if (fds[0].revents) TakeSignals();
    if (fds[1].revents) Accept();
    for (size_t i = first_starting; i < first_terminal; ++i) {
      if (fds[i].revents) Started(*starting_.at(fds[i].fd));
    }
    for (size_t i = first_terminal; i < first_leg; ++i) {
      if (fds[i].revents & POLLOUT) WriteToJob(*terminals[i - first_terminal]);
      if (fds[i].revents & ~POLLOUT) ReadTerminal(*terminals[i - first_terminal]);
    }
    for (size_t i = first_leg; i < fds.size(); ++i) {
      if (fds[i].revents) ServeLeg(legs_[i - first_leg], fds[i].revents);
    }
    std::erase_if(legs_, [](const Leg& leg) { return leg.fd < 0; });
    HangUpUnwatchedExecs();
    // Clients in the order they connected: a restarted agent's lines follow the old one's.
    for (size_t i = 2; i < first_starting; ++i) {
      if (fds[i].revents) ReadClient(fds[i].fd);
    }
    std::erase_if(clients_, [](const Client& c) { return c.fd < 0; });
  }

  int64_t WaitMs() {
    int64_t now = clock_.Monotonic();
    int64_t wait = -1;
    auto until = [&](int64_t at) {
      if (at < 0) return;
      int64_t ms = std::max<int64_t>(1, at - now);
      wait = wait < 0 ? ms : std::min(wait, ms);
    };
    for (const auto& [dir, rank] : ranks_) {
      until(rank->kill_at);
      until(rank->warn_at);
      if (!rank->plan.lease_file.empty()) until(next_lease_check_);
    }
    if (ranks_.empty() && clients_.empty()) until(started_ + kUnclaimedMs);
    if (!waiting_.empty() && starting_.size() < max_starting_) wait = 0;
    if (!ended_cgroups_.empty()) until(now + 50);  // removals left for later
    return wait;
  }

  void TakeSignals() {
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      if (info.ssi_signo != SIGCHLD) stop_all_ = true;
    }
  }

  void Accept() {
    while (true) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      // Only the agent's user (or root) may give this process work.
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
          (cred.uid != ::geteuid() && cred.uid != 0)) {
        ::close(fd);
        continue;
      }
      // "steps=pull": it runs RunPlan::pull (agent/launcher.cpp asks).
      std::string hello = "berth-node-supervisor " + std::to_string(::getpid()) + " steps=pull\n";
      if (::write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) {
        ::close(fd);
        continue;
      }
      claimed_ = true;
      clients_.push_back({fd, {}});
    }
  }

  void ReadClient(int fd) {
    auto it =
        std::find_if(clients_.begin(), clients_.end(), [&](const Client& c) { return c.fd == fd; });
    if (it == clients_.end()) return;
    char buf[16384];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {  // the agent is gone; its ranks are not
        ::close(fd);
        it->fd = -1;
        break;
      }
      it->buffer.append(buf, static_cast<size_t>(n));
    }
    size_t at = 0;
    for (size_t nl; (nl = it->buffer.find('\n', at)) != std::string::npos; at = nl + 1) {
      std::string_view line = std::string_view(it->buffer).substr(at, nl - at);
      const bool attach = line.substr(0, 7) == "attach ";
      if (attach || line.substr(0, 5) == "exec ") {  // the connection becomes a terminal leg
        std::string args(line.substr(attach ? 7 : 5));
        std::string rest = it->buffer.substr(nl + 1);
        const int leg_fd = it->fd;
        it->fd = -1;  // not closed: the leg has it
        if (attach) {
          Attach(leg_fd, args, std::move(rest));
        } else {
          Exec(leg_fd, args, std::move(rest));
        }
        return;
      }
      HandleLine(line);
    }
    it->buffer.erase(0, at);
  }

  // --- terminal legs (`attach DIR OFFSET`, see the header) ---

  void Attach(int fd, const std::string& args, std::string received) {
    const size_t space = args.rfind(' ');
    const std::string dir = space == std::string::npos ? args : args.substr(0, space);
    int64_t offset = 0;
    if (space != std::string::npos) {
      const std::string number = args.substr(space + 1);
      std::from_chars(number.data(), number.data() + number.size(), offset);
      offset = std::max<int64_t>(0, offset);
    }
    auto it = ranks_.find(dir);
    if (it == ranks_.end() || !it->second->terminal || it->second->terminal->ended) {
      return Refuse(fd, "no interactive rank runs in " + dir);
    }
    AddLeg(fd, it->second->terminal, std::move(received), offset);
  }

  void AddLeg(int fd, std::shared_ptr<RankTerminal> terminal, std::string received,
              int64_t offset) {
    Leg leg;
    leg.fd = fd;
    leg.terminal = std::move(terminal);
    leg.in = std::move(received);
    leg.sent = offset;
    legs_.push_back(std::move(leg));
    ReadLegFrames(legs_.back());
  }

  // Tells a would-be leg why it gets no terminal ({"error":...}), and closes it.
  static void Refuse(int fd, const std::string& why) {
    std::string refusal;
    AppendTermFrame(&refusal, TermChannel::kControl, SerializeJson(json::object{{"error", why}}));
    (void)!::send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }

  // --- commands run into a live rank (`exec JSON`, see the header) ---

  void Exec(int fd, const std::string& args, std::string received) {
    auto request = ParseJson(args, "exec");
    if (!request.ok() || !request->is_object()) return Refuse(fd, "exec: not a JSON object");
    const json::object& o = request->as_object();
    auto dir = GetString(o, "dir");
    auto command = GetString(o, "command");
    const json::value* tty = o.if_contains("tty");
    auto rows = GetInt(o, "rows", 24), cols = GetInt(o, "cols", 80);
    if (!dir.ok() || !command.ok() || command->empty() || (tty && !tty->is_bool()) || !rows.ok() ||
        !cols.ok()) {
      return Refuse(fd, "exec: needs dir, command, and tty, rows and cols when given");
    }
    auto it = ranks_.find(*dir);
    if (it == ranks_.end() || it->second->step != Rank::Step::kRun || it->second->main <= 0 ||
        it->second->stop) {
      return Refuse(fd, "the job's rank is not running here (it has not started, or is ending)");
    }
    Rank& rank = *it->second;
    // A container rank's command must enter its container itself (the agent's podman exec), or
    // it would run on the node's system.
    const json::value* container = o.if_contains("container");
    if (!rank.plan.pull.empty() && !(container && container->is_bool() && container->as_bool())) {
      return Refuse(fd, "the job runs in a container image: its command must enter it");
    }
    const bool with_tty = tty && tty->as_bool();
    auto terminal = std::make_shared<RankTerminal>();
    int child_fd = -1;  // the terminal's (or the socket's) other side, for the child
    if (with_tty) {
      auto pty = OpenPty(static_cast<int>(std::clamp<int64_t>(*rows, 1, 1000)),
                         static_cast<int>(std::clamp<int64_t>(*cols, 1, 1000)),
                         rank.plan.run_as ? static_cast<int64_t>(rank.plan.run_as->uid) : -1);
      if (!pty.ok()) return Refuse(fd, "cannot open a terminal: " + pty.status().message());
      terminal->master = pty->master;
      child_fd = pty->slave;
    } else {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        return Refuse(fd, std::string("cannot make a socket: ") + strerror(errno));
      }
      ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
      ::shutdown(pair[0], SHUT_WR);  // its stdin is empty
      terminal->master = pair[0];
      terminal->input = false;
      child_fd = pair[1];
    }
    const CgroupEntry entry = rank.cgroup ? rank.cgroup->Entry() : CgroupEntry{};
    pid_t pid = -1;
    std::string error;
    {
      StartingStep step(*command, rank.dir + "/exec.sh", rank.plan.workdir, rank.plan.run_env,
                        rank.plan.run_as, child_fd, entry, with_tty ? child_fd : -1);
      pid = step.pid();
      error = step.Wait();  // a moment: until its exec of bash
    }
    ::close(child_fd);
    if (!error.empty()) return Refuse(fd, "cannot run the command: " + error);
    // Stopped with its rank, and its end waits for it, as for any process of the rank.
    rank.groups.insert(pid);
    terminal->group = pid;
    execs_[pid] = RankExec{rank.dir, terminal};
    AddLeg(fd, std::move(terminal), std::move(received), 0);
  }

  // The command `pid` run into a rank ended with `exit_code`: its leg gets what it printed last
  // and its exit, then closes.
  void ExecDone(pid_t pid, int exit_code) {
    auto it = execs_.find(pid);
    if (it == execs_.end()) return;
    RankTerminal& t = *it->second.terminal;
    ReadTerminal(t);
    t.ended = true;
    t.exit_code = exit_code;
    t.to_job.clear();
    if (t.master >= 0) ::close(t.master);
    t.master = -1;
    for (Leg& leg : legs_) {
      if (leg.fd >= 0 && leg.terminal.get() == &t) WriteLeg(leg);
    }
    execs_.erase(it);
  }

  // A command whose client went away goes too, as over a dropped ssh connection: SIGHUP and
  // SIGTERM to its process group (SIGKILL comes with its rank's end, if it lingers).
  void HangUpUnwatchedExecs() {
    for (auto& entry : execs_) {
      RankExec& exec = entry.second;
      if (exec.hung_up) continue;
      const bool watched = std::any_of(legs_.begin(), legs_.end(), [&exec](const Leg& leg) {
        return leg.fd >= 0 && leg.terminal == exec.terminal;
      });
      if (watched) continue;
      exec.hung_up = true;
      ::kill(-entry.first, SIGHUP);
      ::kill(-entry.first, SIGTERM);
    }
  }

  static bool LegHasOutput(const Leg& leg) {
    return leg.out_pos < leg.out.size() || !leg.announced ||
           leg.sent < leg.terminal->scrollback.total() || (leg.terminal->ended && !leg.exit_sent);
  }

  static short LegEvents(const Leg& leg) {
    short events = LegHasOutput(leg) ? POLLOUT : 0;
    // What a leg types waits while the terminal has not taken the last of it.
    if (!leg.terminal->ended && leg.terminal->to_job.size() < kMaxTermFrame) events |= POLLIN;
    return events;
  }

  void ServeLeg(Leg& leg, short revents) {
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      for (size_t total = 0; total < (256 << 10) && leg.fd >= 0;) {
        ssize_t n = ::recv(leg.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
          CloseLeg(leg);  // the client went away; the job goes on
          return;
        }
        leg.in.append(buf, static_cast<size_t>(n));
        total += static_cast<size_t>(n);
      }
      ReadLegFrames(leg);
    }
    if (leg.fd >= 0) WriteLeg(leg);
  }

  // What the client sent: typing for the job, a new window size, a signal for the job's
  // foreground process group.
  void ReadLegFrames(Leg& leg) {
    RankTerminal& t = *leg.terminal;
    size_t at = 0;
    while (leg.fd >= 0) {
      size_t used = 0;
      auto frame = TakeTermFrame(std::string_view(leg.in).substr(at), &used);
      if (!frame.ok()) {
        CloseLeg(leg);
        return;
      }
      if (!*frame) break;
      at += used;
      if ((*frame)->channel == TermChannel::kStdin) {
        if (!t.ended && t.input) t.to_job += (*frame)->payload;
      } else if ((*frame)->channel == TermChannel::kControl && t.master >= 0) {
        auto control = ParseJson((*frame)->payload, "terminal control");
        if (!control.ok() || !control->is_object()) continue;
        const json::object& o = control->as_object();
        if (const json::value* size = o.if_contains("resize");
            size && size->is_array() && size->as_array().size() == 2) {
          auto rows = AsInt(size->as_array()[0]), cols = AsInt(size->as_array()[1]);
          if (rows && cols)
            (void)ResizePty(t.master, static_cast<int>(*rows), static_cast<int>(*cols));
        }
        if (auto sig = GetInt(o, "signal", 0); sig.ok() && *sig > 0 && *sig < 65) {
          pid_t group = t.input ? ::tcgetpgrp(t.master) : -1;
          if (group <= 0) group = t.group;
          if (group > 0) ::kill(-group, static_cast<int>(*sig));
        }
      }
    }
    leg.in.erase(0, at);
    if (!t.to_job.empty()) WriteToJob(t);
  }

  // Sends the leg what it has not had: where its output starts (again after a gap the ring
  // dropped), the output, and once the rank ended its exit; then closes it.
  void WriteLeg(Leg& leg) {
    RankTerminal& t = *leg.terminal;
    while (leg.fd >= 0) {
      if (leg.out_pos == leg.out.size()) {
        leg.out.clear();
        leg.out_pos = 0;
        if (!leg.announced || leg.sent < t.scrollback.total()) {
          int64_t from = 0;
          std::string data = t.scrollback.Since(leg.sent, &from, kMaxTermFrame);
          if (!leg.announced || from != leg.sent) {
            AppendTermFrame(&leg.out, TermChannel::kControl,
                            SerializeJson(json::object{{"from", from}}));
            leg.announced = true;
          }
          leg.sent = from + static_cast<int64_t>(data.size());
          if (!data.empty()) AppendTermFrame(&leg.out, TermChannel::kOutput, data);
        } else if (t.ended && !leg.exit_sent) {
          AppendTermFrame(&leg.out, TermChannel::kControl,
                          SerializeJson(json::object{{"exit", t.exit_code}, {"reason", t.reason}}));
          leg.exit_sent = true;
        } else {
          if (leg.exit_sent) CloseLeg(leg);
          return;
        }
        if (leg.out.empty()) continue;
      }
      if (!SendPending(leg.fd, leg.out, &leg.out_pos)) {
        CloseLeg(leg);
      } else if (leg.out_pos < leg.out.size()) {
        return;  // the socket is full: POLLOUT brings the leg back
      }
    }
  }

  static void CloseLeg(Leg& leg) {
    if (leg.fd >= 0) ::close(leg.fd);
    leg.fd = -1;
  }

  // Hands the terminal what legs typed, as much as it takes now.
  static void WriteToJob(RankTerminal& t) {
    while (!t.to_job.empty() && t.master >= 0) {
      ssize_t n = ::write(t.master, t.to_job.data(), t.to_job.size());
      if (n > 0) {
        t.to_job.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        t.to_job.clear();  // the job's side is gone
      }
    }
  }

  void HandleLine(std::string_view line) {
    if (line.substr(0, 6) == "start ") {
      // In the order they came: a burst waits while max_starting_ children are on their way to
      // their exec (each holds a pipe).
      waiting_.emplace_back(line.substr(6));
      StartWaiting();
    } else if (line.substr(0, 5) == "stop ") {
      std::string dir(line.substr(5));
      auto it = ranks_.find(dir);
      if (it != ranks_.end()) it->second->stop = true;
      if (std::find(waiting_.begin(), waiting_.end(), dir) != waiting_.end()) {
        stopped_waiting_.insert(dir);
      }
    }
  }

  void StartWaiting() {
    while (!waiting_.empty() && starting_.size() < max_starting_) {
      std::string dir = std::move(waiting_.front());
      waiting_.pop_front();
      Start(dir);
      if (stopped_waiting_.erase(dir) > 0) {
        auto it = ranks_.find(dir);
        if (it != ranks_.end()) it->second->stop = true;
      }
    }
  }

  void Start(const std::string& dir) {
    if (dir.empty() || ranks_.count(dir)) return;  // a start sent again
    auto opened = OpenRank(dir, self_);
    if (!opened) return;
    auto owned = std::make_unique<Rank>();
    Rank& rank = *owned;
    rank.dir = dir;
    rank.tag = TagOf(opened->plan.run_env);
    rank.plan = std::move(opened->plan);
    // Not held open while the rank runs: each step opens it again (a node runs more ranks at once
    // than a process may hold files open by default).
    ::close(opened->log_fd);
    ranks_.emplace(dir, std::move(owned));
    if (!rank.plan.cgroup.empty()) {
      // A rank whose limits cannot be set does not run without them. (One left by an earlier node
      // supervisor killed with its ranks was removed when this one started, if empty.)
      auto made = cgroup_pool_.Take(rank.plan.cgroup, rank.plan.limits);
      if (!made.ok()) {
        Finish(rank, {"exited", 127, "launch",
                      "cannot set the job's limits: " + made.status().message()});
        return;
      }
      rank.cgroup = std::move(*made);
    }
    LeaseVerdict lease = CheckLeaseFile(rank.plan.lease_file, clock_.Monotonic());
    rank.stop = stop_all_ || lease.term;
    rank.kill_now = lease.kill;
    if (!rank.plan.pull.empty() && !rank.stop) {
      AppendEvent(dir, {"pulling"});
      StartStep(rank, Rank::Step::kPull);
    } else {
      BeginSetup(rank);
    }
  }

  // After the pull (or without one): setup, or the run step where there is none.
  void BeginSetup(Rank& rank) {
    if (!rank.plan.setup.empty() && !rank.stop) {
      AppendEvent(rank.dir, {"setting_up"});
      StartStep(rank, Rank::Step::kSetup);
    } else {
      BeginRun(rank);
    }
  }

  // After setup (or without one): the run step, unless the rank was stopped first.
  void BeginRun(Rank& rank) {
    if (rank.stop) {
      Finish(rank, {"exited", 143, "run", "stopped before start"});
      return;
    }
    AppendEvent(rank.dir, {"running"});
    if (rank.plan.run.empty()) {
      Finish(rank, {"exited", 0, "run", ""});
      return;
    }
    StartStep(rank, Rank::Step::kRun);
  }

  void StartStep(Rank& rank, Rank::Step step) {
    const bool setup = step != Rank::Step::kRun;  // the pull runs with setup's environment
    rank.step = step;
    rank.step_over = false;
    rank.cgroup_seen_empty = false;
    rank.exit_code = 0;
    rank.error.clear();
    rank.stopped = false;
    rank.kill_at = -1;
    rank.warn_at =
        !setup && rank.plan.warn_signal > 0 ? clock_.Monotonic() + rank.plan.warn_after_ms : -1;
    // Not waited for: the child execs bash on the other CPU while this process goes on with the
    // next rank. Started() learns how it went.
    const std::string log = rank.dir + "/output.log";
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (log_fd < 0) {
      rank.error = "cannot open " + log + ": " + strerror(errno);
      rank.exit_code = 127;
      rank.step_over = true;
      return;
    }
    const std::string& script = step == Rank::Step::kPull    ? rank.plan.pull
                                : step == Rank::Step::kSetup ? rank.plan.setup
                                                             : rank.plan.run;
    const char* file = step == Rank::Step::kPull    ? "/pull.sh"
                       : step == Rank::Step::kSetup ? "/setup.sh"
                                                    : "/run.sh";
    int tty_fd = -1;
    if (step == Rank::Step::kRun && rank.plan.tty) {
      auto pty = OpenPty(rank.plan.tty->rows, rank.plan.tty->cols,
                         rank.plan.run_as ? static_cast<int64_t>(rank.plan.run_as->uid) : -1);
      if (!pty.ok()) {
        ::close(log_fd);
        rank.error = "cannot open the job's terminal: " + pty.status().message();
        rank.exit_code = 127;
        rank.step_over = true;
        return;
      }
      tty_fd = pty->slave;
      rank.terminal = std::make_shared<RankTerminal>();
      rank.terminal->master = pty->master;
      rank.terminal->log_fd = ::dup(log_fd);
    }
    rank.starting = std::make_unique<StartingStep>(
        script, rank.dir + file, rank.plan.workdir, setup ? rank.plan.setup_env : rank.plan.run_env,
        rank.plan.run_as, log_fd, rank.cgroup ? rank.cgroup->Entry() : CgroupEntry{}, tty_fd);
    ::close(log_fd);  // the child has its own (its file table was copied at its start)
    if (tty_fd >= 0) ::close(tty_fd);  // likewise: once the job's side closes, the master reads EIO
    const pid_t pid = rank.starting->pid();
    if (pid < 0) {
      Started(rank);
      rank.step_over = true;
      return;
    }
    starting_[rank.starting->fd()] = &rank;
    rank.main = pid;
    rank.groups.insert(pid);
    mains_[pid] = &rank;
  }

  // The step's child has exec'd bash or failed to (or its start failed outright).
  void Started(Rank& rank) {
    if (!rank.starting) return;
    starting_.erase(rank.starting->fd());
    rank.error = rank.starting->Wait();
    if (!rank.error.empty()) rank.exit_code = 127;
    rank.starting.reset();
  }

  void Reap() {
    int status = 0;
    pid_t pid;
    rusage used{};
    while ((pid = ::wait4(-1, &status, WNOHANG, &used)) > 0) {
      // What it used (with its own reaped children's) counts for its rank, where known.
      auto it = mains_.find(pid);
      Rank* owner = it != mains_.end() ? it->second : nullptr;
      if (auto stray = stray_owners_.find(pid); stray != stray_owners_.end()) {
        // (A step's bash or a command run into a rank is counted as such, whatever a stale entry
        // of a reused pid says.)
        if (!owner && !execs_.count(pid)) {
          owner = ranks_.count(stray->second) ? ranks_.at(stray->second).get() : nullptr;
        }
        stray_owners_.erase(stray);
      }
      if (owner) {
        owner->cpu_us += (used.ru_utime.tv_sec + used.ru_stime.tv_sec) * 1'000'000LL +
                         used.ru_utime.tv_usec + used.ru_stime.tv_usec;
        owner->max_rss_kib = std::max<int64_t>(owner->max_rss_kib, used.ru_maxrss);
      }
      if (auto exec = execs_.find(pid); exec != execs_.end()) {
        if (auto r = ranks_.find(exec->second.dir); r != ranks_.end()) {
          r->second->cpu_us += (used.ru_utime.tv_sec + used.ru_stime.tv_sec) * 1'000'000LL +
                               used.ru_utime.tv_usec + used.ru_stime.tv_usec;
        }
        ExecDone(pid, WIFEXITED(status)     ? WEXITSTATUS(status)
                      : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                            : 1);
        continue;
      }
      if (it == mains_.end()) continue;  // a stray of some rank, reaped
      Rank& rank = *it->second;
      mains_.erase(it);
      rank.main = 0;
      rank.step_over = true;
      if (WIFEXITED(status)) {
        rank.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        rank.exit_code = 128 + WTERMSIG(status);
      }
    }
  }

  // Children that are not a live step's bash, each with the rank it belongs to (null: unknown):
  // by its process group, the rank's cgroup it is in, or its tag (its environment, or a
  // container's name).
  std::vector<std::pair<pid_t, Rank*>> Strays() {
    std::vector<std::pair<pid_t, Rank*>> out;
    std::map<pid_t, Rank*> in_cgroup;  // read once: every rank's processes, where it has a cgroup
    bool cgroups_read = false;
    for (pid_t child : ChildrenOf(::getpid())) {
      if (mains_.count(child)) continue;
      Rank* owner = nullptr;
      pid_t group = ProcessGroupOf(child);
      for (const auto& [dir, rank] : ranks_) {
        if (rank->groups.count(group)) owner = rank.get();
      }
      if (!owner) {
        // (a container's conmon: its own session, an environment podman chose, the rank's
        // cgroup; it must not be taken for a leftover of whichever rank ends next)
        if (!cgroups_read) {
          cgroups_read = true;
          for (const auto& [dir, rank] : ranks_) {
            if (!rank->cgroup) continue;
            for (pid_t pid : rank->cgroup->Pids()) in_cgroup[pid] = rank.get();
          }
        }
        if (auto it = in_cgroup.find(child); it != in_cgroup.end()) owner = it->second;
      }
      if (!owner) {
        // A tag says which rank, but anyone can write one: only a process of the rank's own user
        // is taken at its word.
        const std::string tag = TagOfProcess(child);
        const std::optional<uid_t> real_uid =
            tag.empty() ? std::nullopt : RealUidOf(child);  // (read only when there is a tag)
        for (const auto& [dir, rank] : ranks_) {
          const uid_t uid = rank->plan.run_as ? rank->plan.run_as->uid : ::geteuid();
          if (!tag.empty() && rank->tag == tag && real_uid == uid) owner = rank.get();
        }
      }
      if (owner) stray_owners_[child] = owner->dir;  // its CPU time counts for it when reaped
      out.emplace_back(child, owner);
    }
    return out;
  }

  // Whether everything `rank` runs stays in its cgroup: it has one, its step's child is in it (no
  // longer starting), and it does not run as root, who may move its processes elsewhere.
  static bool ContainedByItsCgroup(const Rank& rank) {
    const uid_t uid = rank.plan.run_as ? rank.plan.run_as->uid : ::geteuid();
    return rank.cgroup && !rank.starting && uid != 0;
  }

  // Sends `sig` to every process of `rank`: its steps' groups, its live bash and the strays given,
  // and all their descendants.
  // With a cgroup, everything in it too (a double-forked, setsid-ed leftover included), and a
  // SIGKILL kills the whole cgroup at once.
  void SignalRank(Rank& rank, int sig, const std::set<pid_t>& strays) {
    std::set<pid_t> roots = strays;
    if (rank.main > 0) roots.insert(rank.main);
    if (rank.cgroup && sig == SIGKILL) rank.cgroup->Kill();
    if (rank.cgroup) roots.merge(rank.cgroup->Pids());
    SignalProcesses(rank.groups, roots, sig);
  }

  void Tick() {
    int64_t now = clock_.Monotonic();
    if (now >= next_lease_check_) {
      next_lease_check_ = now + kLeaseCheckMs;
      std::map<std::string, LeaseVerdict> leases;
      for (auto& [dir, rank] : ranks_) {
        const std::string& file = rank->plan.lease_file;
        if (file.empty()) continue;
        auto it = leases.find(file);
        if (it == leases.end()) it = leases.emplace(file, CheckLeaseFile(file, now)).first;
        rank->stop = rank->stop || it->second.term;
        rank->kill_now = rank->kill_now || it->second.kill;
      }
    }
    // The children that are no step's bash say what an ended rank left behind, unless its cgroup
    // does: a process of another user cannot leave its cgroup, so such a rank in one is over once
    // the cgroup is empty, and the children need not be read (a /proc read, and a look-up of each,
    // every round). Root's can (rootful podman moves a container's monitor out of it on v1).
    bool strays_wanted = false;
    for (auto& [dir, rank] : ranks_) {
      if (stop_all_) rank->stop = true;
      strays_wanted = strays_wanted || (rank->step_over && !ContainedByItsCgroup(*rank));
    }
    std::vector<std::pair<pid_t, Rank*>> strays;
    if (strays_wanted) strays = Strays();
    std::vector<Rank*> done;
    for (auto& [dir, owned] : ranks_) {
      Rank& rank = *owned;
      std::set<pid_t> own;
      for (const auto& [pid, owner] : strays) {
        // A stray that shed its group and environment is counted with every rank that ends.
        if (owner == &rank || (owner == nullptr && rank.step_over)) own.insert(pid);
      }
      bool cgroup_empty = false;
      if (rank.step_over && rank.cgroup && !rank.starting) {
        // Whatever of it is left in its cgroup is its own, wherever it was re-parented (and its
        // CPU time counts for the rank if it is reaped here).
        std::optional<std::set<pid_t>> read = rank.cgroup->ReadPids();
        std::set<pid_t> left = read.value_or(std::set<pid_t>{});
        cgroup_empty = read && left.empty();  // (not when it could not be read)
        for (pid_t pid : left) stray_owners_.try_emplace(pid, rank.dir);
        own.merge(left);
      }
      if (rank.step_over && own.empty()) {
        rank.cgroup_seen_empty = cgroup_empty;
        done.push_back(&rank);
        continue;
      }
      if (rank.main > 0 && rank.warn_at >= 0 && !rank.stop && now >= rank.warn_at) {
        SignalRank(rank, rank.plan.warn_signal, own);  // the warning before its time limit
        rank.warn_at = -1;
      }
      if (rank.stop || rank.step_over) rank.warn_at = -1;  // too late to warn
      if (rank.stop && !rank.stopped) {
        rank.stopped = true;
        SignalRank(rank, SIGTERM, own);
        rank.kill_at = now + rank.plan.kill_grace_ms;
      }
      if (rank.step_over && rank.kill_at < 0) {
        // The script is over; whatever it left running (background jobs, daemons) goes too.
        SignalRank(rank, SIGTERM, own);
        rank.kill_at = now + std::min<int64_t>(rank.plan.kill_grace_ms, 2000);
      }
      if (rank.kill_now && rank.kill_at > now) rank.kill_at = now;
      if (rank.kill_at >= 0 && now >= rank.kill_at) {
        SignalRank(rank, SIGKILL, own);
        rank.kill_at = now + kKillSweepMs;  // a fork racing the kill is caught next round
      }
    }
    // A leftover that exited after this round's reaping is gone from its cgroup but not yet
    // reaped: reaped now, its CPU time still counts for its rank.
    if (!done.empty()) Reap();
    for (Rank* rank : done) {
      Started(*rank);  // its child is gone: whether it failed before its exec is known
      StepDone(*rank);
    }
  }

  // Ended ranks' cgroups go while no rank is on its way to start (a burst of launches does not wait
  // for their rmdirs), or a few at a time once many are waiting; one still busy (a process not yet
  // reaped) is tried again later, a few times.
  void RemoveEndedCgroups(bool all) {
    const bool idle = waiting_.empty() && starting_.empty();
    size_t budget = all || idle ? ended_cgroups_.size() : ended_cgroups_.size() > 256 ? 16 : 0;
    while (budget-- > 0 && !ended_cgroups_.empty()) {
      auto [cgroup, tries] = std::move(ended_cgroups_.front());
      ended_cgroups_.pop_front();
      // A large process takes a while to be torn down: tried for about a minute (every 50 ms).
      if (!cgroup.Remove() && tries < 1200 && !all) {
        ended_cgroups_.push_back({std::move(cgroup), tries + 1});
      }
    }
  }

  // Reads what the job printed on its terminal, into the scrollback and the log, until nothing is
  // left; at the end of the job's side (EIO: every process closed the terminal) the master closes.
  static void ReadTerminal(RankTerminal& t) {
    char buf[16384];
    while (t.master >= 0) {
      ssize_t n = ::read(t.master, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        ::close(t.master);
        t.master = -1;
        return;
      }
      t.scrollback.Append(std::string_view(buf, static_cast<size_t>(n)));
      if (t.log_fd >= 0 && !WriteAll(t.log_fd, std::string_view(buf, static_cast<size_t>(n)))) {
        ::close(t.log_fd);  // the log is not writable: the scrollback still has it
        t.log_fd = -1;
      }
    }
  }

  // The step and everything it started are gone.
  void StepDone(Rank& rank) {
    if (rank.terminal) ReadTerminal(*rank.terminal);  // what it printed last
    if (!rank.error.empty()) {
      Finish(rank, {"exited", rank.exit_code, "launch", rank.error});
    } else if (rank.step == Rank::Step::kPull && (rank.exit_code != 0 || rank.stopped)) {
      Finish(rank, {"exited", rank.exit_code, "pull",
                    rank.stopped ? "stopped"
                                 : PullFailureReason(rank.dir + "/output.log", rank.exit_code)});
    } else if (rank.step == Rank::Step::kSetup && (rank.exit_code != 0 || rank.stopped)) {
      Finish(rank,
             {"exited", rank.exit_code, "setup",
              rank.stopped ? "stopped" : ExitReason(rank.dir + "/output.log", rank.exit_code)});
    } else if (rank.step != Rank::Step::kRun) {
      LeaseVerdict lease = CheckLeaseFile(rank.plan.lease_file, clock_.Monotonic());
      rank.stop = rank.stop || lease.term || stop_all_;
      if (rank.step == Rank::Step::kPull) {
        AppendEvent(rank.dir, {"pulling", 0, "", PulledImage(rank.dir + "/output.log")});
        BeginSetup(rank);
      } else {
        BeginRun(rank);
      }
    } else {
      Finish(rank,
             {"exited", rank.exit_code, "run",
              rank.stopped ? "stopped" : ExitReason(rank.dir + "/output.log", rank.exit_code)});
    }
  }

  void Finish(Rank& rank, SupervisorEvent end) {
    if (rank.terminal) {  // legs still attached send the rest and this end
      RankTerminal& t = *rank.terminal;
      t.ended = true;
      t.exit_code = end.exit_code;
      t.reason = end.reason;
      t.to_job.clear();
      if (t.master >= 0) ::close(t.master);
      t.master = -1;
      rank.terminal.reset();
      for (Leg& leg : legs_) {
        if (leg.fd >= 0 && leg.terminal.get() == &t) WriteLeg(leg);
      }
    }
    int64_t peak = -1;
    if (rank.cgroup) {
      peak = EndRankCgroup(*rank.cgroup, rank.plan.limits, end, rank.cgroup_seen_empty)
                 .peak_memory_bytes;
      if (auto kept_not = cgroup_pool_.Keep(std::move(*rank.cgroup), rank.cgroup_seen_empty)) {
        ended_cgroups_.push_back({std::move(*kept_not), 0});
      }
    }
    AppendEnd(rank.dir, UsageEvent(peak, rank.max_rss_kib, rank.cpu_us), end);
    std::erase_if(stray_owners_, [&](const auto& entry) { return entry.second == rank.dir; });
    ranks_.erase(rank.dir);  // `rank` is gone from here on
  }

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

}  // namespace

int NodeSupervisorMain(int listen_fd, const std::string& state_dir, const Clock& clock) {
  NodeSupervisor supervisor(listen_fd, state_dir, clock);
  return supervisor.Run();
}

}  // namespace berth
