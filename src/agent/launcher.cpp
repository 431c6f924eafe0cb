#include "agent/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "common/files.h"
#include "supervise/supervisor.h"

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

}  // namespace

SupervisorLauncher::SupervisorLauncher(const std::string& self_exe)
    : self_exe_(SupervisorExe(self_exe)), spawner_(self_exe_) {}

Result<pid_t> SupervisorLauncher::Start(const std::string& dir) {
  auto pid = spawner_.Spawn(dir);
  if (!pid.ok()) pid = SpawnSupervisor(self_exe_, dir);
  return pid;
}

void SupervisorLauncher::Stop(pid_t pid) {
  if (pid > 0) ::kill(pid, SIGTERM);
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
