#include "supervise/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
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

namespace berth {

namespace {

json::object EnvJson(const std::map<std::string, std::string>& env) {
  json::object o;
  for (const auto& [k, v] : env) o[k] = v;
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

// Every live process whose parent chain leads to `root` (read from /proc).
std::vector<pid_t> Descendants(pid_t root) {
  std::map<pid_t, pid_t> parent;
  DIR* d = opendir("/proc");
  if (!d) return {};
  while (dirent* e = readdir(d)) {
    if (!isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string stat = ReadFileOr(std::string("/proc/") + e->d_name + "/stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 2));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid) parent[std::atoi(e->d_name)] = ppid;
  }
  closedir(d);
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : parent) {
    pid_t p = pid;
    for (int depth = 0; depth < 64 && p > 1; ++depth) {
      auto it = parent.find(p);
      if (it == parent.end()) break;
      if (it->second == root) {
        out.push_back(pid);
        break;
      }
      p = it->second;
    }
  }
  return out;
}

void SignalAll(pid_t group, int sig) {
  if (group > 0) ::kill(-group, sig);
  for (pid_t pid : Descendants(::getpid())) ::kill(pid, sig);
}

std::vector<std::string> EnvVector(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
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
  if (g_lease_file.empty()) return;
  // Plain reads: an ifstream's construction and destruction cost more than the read itself, and
  // this runs at every job's start and every 200 ms while it runs.
  std::string text = ReadFileOr(g_lease_file);
  long long term_at = 0;
  long long kill_at = 0;
  if (std::sscanf(text.c_str(), "%lld %lld", &term_at, &kill_at) != 2) return;
  int64_t now = g_clock->Monotonic();
  if (now >= term_at) g_stop_requested = true;
  if (now >= kill_at) g_kill_now = true;
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

// What the child of a step needs, all prepared before it is started: the child shares the
// supervisor's memory until it execs (see StartStepChild), so it only makes system calls.
struct StepChild {
  const char* bash;
  char** argv;
  char** envp;
  const char* workdir;  // null: stay where the supervisor is
  const RunPlan::RunAs* run_as;
  int devnull;  // becomes stdin
  int log_fd;   // becomes stdout and stderr
  int err_fd;   // close-on-exec pipe: a failure before exec is written here
};

// Sends a letter naming the step that failed, then errno, so that the reason reported names the
// real cause (e.g. E2BIG for an oversized environment); then exits.
[[noreturn]] void FailStepChild(const StepChild& c, char letter) {
  char msg[1 + sizeof(int)] = {letter};
  int err = errno;
  std::memcpy(msg + 1, &err, sizeof(err));
  ssize_t ignored = ::write(c.err_fd, msg, sizeof(msg));
  (void)ignored;
  _exit(127);
}

int RunStepChild(void* arg) {
  const StepChild& c = *static_cast<const StepChild*>(arg);
  ::setpgid(0, 0);
  // Dispositions are the child's own (no CLONE_SIGHAND); the mask is per thread.
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (c.devnull >= 0) ::dup2(c.devnull, 0);
  ::dup2(c.log_fd, 1);
  ::dup2(c.log_fd, 2);
  ::umask(022);
  // Groups, then gid, then uid: once the uid is dropped nothing else may be changed. Raw system
  // calls: glibc's wrappers would coordinate with threads this process does not have.
  if (c.run_as) {
    if (::syscall(SYS_setgroups, c.run_as->groups.size(), c.run_as->groups.data()) != 0) {
      FailStepChild(c, 'U');
    }
    if (::syscall(SYS_setgid, c.run_as->gid) != 0) FailStepChild(c, 'U');
    if (::syscall(SYS_setuid, c.run_as->uid) != 0) FailStepChild(c, 'U');
  }
  if (c.workdir && ::chdir(c.workdir) != 0) FailStepChild(c, 'W');
  ::execve(c.bash, c.argv, c.envp);
  FailStepChild(c, 'E');
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BERTH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BERTH_SANITIZED 1
#endif
#endif

// Starts the child of a step and returns its pid (-1 with errno set on failure). The child shares
// the supervisor's memory and the supervisor waits until it has exec'd (CLONE_VM | CLONE_VFORK,
// what posix_spawn does), so no page table is copied: a fork of even this small image costs as much
// as a fifth of a short job's launch. Sanitized builds fork instead: their runtimes do not follow
// a child that shares the parent's memory.
pid_t StartStepChild(StepChild& child) {
#ifdef BERTH_SANITIZED
  pid_t pid = ::fork();
  if (pid == 0) RunStepChild(&child);
  return pid;
#else
  // The child's stack; the supervisor is suspended while the child uses it.
  alignas(64) static char stack[64 * 1024];
  return ::clone(RunStepChild, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &child);
#endif
}

struct StepResult {
  int exit_code = 0;
  bool stopped = false;
  std::string error;  // launch failure
};

// Runs one bash script as its own process group and waits for it; on a stop request, signals every
// process of the job, escalating to SIGKILL after the grace period. Leaves no process behind. A
// script up to 64 KiB is passed with -c; a longer one is read by bash from `script_path`: Linux
// refuses any one argument over 128 KiB (MAX_ARG_STRLEN), and task files may hold scripts up to
// kMaxScriptBytes. (Not writing a file per job matters: on ext4, creating inodes next to many
// recently deleted ones is what a thousand-job sweep spends most of its kernel time on.)
constexpr size_t kMaxInlineScript = 64 * 1024;

// `warn_signal` (0: none) goes to every process of the step `warn_after_ms` after it starts.
StepResult RunStep(const std::string& script, const std::string& script_path,
                   const std::string& workdir, const std::map<std::string, std::string>& env,
                   const std::optional<RunPlan::RunAs>& run_as, int log_fd, int64_t grace_ms,
                   int warn_signal = 0, int64_t warn_after_ms = 0) {
  StepResult result;
  int64_t warn_at = warn_signal > 0 ? g_clock->Monotonic() + warn_after_ms : -1;
  bool inline_script = script.size() <= kMaxInlineScript;
  if (!inline_script && !WriteFileAtomic(script_path, script, /*sync=*/false, 0600)) {
    result.error = "cannot write " + script_path;
    result.exit_code = 127;
    return result;
  }
  if (!inline_script && run_as && ::chown(script_path.c_str(), run_as->uid, run_as->gid) != 0) {
    result.error = "cannot give " + script_path + " to " + run_as->user + ": " + strerror(errno);
    result.exit_code = 127;
    return result;
  }
  std::vector<std::string> env_strings = EnvVector(env);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string bash = "/bin/bash";
  if (::access(bash.c_str(), X_OK) != 0) bash = "/usr/bin/bash";
  const char* argv_file[] = {"bash", script_path.c_str(), nullptr};
  const char* argv_inline[] = {"bash", "-c", script.c_str(), nullptr};
  const char** argv = inline_script ? argv_inline : argv_file;
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.error = "pipe failed";
    result.exit_code = 127;
    return result;
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  StepChild child{bash.c_str(),
                  const_cast<char**>(argv),
                  envp.data(),
                  workdir.empty() ? nullptr : workdir.c_str(),
                  run_as ? &*run_as : nullptr,
                  devnull,
                  log_fd,
                  err_pipe[1]};
  pid_t pid = StartStepChild(child);
  int spawn_errno = errno;
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    result.error = std::string("fork failed: ") + strerror(spawn_errno);
    result.exit_code = 127;
    return result;
  }
  ::setpgid(pid, pid);  // also in the parent, so that the group exists before any signal is sent
  ::close(err_pipe[1]);
  char msg[1 + sizeof(int)] = {};
  ssize_t got = 0;
  while (got < static_cast<ssize_t>(sizeof(msg))) {
    ssize_t n = ::read(err_pipe[0], msg + got, sizeof(msg) - static_cast<size_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  if (got > 0) {
    int err = 0;
    if (got == static_cast<ssize_t>(sizeof(msg))) std::memcpy(&err, msg + 1, sizeof(err));
    std::string why = err != 0 ? std::string(": ") + strerror(err) : "";
    if (msg[0] == 'W') {
      result.error = "workdir " + workdir + " does not exist or is not accessible" +
                     (run_as ? " to " + run_as->user : std::string()) + " on this node" + why;
    } else if (msg[0] == 'U') {
      result.error = "cannot switch to user " + (run_as ? run_as->user : std::string("?")) + why;
    } else {
      result.error = "cannot run " + bash + why;
    }
  }
  ::close(err_pipe[0]);

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

}  // namespace

Status WriteRunPlan(const std::string& dir, const RunPlan& plan) {
  json::object o{{"workdir", plan.workdir},
                 {"run_as", RunAsJson(plan.run_as)},
                 {"setup", plan.setup},
                 {"run", plan.run},
                 {"setup_env", EnvJson(plan.setup_env)},
                 {"run_env", EnvJson(plan.run_env)},
                 {"kill_grace_ms", plan.kill_grace_ms},
                 {"warn_signal", plan.warn_signal},
                 {"warn_after_ms", plan.warn_after_ms},
                 {"lease_file", plan.lease_file}};
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
  auto run_as = RunAsFromJson(o.if_contains("run_as"));
  if (!run_as.ok()) return run_as.status();
  plan.run_as = *run_as;
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
    }
    if (!e.kind.empty()) out.push_back(e);
  }
  return out;
}

void AppendEvent(const std::string& dir, const SupervisorEvent& event) {
  std::string line = event.kind;
  if (event.kind == "exited") {
    line += " " + std::to_string(event.exit_code) + " " + event.phase;
    if (!event.reason.empty()) line += " " + event.reason;
  }
  line += "\n";
  int fd = ::open((dir + "/events").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
  ::close(fd);
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
  WriteFileInPlace(dir + "/supervisor.pid", std::to_string(::getpid()) + "\n", 0600);
  // The job's output is its user's (and the daemons') to read, no one else's.
  int log_fd =
      ::open((dir + "/output.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  auto plan = ReadRunPlan(dir);
  if (log_fd < 0 || !plan.ok()) {
    AppendEvent(dir, {"exited", 127, "launch",
                      plan.ok() ? "cannot open output.log" : plan.status().message()});
    return 1;
  }
  if (plan->run_as && ::fchown(log_fd, plan->run_as->uid, plan->run_as->gid) != 0) {
    AppendEvent(dir, {"exited", 127, "launch",
                      "cannot give output.log to " + plan->run_as->user + ": " + strerror(errno)});
    return 1;
  }
  g_lease_file = plan->lease_file;
  CheckLease();
  PollStopSignals();
  if (!plan->setup.empty() && !g_stop_requested) {
    AppendEvent(dir, {"setting_up"});
    StepResult r = RunStep(plan->setup, dir + "/setup.sh", plan->workdir, plan->setup_env,
                           plan->run_as, log_fd, plan->kill_grace_ms);
    if (!r.error.empty()) {
      AppendEvent(dir, {"exited", r.exit_code, "launch", r.error});
      return 0;
    }
    if (r.exit_code != 0 || r.stopped) {
      AppendEvent(dir, {"exited", r.exit_code, "setup", r.stopped ? "stopped" : ""});
      return 0;
    }
  }
  CheckLease();
  PollStopSignals();
  if (g_stop_requested) {
    AppendEvent(dir, {"exited", 143, "run", "stopped before start"});
    return 0;
  }
  AppendEvent(dir, {"running"});
  StepResult r{};
  if (!plan->run.empty()) {
    r = RunStep(plan->run, dir + "/run.sh", plan->workdir, plan->run_env, plan->run_as, log_fd,
                plan->kill_grace_ms, plan->warn_signal, plan->warn_after_ms);
  }
  if (!r.error.empty()) {
    AppendEvent(dir, {"exited", r.exit_code, "launch", r.error});
  } else {
    AppendEvent(dir, {"exited", r.exit_code, "run", r.stopped ? "stopped" : ""});
  }
  ::close(log_fd);
  return 0;
}

}  // namespace berth
