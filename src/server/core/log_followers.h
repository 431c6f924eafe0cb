// LogFollowers: the requests following a job's output (`berth logs -f`, GET .../logs?wait_ms), each
// woken once when output for its job arrives or the job ends for good. How many there are is bound
// by the open connections (each follower is one request in flight).
//
// Thread-safety: none; the Core owns one and guards it with its mutex. A follower's `fire` runs
// under that lock: it must only post work to another thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

namespace berth {

class LogFollowers {
 public:
  // Follows `job`; the id removes it.
  uint64_t Add(int64_t job, std::function<void()> fire);
  void Remove(int64_t job, uint64_t id);
  // Fires and forgets `job`'s followers.
  void Wake(int64_t job);
  // Forgets every follower without firing (shutdown: their connections close).
  void Clear() { followers_.clear(); }
  size_t size() const { return followers_.size(); }

 private:
  struct Follower {
    uint64_t id;
    std::function<void()> fire;
  };
  std::multimap<int64_t, Follower> followers_;  // by job
  uint64_t next_id_ = 1;
};

}  // namespace berth
