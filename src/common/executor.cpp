#include "common/executor.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

namespace berth {

void LowerThisThreadPriority(int nice) {
  if (nice <= 0) return;
  auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  int current = ::getpriority(PRIO_PROCESS, tid);
  ::setpriority(PRIO_PROCESS, tid, std::min(19, current + nice));
}

void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

Executor::Executor(int threads, std::string name, int nice) {
  const size_t count = static_cast<size_t>(std::max(1, threads));
  {
    MutexLock lock(mu_);
    own_tasks_.resize(count);
  }
  for (size_t i = 0; i < count; ++i) {
    threads_.emplace_back([this, name, nice, i] {
      NameThisThread(name);
      LowerThisThreadPriority(nice);
      Loop(i);
    });
  }
}

Executor::~Executor() { Stop(); }

void Executor::Post(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(task));
  }
  cv_.Signal();
}

bool Executor::TryPost(std::function<void()> task, size_t max_queued) {
  {
    MutexLock lock(mu_);
    if (stopping_ || tasks_.size() >= max_queued) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.Signal();
  return true;
}

int Executor::PostToEachThread(const std::function<void()>& task) {
  int posted = 0;
  {
    MutexLock lock(mu_);
    if (stopping_) return 0;
    for (auto& own : own_tasks_) {
      if (own) continue;  // that thread has not run the previous one yet
      own = task;
      ++posted;
    }
  }
  cv_.SignalAll();
  return posted;
}

size_t Executor::queued() {
  MutexLock lock(mu_);
  return tasks_.size();
}

void Executor::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.SignalAll();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void Executor::Loop(size_t index) {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      auto& own = own_tasks_[index];
      while (tasks_.empty() && !own && !stopping_) cv_.Wait(mu_);
      if (own) {
        task = std::exchange(own, nullptr);
      } else if (!tasks_.empty()) {
        task = std::move(tasks_.front());
        tasks_.pop_front();
      } else {
        return;  // stopping, and everything queued has run
      }
    }
    task();
  }
}

}  // namespace berth
