// GroupLimits: bulk groups' max_running while they have jobs in memory (group_limits.h).
#include "server/core/group_limits.h"

namespace berth {

void GroupLimits::JobGone(int64_t group) {
  auto live = live_.find(group);
  if (live == live_.end() || --live->second > 0) return;
  limits_.erase(group);
  live_.erase(live);
}

void GroupLimits::Set(int64_t group, std::optional<int> max_running) {
  if (!max_running) {
    limits_.erase(group);
  } else if (live_.count(group)) {
    limits_[group] = *max_running;
  }
}

void GroupLimits::Restore(int64_t group, std::optional<int> before) {
  if (before) {
    limits_[group] = *before;
  } else {
    limits_.erase(group);
  }
}

std::optional<int> GroupLimits::Limit(int64_t group) const {
  auto it = limits_.find(group);
  if (it == limits_.end()) return std::nullopt;
  return it->second;
}

}  // namespace berth
