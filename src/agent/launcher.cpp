#include "agent/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/clock.h"
#include "common/files.h"
#include "common/json_util.h"
#include "supervise/node_supervisor.h"
#include "supervise/supervisor.h"

extern char** environ;

namespace berth {

namespace {

// berth-supervisor beside `self_exe` (the small image built for it), else `self_exe` itself,
// which runs supervisors too.
std::string SupervisorExe(const std::string& self_exe) {
  auto slash = self_exe.rfind('/');
  std::string small = (slash == std::string::npos ? std::string() : self_exe.substr(0, slash + 1)) +
                      "berth-supervisor";
  return ::access(small.c_str(), X_OK) == 0 ? small : self_exe;
}

// The node supervisor's socket, named through an open descriptor of the state directory: a unix
// socket's path may hold only 107 bytes, and state directories can be longer.
class SocketAddress {
 public:
  explicit SocketAddress(const std::string& state_dir)
      : dir_fd_(::open(state_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)) {
    std::string path = "/proc/self/fd/" + std::to_string(dir_fd_) + "/" + kNodeSupervisorSocket;
    addr_.sun_family = AF_UNIX;
    std::memcpy(addr_.sun_path, path.data(), std::min(path.size(), sizeof(addr_.sun_path) - 1));
    path_ = path;
  }
  ~SocketAddress() {
    if (dir_fd_ >= 0) ::close(dir_fd_);
  }
  SocketAddress(const SocketAddress&) = delete;
  SocketAddress& operator=(const SocketAddress&) = delete;
  bool ok() const { return dir_fd_ >= 0; }
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  socklen_t size() const { return sizeof(addr_); }
  const std::string& path() const { return path_; }

 private:
  int dir_fd_;
  sockaddr_un addr_{};
  std::string path_;
};

// A node supervisor's greeting: "berth-node-supervisor PID[ steps=pull]\n".
struct Greeting {
  int fd = -1;
  pid_t pid = 0;
  bool pulls = false;  // runs RunPlan::pull steps (older ones do not say so, and skip them)
};

// Connects to a node supervisor and reads its greeting.
Result<Greeting> ConnectTo(const SocketAddress& address) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + strerror(errno));
  if (::connect(fd, address.addr(), address.size()) != 0) {
    int err = errno;
    ::close(fd);
    return Status::Unavailable(std::string("no node supervisor: ") + strerror(err));
  }
  std::string hello;
  const int64_t deadline = MonotonicMs() + 5000;
  while (hello.find('\n') == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    int64_t left = deadline - MonotonicMs();
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[64];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    hello.append(buf, static_cast<size_t>(n));
  }
  constexpr std::string_view kHello = "berth-node-supervisor ";
  pid_t pid =
      hello.compare(0, kHello.size(), kHello) == 0 ? std::atoi(hello.c_str() + kHello.size()) : 0;
  if (pid <= 0) {
    ::close(fd);
    return Status::Unavailable("the node supervisor did not answer");
  }
  const std::string line = hello.substr(0, hello.find('\n'));
  return Greeting{fd, pid, line.find(" steps=pull") != std::string::npos};
}

}  // namespace

Result<int> SupervisorLauncher::OpenTerminalLeg(const std::string& dir, int64_t offset) {
  return OpenLeg("attach " + dir + " " + std::to_string(offset) + "\n");
}

Result<int> SupervisorLauncher::OpenExecLeg(const std::string& dir, const std::string& command,
                                            bool tty, int rows, int cols, bool container) {
  return OpenLeg("exec " +
                 SerializeJson(json::object{{"dir", dir},
                                            {"command", command},
                                            {"tty", tty},
                                            {"rows", rows},
                                            {"cols", cols},
                                            {"container", container}}) +
                 "\n");
}

Result<int> SupervisorLauncher::OpenLeg(const std::string& line) {
  SocketAddress address(state_dir_);
  if (!address.ok()) return Status::Internal("cannot open " + state_dir_ + ": " + strerror(errno));
  auto connected = ConnectTo(address);
  if (!connected.ok()) return connected.status();
  if (::send(connected->fd, line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size())) {
    ::close(connected->fd);
    return Status::Unavailable("the node supervisor went away");
  }
  return connected->fd;
}

SupervisorLauncher::SupervisorLauncher(const std::string& self_exe, std::string state_dir)
    : self_exe_(SupervisorExe(self_exe)) {
  // Absolute, as the agent's own (its cgroups are named after it: supervise/cgroup.h).
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(state_dir, ec);
  state_dir_ = ec ? std::move(state_dir) : absolute.string();
}

