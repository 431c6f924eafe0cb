#include "supervise/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "supervise/cpu_set.h"
#include "supervise/step.h"

namespace berth {

namespace {

json::object EnvJson(const std::map<std::string, std::string>& env) {
  json::object o;
  o.reserve(env.size());  // sized once, not rehashed as it grows
  for (const auto& [k, v] : env) o.emplace(k, v);
  return o;
}

std::map<std::string, std::string> EnvFromJson(const json::value* v) {
  std::map<std::string, std::string> env;
  if (!v || !v->is_object()) return env;
  for (const auto& [k, x] : v->as_object()) {
    if (x.is_string()) env[std::string(k)] = std::string(x.as_string());
  }
  return env;
}

// The rank's cgroup (RunPlan::cgroup), when it has one.
std::optional<RankCgroup> g_cgroup;

void SignalAll(pid_t group, int sig) {
  // The supervisor's children are the step's bash and what the job left re-parented to it; with a
  // cgroup, whatever is in it too.
  std::set<pid_t> pids = ChildrenOf(::getpid());
  if (g_cgroup && sig == SIGKILL) g_cgroup->Kill();
  if (g_cgroup) pids.merge(g_cgroup->Pids());
  SignalProcesses({group}, pids, sig);
}

// The supervisor blocks SupervisorWaitedSignals() and takes them with sigtimedwait: SIGCHLD wakes
// it the moment a process of the job exits, and a stop request is noticed without a signal handler.
bool g_stop_requested = false;

// Waits up to `ms` for one of SupervisorWaitedSignals(); records a stop request.
void WaitForSignal(int64_t ms) {
  sigset_t set = SupervisorWaitedSignals();
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000)};
  siginfo_t info;
  int sig = ::sigtimedwait(&set, &info, &ts);
  if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) g_stop_requested = true;
}

// The lease this node holds, as the agent last renewed it (see RunPlan::lease_file).
std::string g_lease_file;
bool g_kill_now = false;  // the lease is past its kill point: no grace

// The supervisor's time source (SupervisorMain's argument): leases and kill deadlines are
// monotonic.
const Clock* g_clock = &SystemClock::Get();

void CheckLease() {
  LeaseVerdict lease = CheckLeaseFile(g_lease_file, g_clock->Monotonic());
  if (lease.term) g_stop_requested = true;
  if (lease.kill) g_kill_now = true;
}

// Takes pending stop signals without waiting.
void PollStopSignals() {
  sigset_t pending;
  sigpending(&pending);
  if (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT) ||
      sigismember(&pending, SIGHUP)) {
    WaitForSignal(0);
    PollStopSignals();
  }
}

struct StepResult {
  int exit_code = 0;
  bool stopped = false;
  std::string error;  // launch failure
};

// Runs one bash script as its own process group (LaunchStep) and waits for it; on a stop request,
// signals every process of the job, escalating to SIGKILL after the grace period. Leaves no process
// behind. `warn_signal` (0: none) goes to every process of the step `warn_after_ms` after it
// starts.
StepResult RunStep(const std::string& script, const std::string& script_path,
                   const std::string& workdir, const std::map<std::string, std::string>& env,
                   const std::optional<RunPlan::RunAs>& run_as, int log_fd, int64_t grace_ms,
                   int warn_signal = 0, int64_t warn_after_ms = 0) {
  StepResult result;
  int64_t warn_at = warn_signal > 0 ? g_clock->Monotonic() + warn_after_ms : -1;
  StepLaunch launch = LaunchStep(script, script_path, workdir, env, run_as, log_fd,
                                 g_cgroup ? g_cgroup->Entry() : CgroupEntry{});
  result.error = launch.error;
  result.exit_code = launch.exit_code;
  const pid_t pid = launch.pid;
  if (pid < 0) return result;

  int64_t kill_at = -1;
  bool main_done = false;
  int status = 0;
  while (true) {
    bool no_children = false;
    pid_t w;
    while ((w = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (w == pid) {
        main_done = true;
        if (WIFEXITED(status)) {
          result.exit_code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
          result.exit_code = 128 + WTERMSIG(status);
        }
      }
    }
    if (w < 0 && errno == ECHILD) no_children = true;
    // As the subreaper, every process the job left behind is our descendant, and becomes our child
    // when its parent dies: no child at all means nothing of the job is left.
    if (main_done && no_children) break;
    CheckLease();
    if (main_done || g_stop_requested || result.stopped) warn_at = -1;  // too late to warn
    if (warn_at >= 0 && g_clock->Monotonic() >= warn_at) {
      SignalAll(pid, warn_signal);  // the job's warning before its time limit
      warn_at = -1;
    }
    if (g_stop_requested && !result.stopped) {
      result.stopped = true;
      SignalAll(pid, SIGTERM);
      kill_at = g_clock->Monotonic() + grace_ms;
    }
    if (g_kill_now && kill_at > g_clock->Monotonic()) kill_at = g_clock->Monotonic();
    if (main_done && kill_at < 0) {
      // The script is over; whatever it left running (background jobs, daemons) goes too.
      SignalAll(pid, SIGTERM);
      kill_at = g_clock->Monotonic() + std::min<int64_t>(grace_ms, 2000);
    }
    if (kill_at >= 0 && g_clock->Monotonic() >= kill_at) {
      SignalAll(pid, SIGKILL);
      kill_at =
          g_clock->Monotonic() + 200;  // keep sweeping: a fork racing the kill is caught next round
    }
    int64_t wait_ms = kill_at >= 0 ? std::max<int64_t>(1, kill_at - g_clock->Monotonic()) : 1000;
    if (warn_at >= 0) {
      wait_ms = std::clamp<int64_t>(warn_at - g_clock->Monotonic(), 1, wait_ms);
    }
    if (!g_lease_file.empty()) wait_ms = std::min<int64_t>(wait_ms, 200);
    WaitForSignal(wait_ms);
  }
  return result;
}

}  // namespace

