// GroupTallies: each bulk group's jobs per status while it has jobs in memory (group_tallies.h).
#include "server/core/group_tallies.h"

#include <vector>

namespace berth {

std::map<JobStatus, int> GroupTallies::Tally::Counts() const {
  std::map<JobStatus, int> out;
  for (int s = 0; s < kStatuses; ++s) {
    if (by_status[s] > 0) out[static_cast<JobStatus>(s)] = static_cast<int>(by_status[s]);
  }
  return out;
}

void GroupTallies::Start(int64_t group, Tally tally) {
  MutexLock lock(mu_);
  tallies_[group] = std::move(tally);
}

std::optional<GroupTallies::Tally> GroupTallies::Find(int64_t group) const {
  MutexLock lock(mu_);
  auto it = tallies_.find(group);
  if (it == tallies_.end()) return std::nullopt;
  return it->second;
}

std::map<int64_t, std::map<JobStatus, int>> GroupTallies::Counts(
    const std::vector<int64_t>& groups) const {
  std::map<int64_t, std::map<JobStatus, int>> out;
  MutexLock lock(mu_);
  for (int64_t group : groups) {
    auto it = tallies_.find(group);
    if (it != tallies_.end()) out[group] = it->second.Counts();
  }
  return out;
}

void GroupTallies::Move(int64_t group, JobStatus from, JobStatus to) {
  if (from == to) return;
  MutexLock lock(mu_);
  auto it = tallies_.find(group);
  if (it == tallies_.end()) return;
  --it->second.by_status[static_cast<int>(from)];
  ++it->second.by_status[static_cast<int>(to)];
}

void GroupTallies::SetLimit(int64_t group, std::optional<int> max_running) {
  MutexLock lock(mu_);
  auto it = tallies_.find(group);
  if (it != tallies_.end()) it->second.max_running = max_running;
}

bool GroupTallies::Enter(int64_t group) {
  MutexLock lock(mu_);
  auto it = tallies_.find(group);
  if (it == tallies_.end()) return false;
  ++it->second.live;
  return true;
}

void GroupTallies::Leave(int64_t group) {
  MutexLock lock(mu_);
  auto it = tallies_.find(group);
  if (it != tallies_.end() && --it->second.live <= 0) tallies_.erase(it);
}

std::unordered_map<int64_t, GroupTallies::Tally> GroupTallies::All() const {
  MutexLock lock(mu_);
  return tallies_;
}

}  // namespace berth