SupervisorLauncher::~SupervisorLauncher() {
  MutexLock lock(mu_);
  DisconnectLocked();  // the node supervisor runs on, and exits once it has nothing to run
}

void SupervisorLauncher::DisconnectLocked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  node_pid_ = 0;
}

Status SupervisorLauncher::ConnectLocked(bool start) {
  if (fd_ >= 0) return Status::Ok();
  SocketAddress address(state_dir_);
  if (!address.ok()) return Status::Internal("cannot open " + state_dir_ + ": " + strerror(errno));
  auto connected = ConnectTo(address);
  if (!connected.ok() && start) {
    // None answers: start one, listening on a fresh socket made here, so that the connection
    // below waits in its queue however long it takes to start.
    int made = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    // Above the standard descriptors, so that the spawn's dup2 to 3 is never onto itself.
    int listen_fd = made < 0 ? -1 : ::fcntl(made, F_DUPFD_CLOEXEC, 10);
    if (made >= 0) ::close(made);
    if (listen_fd < 0) return Status::Internal(std::string("socket: ") + strerror(errno));
    ::unlink(address.path().c_str());
    if (::bind(listen_fd, address.addr(), address.size()) != 0 ||
        ::chmod(address.path().c_str(), 0600) != 0 || ::listen(listen_fd, 64) != 0) {
      int err = errno;
      ::close(listen_fd);
      return Status::Internal("cannot listen on " + state_dir_ + "/" + kNodeSupervisorSocket +
                              ": " + strerror(err));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, listen_fd, 3);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDWR, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_RDWR, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    // A session of its own: signals to the agent's process group never reach the jobs.
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
    std::string arg = "__node";
    char* argv[] = {self_exe_.data(), arg.data(), state_dir_.data(), nullptr};
    pid_t pid = 0;
    int rc = posix_spawn(&pid, self_exe_.c_str(), &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(listen_fd);
    if (rc != 0) {
      return Status::Internal(std::string("cannot start the node supervisor: ") + strerror(rc));
    }
    connected = ConnectTo(address);
  }
  if (!connected.ok()) return connected.status();
  fd_ = connected->fd;
  node_pid_ = connected->pid;
  node_pulls_ = connected->pulls;
  return Status::Ok();
}

bool SupervisorLauncher::SendLocked(const std::string& line) {
  size_t sent = 0;
  while (fd_ >= 0 && sent < line.size()) {
    ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      DisconnectLocked();
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return fd_ >= 0;
}

Result<pid_t> SupervisorLauncher::Start(const std::string& dir) {
  if (dir.find('\n') != std::string::npos) return Status::Invalid("bad job directory");
  {
    MutexLock lock(mu_);
    // Twice: a node supervisor that exited since the last rank (it had nothing left to run and
    // the agent had gone) is replaced.
    for (int tries = 0; tries < 2; ++tries) {
      if (ConnectLocked(/*start=*/true).ok() && SendLocked("start " + dir + "\n")) {
        return node_pid_;
      }
    }
  }
  return SpawnSupervisor(self_exe_, dir);  // a supervisor of its own, then
}

Result<pid_t> SupervisorLauncher::StartWithPull(const std::string& dir) {
  if (dir.find('\n') != std::string::npos) return Status::Invalid("bad job directory");
  {
    MutexLock lock(mu_);
    for (int tries = 0; tries < 2; ++tries) {
      if (!ConnectLocked(/*start=*/true).ok()) continue;
      if (!node_pulls_) break;  // an older node supervisor: it would skip the pull
      if (SendLocked("start " + dir + "\n")) return node_pid_;
    }
  }
  return SpawnSupervisor(self_exe_, dir);
}

void SupervisorLauncher::Stop(pid_t pid, const std::string& dir) {
  if (pid <= 0) return;
  {
    MutexLock lock(mu_);
    // A rank adopted after a restart may be the node supervisor's: ask it, if it answers.
    if (fd_ < 0) ConnectLocked(/*start=*/false);
    if (fd_ >= 0 && pid == node_pid_ && SendLocked("stop " + dir + "\n")) return;
  }
  // A supervisor of one rank (or a node supervisor no longer reachable: it stops all it runs).
  ::kill(pid, SIGTERM);
}

bool SupervisorLauncher::Alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == EPERM;
  // A zombie counts as gone.
  std::string stat = ReadFileOr("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

}  // namespace berth