sigset_t SupervisorWaitedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

namespace {

json::value RunAsJson(const std::optional<RunPlan::RunAs>& run_as) {
  if (!run_as) return nullptr;
  json::array groups;
  for (gid_t g : run_as->groups) groups.push_back(static_cast<int64_t>(g));
  return json::object{{"user", run_as->user},
                      {"uid", static_cast<int64_t>(run_as->uid)},
                      {"gid", static_cast<int64_t>(run_as->gid)},
                      {"groups", std::move(groups)}};
}

Result<std::optional<RunPlan::RunAs>> RunAsFromJson(const json::value* v) {
  if (v == nullptr || v->is_null()) return std::optional<RunPlan::RunAs>();
  if (!v->is_object()) return Status::Invalid("run.json: run_as is not an object");
  const json::object& o = v->as_object();
  RunPlan::RunAs run_as;
  run_as.user = GetString(o, "user").value();
  auto uid = GetInt(o, "uid", -1);
  auto gid = GetInt(o, "gid", -1);
  if (!uid.ok() || !gid.ok() || *uid < 0 || *gid < 0) {
    return Status::Invalid("run.json: run_as needs uid and gid");
  }
  run_as.uid = static_cast<uid_t>(*uid);
  run_as.gid = static_cast<gid_t>(*gid);
  if (const auto* groups = o.if_contains("groups"); groups && groups->is_array()) {
    for (const auto& g : groups->as_array()) {
      auto id = AsInt(g);
      if (!id || *id < 0) return Status::Invalid("run.json: run_as.groups must hold gids");
      run_as.groups.push_back(static_cast<gid_t>(*id));
    }
  }
  return std::optional<RunPlan::RunAs>(std::move(run_as));
}

json::value LimitsJson(const RankLimits& limits) {
  json::array denied;
  for (auto [major, minor] : limits.denied_devices) {
    denied.push_back(json::array{major, minor});
  }
  return json::object{
      {"memory_bytes", limits.memory_bytes}, {"cpu_milli", limits.cpu_milli},
      {"pids_max", limits.pids_max},         {"denied_devices", std::move(denied)},
      {"cpus", FormatCpuList(limits.cpus)},  {"node_cpu_milli", limits.node_cpu_milli}};
}

Result<RankLimits> LimitsFromJson(const json::value* v) {
  RankLimits limits;
  if (v == nullptr || v->is_null()) return limits;
  if (!v->is_object()) return Status::Invalid("run.json: limits is not an object");
  const json::object& o = v->as_object();
  auto memory = GetInt(o, "memory_bytes", 0);
  auto cpu = GetInt(o, "cpu_milli", 0);
  auto pids = GetInt(o, "pids_max", 0);
  auto node_cpu = GetInt(o, "node_cpu_milli", 0);
  if (!memory.ok() || !cpu.ok() || !pids.ok() || !node_cpu.ok()) {
    return Status::Invalid("run.json: limits must be integers");
  }
  limits.memory_bytes = *memory;
  limits.cpu_milli = *cpu;
  limits.pids_max = *pids;
  limits.node_cpu_milli = *node_cpu;
  if (const auto* cpus = o.if_contains("cpus"); cpus && cpus->is_string()) {
    auto list = ParseCpuList(std::string(cpus->as_string()));
    if (!list) return Status::Invalid("run.json: limits.cpus is not a CPU list such as 0-3,6");
    limits.cpus = std::move(*list);
  }
  if (const auto* denied = o.if_contains("denied_devices"); denied && denied->is_array()) {
    for (const auto& d : denied->as_array()) {
      auto major = d.is_array() && d.as_array().size() == 2 ? AsInt(d.as_array()[0]) : std::nullopt;
      auto minor = d.is_array() && d.as_array().size() == 2 ? AsInt(d.as_array()[1]) : std::nullopt;
      if (!major || !minor) return Status::Invalid("run.json: denied_devices holds [major, minor]");
      limits.denied_devices.emplace_back(static_cast<int>(*major), static_cast<int>(*minor));
    }
  }
  return limits;
}

}  // namespace

