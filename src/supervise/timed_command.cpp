#include "supervise/timed_command.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/strings.h"

extern char** environ;

namespace berth {

namespace {

// argv and envp as the child's execve wants them, built before the clone (the child may only make
// async-signal-safe calls).
struct ExecArgs {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

ExecArgs BuildExecArgs(const std::string& path, const TimedCommand& command) {
  ExecArgs a;
  a.strings.reserve(command.argv.size() + command.env.size());
  a.strings.push_back(path);
  for (size_t i = 1; i < command.argv.size(); ++i) a.strings.push_back(command.argv[i]);
  const size_t nargs = a.strings.size();
  for (const auto& [k, v] : command.env) a.strings.push_back(k + "=" + v);
  for (size_t i = 0; i < nargs; ++i) a.argv.push_back(a.strings[i].data());
  a.argv.push_back(nullptr);
  if (command.env.empty()) {
    for (char** e = environ; e && *e; ++e) a.envp.push_back(*e);
  } else {
    for (size_t i = nargs; i < a.strings.size(); ++i) a.envp.push_back(a.strings[i].data());
  }
  a.envp.push_back(nullptr);
  return a;
}

// The watcher: starts the command as the leader of a process group of its own (scripts such as
// LBNL NHC re-run themselves in a new session unless they lead their group, and would escape the
// kill), writes the command's pid and then its wait status to `status_fd`. Async-signal-safe calls
// only (it runs after a fork of a threaded process).
// Closes every descriptor but the watcher's own three, first thing and by raw system calls: the
// caller's others (the agent's lock, its listening sockets) must not live on in a watcher whose
// command hangs after its caller died, or a restarted agent could not take its state dir.
void CloseAllBut(int a, int b, int c) {
  int keep[3] = {a, b, c};
  std::sort(std::begin(keep), std::end(keep));
  long from = 3;
  for (int k : keep) {
    if (k < from) continue;
    if (k > from) ::syscall(SYS_close_range, from, static_cast<long>(k - 1), 0L);
    from = k + 1;
  }
  ::syscall(SYS_close_range, from, static_cast<long>(~0U), 0L);
}

[[noreturn]] void WatchChild(const ExecArgs& args, int out_fd, int null_fd, int status_fd) {
  CloseAllBut(out_fd, null_fd, status_fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  setpgid(0, 0);  // out of the caller's group: a signal to the agent's group is not for it
  long pid = ::syscall(SYS_clone, static_cast<long>(SIGCHLD), nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) {
    setpgid(0, 0);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    execve(args.argv[0], args.argv.data(), const_cast<char* const*>(args.envp.data()));
    _exit(127);
  }
  close(out_fd);
  pid_t child = static_cast<pid_t>(pid);
  if (pid > 0) setpgid(child, child);  // before the caller can kill the group
  ssize_t ignored = write(status_fd, &child, sizeof(child));
  if (pid < 0) _exit(126);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) _exit(126);
  }
  ignored = write(status_fd, &status, sizeof(status));
  (void)ignored;
  _exit(0);
}

}  // namespace

std::string CommandOutcome::FirstLine() const {
  for (const auto& line : Split(output, '\n')) {
    std::string t = Trim(line);
    if (t.empty()) continue;
    if (t.size() > 200) t = t.substr(0, 200);
    return t;
  }
  return "";
}

std::string CommandOutcome::Failure() const {
  if (ok()) return "";
  if (!start_error.empty()) return start_error;
  if (timed_out) return "timed out after " + FormatDuration(timeout_ms);
  if (aborted) return "aborted";
  std::string what = exit_code ? "exit code " + std::to_string(*exit_code)
                               : "killed by signal " + std::to_string(signal);
  std::string line = FirstLine();
  return line.empty() ? what : what + ": " + line;
}

std::string FindExecutable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = ::getenv("PATH");
  for (const auto& dir : Split(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string full = dir + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

CommandOutcome ProcessRunner::Run(const TimedCommand& command, const std::function<bool()>& abort) {
  CommandOutcome out;
  out.timeout_ms = command.timeout;
  const int64_t started = MonotonicMs();
  const std::string path = command.argv.empty() ? "" : FindExecutable(command.argv[0]);
  if (path.empty()) {
    out.start_error = "cannot run " + (command.argv.empty() ? std::string("''") : command.argv[0]) +
                      ": not found or not executable";
    return out;
  }
  ExecArgs args = BuildExecArgs(path, command);
  int pipe_fds[2];
  int status_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    out.start_error = std::string("cannot run ") + path + ": pipe: " + strerror(errno);
    return out;
  }
  if (::pipe2(status_fds, O_CLOEXEC) != 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    out.start_error = std::string("cannot run ") + path + ": pipe: " + strerror(errno);
    return out;
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // A watcher process between us and the command hands its exit status over a pipe: a
  // `waitpid(-1, ...)` elsewhere in the process (the agent reaps its supervisors so) may reap the
  // watcher, but never takes the command's status.
  long pid = ::syscall(SYS_clone, static_cast<long>(SIGCHLD), nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) WatchChild(args, pipe_fds[1], null_fd, status_fds[1]);
  ::close(pipe_fds[1]);
  ::close(status_fds[1]);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(status_fds[0]);
    out.start_error = std::string("cannot run ") + path + ": " + strerror(errno);
    return out;
  }
  const pid_t watcher = static_cast<pid_t>(pid);
  // The command's pid, which leads its process group: what a kill is sent to.
  pid_t group = -1;
  if (::read(status_fds[0], &group, sizeof(group)) != static_cast<ssize_t>(sizeof(group)) ||
      group <= 0) {
    ::close(pipe_fds[0]);
    ::close(status_fds[0]);
    while (::waitpid(watcher, nullptr, 0) < 0 && errno == EINTR) {
    }
    out.start_error = std::string("cannot run ") + path + ": fork failed";
    return out;
  }
  const int64_t deadline = started + command.timeout;
  bool killed = false;
  auto kill_if_due = [&](int64_t now) {
    if (killed) return;
    if (now >= deadline) {
      out.timed_out = true;
    } else if (abort && abort()) {
      out.aborted = true;
    } else {
      return;
    }
    ::kill(-group, SIGKILL);
    killed = true;
  };
  // Output until it closes (the command and all it started are done with it), or until a kill
  // and a second more (a process that left the group may hold it open).
  int64_t give_up = 0;
  while (true) {
    const int64_t now = MonotonicMs();
    kill_if_due(now);
    if (killed && give_up == 0) give_up = now + 1000;
    if (killed && now >= give_up) break;
    int64_t wait = killed ? give_up - now : std::min<int64_t>(deadline - now, 100);
    pollfd p{pipe_fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(wait, 0)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(pipe_fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t room =
        CommandOutcome::kMaxOutput - std::min(out.output.size(), CommandOutcome::kMaxOutput);
    out.output.append(buf, std::min(static_cast<size_t>(n), room));
  }
  ::close(pipe_fds[0]);
  // The command's wait status, once the watcher has it (it writes it as the command ends).
  int status = 0;
  bool have_status = false;
  while (true) {
    const int64_t now = MonotonicMs();
    kill_if_due(now);
    pollfd p{status_fds[0], POLLIN, 0};
    int r = ::poll(&p, 1,
                   killed ? 1000 : static_cast<int>(std::clamp<int64_t>(deadline - now, 0, 100)));
    if (r < 0 && errno != EINTR) break;
    if (r == 0 && !killed) continue;
    if (r <= 0) break;
    ssize_t n = ::read(status_fds[0], &status, sizeof(status));
    have_status = n == static_cast<ssize_t>(sizeof(status));
    break;
  }
  ::close(status_fds[0]);
  // Whatever it left in its group goes too (a group with members keeps its id from reuse).
  ::kill(-group, SIGKILL);
  while (::waitpid(watcher, nullptr, 0) < 0 && errno == EINTR) {
  }
  out.duration_ms = MonotonicMs() - started;
  if (!have_status) return out;
  if (WIFEXITED(status) && !killed) {
    out.exit_code = WEXITSTATUS(status);
    if (*out.exit_code == 127 && out.output.empty()) {
      out.start_error = "cannot run " + path + ": exec failed";
    }
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  }
  return out;
}

}  // namespace berth
