#include "agent/launcher.h"

#include <signal.h>

#include <cerrno>

#include "agent/supervisor.h"
#include "common/files.h"

namespace berth {

SupervisorLauncher::SupervisorLauncher(std::string self_exe)
    : self_exe_(self_exe), spawner_(std::move(self_exe)) {}

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