Status WriteRunPlan(const std::string& dir, const RunPlan& plan) {
  json::object o{{"workdir", plan.workdir},
                 {"run_as", RunAsJson(plan.run_as)},
                 {"pull", plan.pull},
                 {"setup", plan.setup},
                 {"run", plan.run},
                 {"setup_env", EnvJson(plan.setup_env)},
                 {"run_env", EnvJson(plan.run_env)},
                 {"kill_grace_ms", plan.kill_grace_ms},
                 {"warn_signal", plan.warn_signal},
                 {"warn_after_ms", plan.warn_after_ms},
                 {"lease_file", plan.lease_file},
                 {"cgroup", plan.cgroup},
                 {"limits", LimitsJson(plan.limits)}};
  if (plan.tty) o["tty"] = json::object{{"rows", plan.tty->rows}, {"cols", plan.tty->cols}};
  if (!WriteFileInPlace(dir + "/run.json", SerializeJson(o), 0600)) {
    return Status::Internal("cannot write " + dir + "/run.json: " + strerror(errno));
  }
  return Status::Ok();
}

Status WriteLeaseFile(const std::string& path, int64_t renewed_at_ms, int64_t lease_ms) {
  std::string text = std::to_string(renewed_at_ms + lease_ms / 2) + " " +
                     std::to_string(renewed_at_ms + lease_ms * 3 / 4) + "\n";
  if (!WriteFileAtomic(path, text, /*sync=*/false)) return Status::Internal("cannot write " + path);
  return Status::Ok();
}

Result<RunPlan> ReadRunPlan(const std::string& dir) {
  auto v = ParseJson(ReadFileOr(dir + "/run.json"), dir + "/run.json");
  if (!v.ok()) return v.status();
  if (!v->is_object()) return Status::Invalid("run.json is not an object");
  const json::object& o = v->as_object();
  RunPlan plan;
  plan.workdir = GetString(o, "workdir").value();
  plan.pull = GetString(o, "pull").value();
  plan.setup = GetString(o, "setup").value();
  plan.run = GetString(o, "run").value();
  plan.setup_env = EnvFromJson(o.if_contains("setup_env"));
  plan.run_env = EnvFromJson(o.if_contains("run_env"));
  auto grace = GetInt(o, "kill_grace_ms", 10'000);
  plan.kill_grace_ms = grace.ok() ? *grace : 10'000;
  auto warn_signal = GetInt(o, "warn_signal", 0);
  plan.warn_signal = warn_signal.ok() ? static_cast<int>(*warn_signal) : 0;
  auto warn_after = GetInt(o, "warn_after_ms", 0);
  plan.warn_after_ms = warn_after.ok() ? *warn_after : 0;
  plan.lease_file = GetString(o, "lease_file").value();
  plan.cgroup = GetString(o, "cgroup").value();
  auto limits = LimitsFromJson(o.if_contains("limits"));
  if (!limits.ok()) return limits.status();
  plan.limits = *limits;
  auto run_as = RunAsFromJson(o.if_contains("run_as"));
  if (!run_as.ok()) return run_as.status();
  plan.run_as = *run_as;
  if (const json::value* tty = o.if_contains("tty"); tty && tty->is_object()) {
    auto rows = GetInt(tty->as_object(), "rows", 24);
    auto cols = GetInt(tty->as_object(), "cols", 80);
    if (!rows.ok() || !cols.ok() || *rows < 1 || *cols < 1 || *rows > 10000 || *cols > 10000) {
      return Status::Invalid("run.json: tty needs rows and cols from 1 to 10000");
    }
    plan.tty = RunPlan::Tty{static_cast<int>(*rows), static_cast<int>(*cols)};
  }
  return plan;
}

Result<pid_t> SpawnSupervisor(const std::string& self_exe, const std::string& dir) {
  std::string arg = "__supervise";
  const char* argv[] = {self_exe.c_str(), arg.c_str(), dir.c_str(), nullptr};
  // The child must hold the waited signals blocked from birth through exec (the mask survives
  // exec): a SIGTERM that the agent sends as soon as it knows the pid would otherwise kill it
  // before it records anything. Blocked in this thread only, and restored right after the fork.
  sigset_t waited = SupervisorWaitedSignals();
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &waited, &old_mask);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return Status::Internal(std::string("fork failed: ") + strerror(err));
  }
  if (pid == 0) {
    ::setsid();
    // Exactly the waited signals: whatever else the agent's thread blocked is not the job's.
    sigprocmask(SIG_SETMASK, &waited, nullptr);
    // Only async-signal-safe calls between fork and exec: the agent is multi-threaded.
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    int devnull = ::open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
    }
    ::execv(self_exe.c_str(), const_cast<char**>(argv));
    _exit(127);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return pid;
}

