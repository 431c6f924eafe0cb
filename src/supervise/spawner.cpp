#include "supervise/spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <string>

#include "supervise/supervisor.h"

extern char** environ;

namespace berth {

Spawner::Spawner(std::string self_exe) : self_exe_(std::move(self_exe)) {}

Spawner::~Spawner() {
  std::lock_guard lock(mu_);
  StopLocked();
}

void Spawner::StopLocked() {
  if (to_fd_ >= 0) ::close(to_fd_);  // EOF: the helper exits; supervisors live on
  if (from_fd_ >= 0) ::close(from_fd_);
  to_fd_ = from_fd_ = -1;
  if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

Status Spawner::StartLocked() {
  int in[2];
  int out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return Status::Internal(std::string("pipe: ") + strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  std::string arg = "__spawner";
  char* argv[] = {self_exe_.data(), arg.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, self_exe_.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return Status::Internal(std::string("cannot start the spawner: ") + strerror(rc));
  }
  pid_ = pid;
  to_fd_ = in[1];
  from_fd_ = out[0];
  return Status::Ok();
}

Result<pid_t> Spawner::Spawn(const std::string& dir) {
  if (dir.find('\n') != std::string::npos) return Status::Invalid("bad job directory");
  std::lock_guard lock(mu_);
  for (int tries = 0; tries < 2; ++tries) {
    if (pid_ == 0) {
      Status st = StartLocked();
      if (!st.ok()) return st;
    }
    std::string line = dir + "\n";
    bool ok = ::write(to_fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    // One line per request, written at once: one read normally takes it whole.
    std::string answer;
    while (ok && (answer.empty() || answer.back() != '\n')) {
      char buf[64];
      ssize_t n = ::read(from_fd_, buf, sizeof(buf));
      if (n <= 0) {
        ok = false;
        break;
      }
      answer.append(buf, static_cast<size_t>(n));
    }
    if (ok) answer.pop_back();
    if (ok && !answer.empty()) {
      pid_t pid = std::atoi(answer.c_str());
      if (pid > 0) return pid;
      return Status::Internal("the spawner could not fork: " + answer);
    }
    StopLocked();  // the helper died: start a fresh one and try once more
  }
  return Status::Internal("the spawner is not answering");
}

int SpawnerMain() {
  // Supervisors are reaped by the kernel; they report through their job directory, not their exit
  // status.
  ::signal(SIGCHLD, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  // The supervisor's waited signals are blocked across each fork, so that the child holds them
  // blocked from birth: the agent may SIGTERM a supervisor as soon as it has its pid, and that
  // stop must stay pending until SupervisorMain records it, not kill the child silently.
  sigset_t waited = SupervisorWaitedSignals();
  std::string dir;
  while (std::getline(std::cin, dir)) {
    sigset_t old_mask;
    ::sigprocmask(SIG_BLOCK, &waited, &old_mask);
    pid_t pid = ::fork();
    int fork_errno = errno;
    if (pid != 0) ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (pid == 0) {
      ::signal(SIGCHLD, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      ::setsid();
      int devnull = ::open("/dev/null", O_RDWR);
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
      ::syscall(SYS_close_range, 3U, ~0U, 0U);
      _exit(SupervisorMain(dir));
    }
    std::string answer = pid > 0 ? std::to_string(pid) + "\n"
                                 : std::string("fork failed: ") + strerror(fork_errno) + "\n";
    if (::write(1, answer.data(), answer.size()) < 0) return 1;
  }
  return 0;
}

}  // namespace berth
