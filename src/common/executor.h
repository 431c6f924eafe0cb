// Executor: a fixed pool of threads running posted tasks in FIFO order. The server hands every
// handler that may wait — for its state lock or for the store — to an executor, so that the HTTP
// I/O threads never block and a health check or a listing is answered while a scheduling pass
// commits.
//
// Thread-safety: Post(), TryPost() and PostToEachThread() from any thread, also from a task. Stop()
// (or the destructor) runs the tasks already queued, then joins; tasks posted after Stop() are
// dropped.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace berth {

// Lowers the calling thread's CPU priority by `nice` steps (Linux nice values are per thread), so
// that on a busy machine latency-sensitive threads (the HTTP I/O threads) get the CPU first. Best
// effort: failures are ignored.
void LowerThisThreadPriority(int nice);

// Names the calling thread (its first 15 characters), as `top -H`, perf and debuggers show it.
void NameThisThread(const std::string& name);

class Executor {
 public:
  // `threads` >= 1. `name` names the threads (for debuggers and `top -H`), at most 15 characters.
  // `nice` > 0 lowers their CPU priority (see LowerThisThreadPriority).
  Executor(int threads, std::string name, int nice = 0);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> task) EXCLUDES(mu_);
  // Posts `task` unless `max_queued` tasks wait already (or the executor stopped): false then, and
  // the task is dropped. For work that arrives from outside (requests), so that a flood is
  // answered "busy" instead of queued without bound.
  bool TryPost(std::function<void()> task, size_t max_queued) EXCLUDES(mu_);
  // Runs a copy of `task` on each of the executor's threads, before the next queued task that
  // thread takes: for what belongs to a thread, such as its heap arena (common/heap.h). A thread
  // busy with a long task runs it after that task; one that has not yet run the previous such task
  // gets no second, so a stuck thread piles nothing up. Returns how many threads it was posted to.
  int PostToEachThread(const std::function<void()>& task) EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);
  // Tasks queued and not yet started (for tests and metrics).
  size_t queued() EXCLUDES(mu_);

 private:
  void Loop(size_t index) EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  // The task for one thread each (PostToEachThread), by thread index; empty once run.
  std::vector<std::function<void()>> own_tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace berth