std::vector<SupervisorEvent> ParseEvents(const std::string& text) {
  std::vector<SupervisorEvent> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    SupervisorEvent e;
    ls >> e.kind;
    if (e.kind == "exited") {
      ls >> e.exit_code >> e.phase;
      std::getline(ls, e.reason);
      e.reason = Trim(e.reason);
    } else if (e.kind == "usage") {
      ls >> e.peak_memory_bytes >> e.cpu_ms;
    } else if (e.kind == "pulling") {
      std::getline(ls, e.reason);
      e.reason = Trim(e.reason);
    }
    if (!e.kind.empty()) out.push_back(e);
  }
  return out;
}

namespace {

// The last 16 KiB of a rank's log: where a pull step's last words are.
std::string LogTail(const std::string& log_path) {
  std::string tail;
  if (int fd = ::open(log_path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    const off_t size = ::lseek(fd, 0, SEEK_END);
    const off_t from = std::max<off_t>(0, size - 16 * 1024);
    tail.resize(static_cast<size_t>(std::max<off_t>(0, size - from)));
    const ssize_t n = ::pread(fd, tail.data(), tail.size(), from);
    tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
    ::close(fd);
  }
  return tail;
}

}  // namespace

std::string PulledImage(const std::string& log_path) {
  std::string image;
  for (const std::string& line : Split(LogTail(log_path), '\n')) {
    // "berth: image 127.0.0.1:5000/bb:2 is sha256:..."
    std::vector<std::string> words = Split(Trim(line), ' ');
    if (words.size() == 5 && words[0] == "berth:" && words[1] == "image" && words[3] == "is" &&
        StartsWith(words[4], "sha256:")) {
      // (a reference pinned by digest already names it)
      image = words[2].substr(0, words[2].find('@')) + "@" + words[4];
    }
  }
  return image;
}

std::string PullFailureReason(const std::string& log_path, int exit_code) {
  // podman's error is its last line.
  std::string error;
  std::string mounts;  // the file mounts placed before the pull (agent/file_mounts.h) failed
  for (const std::string& line : Split(LogTail(log_path), '\n')) {
    std::string t = Trim(line);
    if (StartsWith(t, "Error: ")) error = t.substr(7);
    if (StartsWith(t, "berth: image pull failed: ")) error = t.substr(26);
    if (StartsWith(t, "berth: file_mounts: ")) mounts = t.substr(7);
  }
  if (!mounts.empty()) return mounts.size() > 1000 ? mounts.substr(0, 1000) + "..." : mounts;
  if (error.size() > 1000) error = error.substr(0, 1000) + "...";
  if (error.empty()) return "image pull failed (exit code " + std::to_string(exit_code) + ")";
  if (error.find("unauthorized") != std::string::npos ||
      error.find("authentication required") != std::string::npos) {
    // What to do about it: the credentials are the user's own, on the node.
    error +=
        " (the registry wants a login: as yourself on the node, podman login --authfile "
        "~/.config/containers/auth.json REGISTRY)";
  }
  return "image pull failed: " + error;
}

std::string ExitReason(const std::string& log_path, int exit_code) {
  if (exit_code != 127 && exit_code != 126) return "";
  // "bash: line 1: python: command not found", "sh: 1: python: not found",
  // "bash: line 1: ./train.sh: Permission denied": the word before the shell's complaint.
  const std::vector<std::pair<std::string_view, std::string_view>> complaints =
      exit_code == 127
          ? std::vector<std::pair<std::string_view, std::string_view>>{{": command not found",
                                                                        "command not found: "},
                                                                       {": not found",
                                                                        "command not found: "}}
          : std::vector<std::pair<std::string_view, std::string_view>>{
                {": Permission denied", "not executable: "},
                {": Is a directory", "not executable: "}};
  std::string found;
  for (const std::string& line : Split(LogTail(log_path), '\n')) {
    const std::string t = Trim(line);
    for (const auto& [ending, says] : complaints) {
      if (t.size() <= ending.size() || !t.ends_with(ending)) continue;
      const std::string head = t.substr(0, t.size() - ending.size());
      const size_t colon = head.rfind(": ");
      std::string word = colon == std::string::npos ? head : head.substr(colon + 2);
      if (word.empty() || word.size() > 200) continue;
      found = std::string(says) + word;
      break;
    }
  }
  return found;
}

SupervisorEvent UsageEvent(int64_t cgroup_peak, int64_t max_rss_kib, int64_t cpu_us) {
  SupervisorEvent usage{"usage"};
  usage.peak_memory_bytes = cgroup_peak >= 0  ? cgroup_peak
                            : max_rss_kib > 0 ? max_rss_kib * 1024
                                              : -1;
  usage.cpu_ms = cpu_us >= 0 ? cpu_us / 1000 : -1;
  return usage;
}

RankUsage EndRankCgroup(RankCgroup& cgroup, const RankLimits& limits, SupervisorEvent& end,
                        bool seen_empty) {
  const RankUsage usage = cgroup.TakeUsage();
  // It reached its own limit, the kernel killed a process of it, and it failed: that is why (not
  // when it was stopped, nor for an OOM of the whole node, which does not reach its limit).
  if (usage.oom_kills > 0 && usage.limit_hits > 0 && end.exit_code != 0 && end.phase != "launch" &&
      end.reason != "stopped") {
    end.reason = OutOfMemoryReason(limits.memory_bytes);
  }
  if (!seen_empty) cgroup.Kill();
  return usage;
}

namespace {

std::string EventLine(const SupervisorEvent& event) {
  std::string line = event.kind;
  if (event.kind == "exited") {
    line += " " + std::to_string(event.exit_code) + " " + event.phase;
    if (!event.reason.empty()) line += " " + event.reason;
  } else if (event.kind == "pulling" && !event.reason.empty()) {
    line += " " + event.reason;
  } else if (event.kind == "usage") {
    line += " " + std::to_string(event.peak_memory_bytes) + " " + std::to_string(event.cpu_ms);
  }
  return line + "\n";
}

void AppendLines(const std::string& dir, const std::string& lines) {
  int fd = ::open((dir + "/events").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t ignored = ::write(fd, lines.data(), lines.size());
  (void)ignored;
  ::close(fd);
}

}  // namespace

void AppendEvent(const std::string& dir, const SupervisorEvent& event) {
  AppendLines(dir, EventLine(event));
}

void AppendEnd(const std::string& dir, const SupervisorEvent& usage, const SupervisorEvent& end) {
  AppendLines(dir, EventLine(usage) + EventLine(end));
}

std::optional<OpenedRank> OpenRank(const std::string& dir, const std::string& pid_line) {
  WriteFileInPlace(dir + "/supervisor.pid", pid_line, 0600);
  // The job's output is its user's (and the daemons') to read, no one else's.
  int log_fd =
      ::open((dir + "/output.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  auto plan = ReadRunPlan(dir);
  if (log_fd < 0 || !plan.ok()) {
    AppendEvent(dir, {"exited", 127, "launch",
                      plan.ok() ? "cannot open output.log" : plan.status().message()});
    if (log_fd >= 0) ::close(log_fd);
    return std::nullopt;
  }
  if (plan->run_as && ::fchown(log_fd, plan->run_as->uid, plan->run_as->gid) != 0) {
    AppendEvent(dir, {"exited", 127, "launch",
                      "cannot give output.log to " + plan->run_as->user + ": " + strerror(errno)});
    ::close(log_fd);
    return std::nullopt;
  }
  return OpenedRank{std::move(*plan), log_fd};
}

int SupervisorMain(const std::string& dir, const Clock& clock) {
  g_clock = &clock;
  // Normally already blocked by whoever forked us (see SupervisorWaitedSignals()); blocked again
  // for a supervisor started by hand.
  sigset_t waited = SupervisorWaitedSignals();
  ::sigprocmask(SIG_BLOCK, &waited, nullptr);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGCHLD, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);
  auto opened = OpenRank(dir, std::to_string(::getpid()) + "\n");
  if (!opened) return 1;
  const int log_fd = opened->log_fd;
  const RunPlan* plan = &opened->plan;
  if (!plan->cgroup.empty()) {
    // The agent asked for limits: the rank does not run without them.
    const CgroupHost host = DetectCgroups();
    auto made = RankCgroup::Create(host, plan->cgroup, plan->limits);
    if (!made.ok()) {
      AppendEvent(dir, {"exited", 127, "launch",
                        "cannot set the job's limits: " + made.status().message()});
      return 0;
    }
    g_cgroup = std::move(*made);
  }
  // The rank's end, with what its cgroup says (out of memory), once nothing of it is left.
  auto end = [&](SupervisorEvent event) {
    const int64_t peak =
        g_cgroup ? EndRankCgroup(*g_cgroup, plan->limits, event).peak_memory_bytes : -1;
    // Every process of the rank was this process's child, and has been reaped.
    rusage children{};
    ::getrusage(RUSAGE_CHILDREN, &children);
    const int64_t cpu_us = (children.ru_utime.tv_sec + children.ru_stime.tv_sec) * 1'000'000LL +
                           children.ru_utime.tv_usec + children.ru_stime.tv_usec;
    AppendEnd(dir, UsageEvent(peak, children.ru_maxrss, cpu_us), event);
    if (g_cgroup) {
      // A large process takes a while to be torn down; what is left, the next node supervisor
      // removes (RemoveIdleRankCgroups).
      for (int tries = 0; tries < 500 && !g_cgroup->Remove(); ++tries) ::usleep(10'000);
      // The agent's cgroup above it goes with its last rank (refused while others are in it).
      for (const std::string& d : g_cgroup->dirs()) ::rmdir(d.substr(0, d.rfind('/')).c_str());
    }
  };
  g_lease_file = plan->lease_file;
  CheckLease();
  PollStopSignals();
  if (!plan->pull.empty() && !g_stop_requested) {
    AppendEvent(dir, {"pulling"});
    StepResult r = RunStep(plan->pull, dir + "/pull.sh", plan->workdir, plan->setup_env,
                           plan->run_as, log_fd, plan->kill_grace_ms);
    if (!r.error.empty()) {
      end({"exited", r.exit_code, "launch", r.error});
      return 0;
    }
    if (r.exit_code != 0 || r.stopped) {
      end({"exited", r.exit_code, "pull",
           r.stopped ? "stopped" : PullFailureReason(dir + "/output.log", r.exit_code)});
      return 0;
    }
    AppendEvent(dir, {"pulling", 0, "", PulledImage(dir + "/output.log")});
    CheckLease();
    PollStopSignals();
  }
  if (!plan->setup.empty() && !g_stop_requested) {
    AppendEvent(dir, {"setting_up"});
    StepResult r = RunStep(plan->setup, dir + "/setup.sh", plan->workdir, plan->setup_env,
                           plan->run_as, log_fd, plan->kill_grace_ms);
    if (!r.error.empty()) {
      end({"exited", r.exit_code, "launch", r.error});
      return 0;
    }
    if (r.exit_code != 0 || r.stopped) {
      end({"exited", r.exit_code, "setup", r.stopped ? "stopped" : ""});
      return 0;
    }
  }
  CheckLease();
  PollStopSignals();
  if (g_stop_requested) {
    end({"exited", 143, "run", "stopped before start"});
    return 0;
  }
  AppendEvent(dir, {"running"});
  StepResult r{};
  if (!plan->run.empty()) {
    r = RunStep(plan->run, dir + "/run.sh", plan->workdir, plan->run_env, plan->run_as, log_fd,
                plan->kill_grace_ms, plan->warn_signal, plan->warn_after_ms);
  }
  if (!r.error.empty()) {
    end({"exited", r.exit_code, "launch", r.error});
  } else {
    end({"exited", r.exit_code, "run", r.stopped ? "stopped" : ""});
  }
  ::close(log_fd);
  return 0;
}

}  // namespace berth
