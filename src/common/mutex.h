// Mutex, MutexLock and CondVar: std::mutex and friends with clang's thread-safety annotations, so
// that "this field is guarded by mu_" and "call this with mu_ held" are written as GUARDED_BY(mu_)
// and REQUIRES(mu_) and checked by the compiler (clang -Wthread-safety; scripts/test.sh runs such a
// build when clang is installed). With GCC the annotations compile to nothing.
//
// Thread-safety: like std::mutex. Mutex is not recursive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define BERTH_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define BERTH_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) BERTH_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY BERTH_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) BERTH_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) BERTH_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_AFTER(...) BERTH_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) BERTH_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) BERTH_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) BERTH_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) BERTH_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS BERTH_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace berth {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // For std::condition_variable_any (BasicLockable); prefer MutexLock.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds the lock (for lambdas run under it).
  void AssertHeld() const BERTH_THREAD_ANNOTATION(assert_capability(this)) {}

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock()/Lock() let a scope drop the lock for slow work.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void Unlock() RELEASE() {
    held_ = false;
    mu_.Unlock();
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable for Mutex. Wait* must be called with `mu` held (it is released while
// waiting).
class CondVar {
 public:
  void Wait(Mutex& mu) REQUIRES(mu) { cv_.wait(mu); }
  // Returns false on timeout.
  bool WaitFor(Mutex& mu, int64_t ms) REQUIRES(mu) {
    return cv_.wait_for(mu, std::chrono::milliseconds(ms)) == std::cv_status::no_timeout;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace berth
