// Spawner: a small single-threaded helper process (`berth-supervisor __spawner`) that forks job
// supervisors for the agent. Forking from a single-threaded process is safe without an exec, so
// each job costs one fork here and one exec (bash) instead of two execs — the supervisor is a copy
// of the spawner, already loaded. The helper reads job directories from a pipe, one per line, forks
// a supervisor for each (which starts its own session and outlives both the spawner and the agent)
// and answers with its pid.
//
// Spawner is thread-safe: Spawn() serializes on an internal mutex. If the helper dies it is
// restarted.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>

#include "common/status.h"

namespace berth {

class Spawner {
 public:
  explicit Spawner(std::string self_exe);
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Starts a supervisor for `dir`; returns its pid.
  Result<pid_t> Spawn(const std::string& dir);

 private:
  Status StartLocked();
  void StopLocked();

  std::string self_exe_;
  std::mutex mu_;
  pid_t pid_ = 0;     // guarded by mu_
  int to_fd_ = -1;    // guarded by mu_
  int from_fd_ = -1;  // guarded by mu_
};

// main() of `berth __spawner`.
int SpawnerMain();

}  // namespace berth
