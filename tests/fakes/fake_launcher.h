// FakeLauncher: a Launcher that starts nothing. Start(dir) records the directory and hands out
// made-up pids (100001, 100002, ...); the test plays the supervisor by writing the job's output and
// events itself (AppendEvent). Stop(pid, dir) is recorded, and Alive(pid) holds until the test
// kills the pid (a supervisor that died, e.g. SIGKILL before it recorded an exit). The agent never
// signals a pid itself — only through its Launcher — so the made-up pids never reach the kernel.
// HoldStarts() makes Start() wait, as a slow start of the node supervisor would. Thread-safe.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/launcher.h"

namespace berth::testing {

class FakeLauncher final : public Launcher {
 public:
  static constexpr pid_t kFirstPid = 100'001;

  Result<pid_t> Start(const std::string& dir) override {
    std::unique_lock lock(mu_);
    starts_.push_back(dir);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_; });
    return next_pid_++;
  }
  void Stop(pid_t pid, const std::string& dir) override {
    std::lock_guard lock(mu_);
    stops_.push_back(pid);
    stop_dirs_.push_back(dir);
  }
  // As SupervisorLauncher: pid 0 (none known) is not alive.
  bool Alive(pid_t pid) override {
    std::lock_guard lock(mu_);
    return pid > 0 && dead_.count(pid) == 0;
  }

  // While held, Start blocks once it has recorded the directory (a slow start): the agent's
  // launch stays between "launching" and "has a pid".
  void HoldStarts() {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  void ReleaseStarts() {
    std::lock_guard lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }

  // The supervisor `pid` is gone from now on.
  void Kill(pid_t pid) {
    std::lock_guard lock(mu_);
    dead_.insert(pid);
  }

  // The job directories started, in order; the i-th got pid kFirstPid + i.
  std::vector<std::string> starts() const {
    std::lock_guard lock(mu_);
    return starts_;
  }
  std::vector<pid_t> stops() const {
    std::lock_guard lock(mu_);
    return stops_;
  }
  // The job directory of each stop, in order.
  std::vector<std::string> stop_dirs() const {
    std::lock_guard lock(mu_);
    return stop_dirs_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;                   // guarded by mu_
  std::vector<std::string> starts_;     // guarded by mu_
  std::vector<pid_t> stops_;            // guarded by mu_
  std::vector<std::string> stop_dirs_;  // guarded by mu_
  std::set<pid_t> dead_;                // guarded by mu_
  pid_t next_pid_ = kFirstPid;          // guarded by mu_
};

}  // namespace berth::testing
