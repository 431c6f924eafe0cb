#include "agent/mps.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "supervise/timed_command.h"

extern char** environ;

namespace berth {

namespace {

constexpr char kPipeEnv[] = "CUDA_MPS_PIPE_DIRECTORY";
constexpr char kLogEnv[] = "CUDA_MPS_LOG_DIRECTORY";

// Field 22 of /proc/PID/stat (the process's start time, in clock ticks since boot); 0 when the
// process is gone or a zombie.
uint64_t StartTicks(pid_t pid) {
  const std::string stat = ReadFileOr("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') return 0;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

// The last non-empty line of `text`, cut to 200 bytes.
std::string LastLine(const std::string& text) {
  std::string last;
  for (const std::string& line : Split(text, '\n')) {
    if (!Trim(line).empty()) last = Trim(line);
  }
  return last.substr(0, 200);
}

// The agent's environment with `extra` over it.
std::map<std::string, std::string> EnvironmentWith(
    const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

// Starts `argv` with `env` in a session of its own, re-parented to init (a double fork: it
// outlives the agent, as the ranks that use it do), output to `log_fd`. Returns its pid.
Result<pid_t> SpawnDetached(const std::vector<std::string>& argv_s,
                            const std::map<std::string, std::string>& env, int log_fd) {
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::Internal(std::string("fork: ") + strerror(err));
  }
  if (child == 0) {
    // Only async-signal-safe calls from here on: the agent is multi-threaded.
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const pid_t inner = ::fork();
    if (inner != 0) {
      (void)!::write(fds[1], &inner, sizeof(inner));
      _exit(inner < 0 ? 1 : 0);
    }
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ::close(fds[1]);
  pid_t pid = -1;
  const ssize_t n = ::read(fds[0], &pid, sizeof(pid));
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);  // (the shipper's reaping may have taken it already)
  if (n != static_cast<ssize_t>(sizeof(pid)) || pid <= 0) {
    return Status::Internal("could not start " + argv_s[0]);
  }
  return pid;
}

}  // namespace

std::map<std::string, std::string> MpsClientEnvironment(const MpsShare& share,
                                                        const std::string& pipe_dir,
                                                        const std::string& log_dir) {
  std::map<std::string, std::string> env;
  env[kPipeEnv] = pipe_dir;
  env[kLogEnv] = log_dir;
  // Its share of the device's SMs, in whole percent (at least 1).
  env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] =
      std::to_string(std::max<int64_t>(1, share.milli * 100 / kMilliPerGpu));
  // Its share of the device's memory. The rank sees one device, its daemon's: ordinal 0.
  if (share.device_memory && *share.device_memory > 0) {
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] =
        "0=" + std::to_string(*share.device_memory * share.milli / kMilliPerGpu) + "M";
  }
  return env;
}

MpsDaemons::MpsDaemons(std::string control, std::string dir) {
  Configure(std::move(control), std::move(dir));
}

void MpsDaemons::Configure(std::string control, std::string dir) {
  MutexLock lock(mu_);
  control_ = std::move(control);
  dir_ = std::move(dir);
}

std::string MpsDaemons::Sharing() const {
  MutexLock lock(mu_);
  return control_.empty() ? "none" : "mps";
}

pid_t MpsDaemons::DaemonOf(int device) const {
  MutexLock lock(mu_);
  auto it = daemons_.find(device);
  return it == daemons_.end() ? 0 : it->second.pid;
}

bool MpsDaemons::Alive(const Daemon& daemon) {
  if (daemon.pid <= 0) return false;
  if (::kill(daemon.pid, 0) != 0 && errno != EPERM) return false;
  return StartTicks(daemon.pid) == daemon.start_ticks;
}

Result<std::map<std::string, std::string>> MpsDaemons::Acquire(const std::string& key,
                                                               const MpsShare& share,
                                                               DurationMs start_timeout_ms) {
  MutexLock lock(mu_);
  if (control_.empty()) {
    return Status::Unavailable(std::string("this node enforces no GPU fractions (no ") +
                               kMpsControl + " on the agent's PATH)");
  }
  // A launch sent again keeps its place; one on another device leaves the old one first.
  if (auto held = rank_device_.find(key);
      held != rank_device_.end() && held->second != share.device) {
    lock.Unlock();
    Release(key);
    lock.Lock();
  }
  auto it = daemons_.find(share.device);
  if (it != daemons_.end() && !Alive(it->second)) {
    // Dead, and not yet seen by Check(): its ranks are answered there.
    return Status::Unavailable("the MPS daemon of device " + std::to_string(share.device) +
                               " has just died; the job is tried again");
  }
  if (it == daemons_.end()) {
    Result<Daemon> started = Start(share, start_timeout_ms);
    if (!started.ok()) return started.status();
    it = daemons_.emplace(share.device, std::move(*started)).first;
    LogInfo("MPS: started the daemon of device {} (pid {})", share.device, it->second.pid);
  }
  it->second.ranks.insert(key);
  rank_device_[key] = share.device;
  const std::string dir = DeviceDir(share.device);
  return MpsClientEnvironment(share, dir + "/pipe", dir + "/log");
}

Result<MpsDaemons::Daemon> MpsDaemons::Start(const MpsShare& share, DurationMs timeout_ms) {
  const std::string dir = DeviceDir(share.device);
  const std::string pipe = dir + "/pipe", log = dir + "/log";
  std::error_code ec;
  std::filesystem::remove_all(pipe, ec);  // a dead daemon's control pipe would look alive
  for (const std::string& d : {dir_, dir, pipe, log}) {
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::Internal("cannot create " + d + ": " + strerror(errno));
    }
  }
  // Reached by ranks of every user (the daemon makes its own files inside with their modes).
  for (const std::string& d : {dir_, dir, pipe, log}) ::chmod(d.c_str(), 0755);
  const std::string out = log + "/berth-daemon.log";
  const int log_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::Internal("cannot open " + out + ": " + strerror(errno));
  // The daemon sees only its device; CUDA numbers GPUs as nvidia-smi does.
  auto pid = SpawnDetached({control_, "-f"},
                           EnvironmentWith({{"CUDA_VISIBLE_DEVICES", share.cuda_id},
                                            {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                            {kPipeEnv, pipe},
                                            {kLogEnv, log}}),
                           log_fd);
  ::close(log_fd);
  if (!pid.ok()) return pid.status();
  Daemon daemon{*pid, 0, {}};
  // Up once its control pipe is there.
  const int64_t deadline = MonotonicMs() + timeout_ms;
  while (true) {
    if (daemon.start_ticks == 0) daemon.start_ticks = StartTicks(daemon.pid);
    const bool alive = daemon.start_ticks != 0 && Alive(daemon);
    if (alive && ::access((pipe + "/control").c_str(), F_OK) == 0) break;
    if (!alive || MonotonicMs() >= deadline) {
      if (alive) ::kill(daemon.pid, SIGKILL);
      const std::string why = LastLine(ReadFileOr(out));
      return Status::Unavailable(
          fmt::format("the MPS daemon of device {} {}{}", share.device,
                      alive ? "did not open its control pipe in time" : "exited at start",
                      why.empty() ? "" : ": " + why));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  WriteFileAtomic(dir + "/daemon", fmt::format("{} {}\n", daemon.pid, daemon.start_ticks));
  return daemon;
}

void MpsDaemons::Release(const std::string& key) {
  MutexLock lock(mu_);
  auto held = rank_device_.find(key);
  if (held == rank_device_.end()) return;
  const int device = held->second;
  rank_device_.erase(held);
  auto it = daemons_.find(device);
  if (it == daemons_.end()) return;
  it->second.ranks.erase(key);
  if (!it->second.ranks.empty()) return;
  Quit(device, it->second);
  daemons_.erase(it);
}

void MpsDaemons::Quit(int device, const Daemon& daemon) {
  const std::string dir = DeviceDir(device);
  if (Alive(daemon)) {
    // NVIDIA's way: "quit" on the control program's stdin, which shuts the daemon down.
    ProcessRunner runner;
    CommandOutcome quit =
        runner.Run({.argv = {"/bin/sh", "-c", "echo quit | exec \"$0\"", control_},
                    .env = EnvironmentWith({{kPipeEnv, dir + "/pipe"}, {kLogEnv, dir + "/log"}}),
                    .timeout = 5000},
                   {});
    if (!quit.ok()) LogWarn("MPS: quit of the daemon of device {}: {}", device, quit.Failure());
    const auto wait_gone = [&](DurationMs ms) {
      for (const int64_t until = MonotonicMs() + ms; MonotonicMs() < until;) {
        if (!Alive(daemon)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return !Alive(daemon);
    };
    if (!wait_gone(5000)) {
      ::kill(daemon.pid, SIGTERM);
      if (!wait_gone(2000)) ::kill(daemon.pid, SIGKILL);
    }
  }
  ::unlink((dir + "/daemon").c_str());
  LogInfo("MPS: stopped the daemon of device {} (no job shares it now)", device);
}

bool MpsDaemons::Adopt(const std::string& key, const std::map<std::string, std::string>& run_env) {
  auto pipe = run_env.find(kPipeEnv);
  if (pipe == run_env.end()) return true;  // no share
  MutexLock lock(mu_);
  const std::string prefix = dir_ + "/";
  const std::string& p = pipe->second;
  if (!p.starts_with(prefix) || !p.ends_with("/pipe")) return true;  // not one of ours
  int device = 0;
  try {
    device = std::stoi(p.substr(prefix.size()));
  } catch (...) {
    return true;
  }
  auto it = daemons_.find(device);
  if (it == daemons_.end()) {
    std::istringstream in(ReadFileOr(DeviceDir(device) + "/daemon"));
    Daemon found;
    if (!(in >> found.pid >> found.start_ticks) || !Alive(found)) return false;
    it = daemons_.emplace(device, std::move(found)).first;
    LogInfo("MPS: re-adopted the daemon of device {} (pid {})", device, it->second.pid);
  } else if (!Alive(it->second)) {
    return false;
  }
  it->second.ranks.insert(key);
  rank_device_[key] = device;
  return true;
}

std::vector<std::pair<std::string, std::string>> MpsDaemons::Check() {
  MutexLock lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    if (Alive(it->second)) {
      ++it;
      continue;
    }
    const int device = it->first;
    LogWarn("MPS: the daemon of device {} (pid {}) died; ending the {} job rank(s) on it", device,
            it->second.pid, it->second.ranks.size());
    for (const std::string& key : it->second.ranks) {
      rank_device_.erase(key);
      out.emplace_back(key, fmt::format("the MPS daemon enforcing its GPU share died (device {}); "
                                        "a new one starts for the next job",
                                        device));
    }
    ::unlink((DeviceDir(device) + "/daemon").c_str());
    it = daemons_.erase(it);
  }
  return out;
}

}  // namespace berth
