// Launcher: how the agent starts and stops the supervisor of one job rank (supervise/supervisor.h),
// given the job directory holding its run plan. SupervisorLauncher forks supervisors through the
// Spawner helper process (falling back to fork+exec), from the small berth-supervisor image that
// sits beside the agent's binary (or from the agent's own binary where it is missing); unit tests
// use a fake that records what it was asked and lets the test write the job's events itself
// (tests/fakes/fake_launcher.h).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "supervise/spawner.h"

namespace berth {

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts a supervisor for the run plan in `dir`; returns its pid.
  virtual Result<pid_t> Start(const std::string& dir) = 0;
  // Asks the supervisor to stop its job (SIGTERM; it escalates to SIGKILL after the grace).
  virtual void Stop(pid_t pid) = 0;
  // Whether the supervisor still lives (a zombie counts as gone).
  virtual bool Alive(pid_t pid) = 0;
};

class SupervisorLauncher final : public Launcher {
 public:
  // `self_exe`: the agent's binary; berth-supervisor is looked for beside it.
  explicit SupervisorLauncher(const std::string& self_exe);
  Result<pid_t> Start(const std::string& dir) override;
  void Stop(pid_t pid) override;
  bool Alive(pid_t pid) override;

 private:
  std::string self_exe_;  // what supervisors are started from
  Spawner spawner_;
};

}  // namespace berth
