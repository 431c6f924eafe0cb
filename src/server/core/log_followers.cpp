#include "server/core/log_followers.h"

namespace berth {

uint64_t LogFollowers::Add(int64_t job, std::function<void()> fire) {
  const uint64_t id = next_id_++;
  followers_.emplace(job, Follower{id, std::move(fire)});
  return id;
}

void LogFollowers::Remove(int64_t job, uint64_t id) {
  auto range = followers_.equal_range(job);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.id == id) {
      followers_.erase(it);
      return;
    }
  }
}

void LogFollowers::Wake(int64_t job) {
  auto range = followers_.equal_range(job);
  for (auto it = range.first; it != range.second; ++it) it->second.fire();
  followers_.erase(range.first, range.second);
}

}  // namespace berth
