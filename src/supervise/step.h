// Step: starting one step (setup or run) of a job rank as its own process group, and the process
// tree queries that stopping a job needs. Shared by the per-job supervisor (supervisor.h) and the
// node supervisor (node_supervisor.h), which differ only in how they wait.
//
// Thread-safety: StartingStep and LaunchStep must be used from a single-threaded process (the
// step's child shares its memory until it execs); the process queries read /proc and are
// thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "supervise/cgroup.h"
#include "supervise/supervisor.h"

namespace berth {

// A step's child between its start and its exec of bash. The child runs in this process's memory
// (clone(CLONE_VM), no page table copied) on a stack of its own, reading the arguments and
// environment held here, so a StartingStep must outlive the child's exec: the destructor waits for
// it. fd() becomes readable once the child has exec'd (end of file) or failed before (a message);
// the caller may poll it and go on meanwhile.
class StartingStep {
 public:
  // `cgroup`: how the child enters the rank's cgroup (RankCgroup::Entry): born in its cgroup2
  // directory where there is one and the kernel can (clone3; supervise/clone_into_cgroup.h), and
  // otherwise, or for the other hierarchies, by writing "0" to their join files (v1 `tasks`, v2
  // `cgroup.procs`: RankCgroup::JoinFiles) before anything else (so this process holds no
  // descriptor of them for the children that start beside it to inherit and close at their exec).
  // `tty_fd`, when not -1, is a terminal (supervise/terminal.h) that the child makes its
  // controlling terminal, in a session of its own (its pid is still its process group), and its
  // stdin, stdout and stderr instead of /dev/null and `log_fd`; the caller may close it once this
  // returns.
  StartingStep(const std::string& script, const std::string& script_path,
               const std::string& workdir, const std::map<std::string, std::string>& env,
               const std::optional<RunPlan::RunAs>& run_as, int log_fd,
               const CgroupEntry& cgroup = {}, int tty_fd = -1);
  ~StartingStep();
  StartingStep(const StartingStep&) = delete;
  StartingStep& operator=(const StartingStep&) = delete;

  // The child, or -1 if it could not be started (then Wait() says why).
  pid_t pid() const { return pid_; }
  int fd() const { return err_fd_; }
  // Blocks until the child has exec'd or failed; returns why it failed ("" if it exec'd).
  const std::string& Wait();

 private:
  struct Child;
  std::unique_ptr<Child> child_;
  pid_t pid_ = -1;
  int err_fd_ = -1;
  bool waited_ = false;
  std::string error_;
  std::string workdir_;
  std::optional<RunPlan::RunAs> run_as_;
};

// A step started by LaunchStep. With `error` set, the step could not run (its exit code is 127):
// `pid`, when positive, is a child that failed before its exec and exits at once (reap it).
struct StepLaunch {
  pid_t pid = -1;
  int exit_code = 0;
  std::string error;
};

// Starts `script` with bash as a new process group (the pgid is the pid), stdin /dev/null, stdout
// and stderr `log_fd`, in `workdir` (empty: the caller's), as `run_as` (unset: the caller's user),
// with exactly `env`. A script up to 64 KiB is passed with -c; a longer one is written to
// `script_path` and read by bash from there (Linux refuses any one argument over 128 KiB). Returns
// once the child has exec'd bash or failed to (StartingStep, waited).
StepLaunch LaunchStep(const std::string& script, const std::string& script_path,
                      const std::string& workdir, const std::map<std::string, std::string>& env,
                      const std::optional<RunPlan::RunAs>& run_as, int log_fd,
                      const CgroupEntry& cgroup = {});

// The children of the single-threaded process `parent` (read from /proc).
std::set<pid_t> ChildrenOf(pid_t parent);

// The process group of `pid` (-1 if it is gone).
pid_t ProcessGroupOf(pid_t pid);

// Sends `sig` to the process groups `groups`, then to each of `pids` and their descendants outside
// those groups (one read of /proc): each process gets the signal once (a job's trap of a warning
// signal runs once).
void SignalProcesses(const std::set<pid_t>& groups, const std::set<pid_t>& pids, int sig);

// The lease file's deadlines (see RunPlan::lease_file) against monotonic time `now_ms`: whether
// the job must be stopped (`term`) and whether without grace (`kill`). An unreadable file means
// neither.
struct LeaseVerdict {
  bool term = false;
  bool kill = false;
};
LeaseVerdict CheckLeaseFile(const std::string& path, int64_t now_ms);

}  // namespace berth
