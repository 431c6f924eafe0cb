// Launcher: how the agent starts and stops the supervisor of one job rank (supervise/supervisor.h),
// given the job directory holding its run plan. SupervisorLauncher hands ranks to the node
// supervisor (supervise/node_supervisor.h), one long-lived process per state directory that runs
// them all, and starts it when none answers on <state>/supervisor.sock; where it cannot, it falls
// back to a supervisor process per rank (fork + exec of `__supervise DIR`). Both run from the small
// berth-supervisor image beside the agent's binary (or from the agent's own binary where it is
// missing). Unit tests use a fake that records what it was asked and lets the test write the job's
// events itself (tests/fakes/fake_launcher.h).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"

namespace berth {

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts the rank whose run plan is in `dir`; returns the pid of its supervisor (the node
  // supervisor's, shared by every rank it runs). The rank's progress, and any failure to start it,
  // is recorded in `dir`'s events.
  virtual Result<pid_t> Start(const std::string& dir) = 0;
  // Start() of a rank whose plan has a pull step (RunPlan::pull): a supervisor that predates pull
  // steps (a node supervisor left running by an older agent) would skip it, so such a rank gets a
  // supervisor that knows them.
  virtual Result<pid_t> StartWithPull(const std::string& dir) { return Start(dir); }
  // Asks the supervisor `pid` to stop the rank of `dir` (SIGTERM to its processes, SIGKILL after
  // the grace).
  virtual void Stop(pid_t pid, const std::string& dir) = 0;
  // Whether the supervisor still lives (a zombie counts as gone).
  virtual bool Alive(pid_t pid) = 0;
  // A connection of its own to the supervisor of the interactive rank in `dir`, attached to its
  // terminal from byte `offset` of its output on (`attach`, supervise/node_supervisor.h); the
  // caller owns the descriptor. This default, for launchers without terminals, is Unavailable.
  virtual Result<int> OpenTerminalLeg(const std::string& /*dir*/, int64_t /*offset*/) {
    return Status::Unavailable("this node's launcher gives no job a terminal");
  }
  // A connection of its own to the supervisor of the running rank in `dir`, on which it runs
  // `command` into the rank (`exec`, supervise/node_supervisor.h): the leg of the command's own
  // terminal (a pseudo-terminal of rows x cols with `tty`). The default is Unavailable.
  // `container`: the command itself enters the rank's container (a container rank refuses others).
  virtual Result<int> OpenExecLeg(const std::string& /*dir*/, const std::string& /*command*/,
                                  bool /*tty*/, int /*rows*/, int /*cols*/, bool /*container*/) {
    return Status::Unavailable("this node's launcher runs no command into a job");
  }
};

class SupervisorLauncher final : public Launcher {
 public:
  // `self_exe`: the agent's binary; berth-supervisor is looked for beside it. `state_dir`: the
  // agent's, where the node supervisor's socket is.
  SupervisorLauncher(const std::string& self_exe, std::string state_dir);
  ~SupervisorLauncher() override;
  Result<pid_t> Start(const std::string& dir) override EXCLUDES(mu_);
  Result<pid_t> StartWithPull(const std::string& dir) override EXCLUDES(mu_);
  void Stop(pid_t pid, const std::string& dir) override EXCLUDES(mu_);
  bool Alive(pid_t pid) override;
  Result<int> OpenTerminalLeg(const std::string& dir, int64_t offset) override;
  Result<int> OpenExecLeg(const std::string& dir, const std::string& command, bool tty, int rows,
                          int cols, bool container) override;

 private:
  // Connects to the node supervisor, starting one if none answers and `start` is set.
  Status ConnectLocked(bool start) REQUIRES(mu_);
  // Sends one line; false if the node supervisor is gone (the connection is dropped).
  bool SendLocked(const std::string& line) REQUIRES(mu_);
  void DisconnectLocked() REQUIRES(mu_);
  // A connection of its own to the node supervisor, which becomes a leg once it has read `line`.
  Result<int> OpenLeg(const std::string& line);

  std::string self_exe_;  // what supervisors are started from
  std::string state_dir_;
  Mutex mu_;
  int fd_ GUARDED_BY(mu_) = -1;              // connection to the node supervisor
  pid_t node_pid_ GUARDED_BY(mu_) = 0;       // its pid
  bool node_pulls_ GUARDED_BY(mu_) = false;  // it runs pull steps (its greeting says "steps=pull")
};

}  // namespace berth
