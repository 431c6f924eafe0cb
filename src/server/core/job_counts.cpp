#include "server/core/job_counts.h"

#include "common/job_status.h"

namespace berth {

static_assert(static_cast<int>(JobStatus::kPending) == 0, "kPendingSlot is JobStatus::kPending");

uint32_t JobCounts::Group(const std::string& pool, const std::string& team) {
  std::pair<std::string, std::string> names{pool, team};
  auto [it, fresh] = group_ids_.try_emplace(names, static_cast<uint32_t>(groups_.size()));
  if (fresh) {
    groups_.push_back(std::move(names));
    counts_.push_back({});
  }
  return it->second;
}

void JobCounts::Add(const Key& key, const std::string& user) {
  ++counts_[key.second][static_cast<size_t>(key.first)];
  if (key.first == kPendingSlot) ++pending_[user];
}

void JobCounts::Remove(const Key& key, const std::string& user) {
  --counts_[key.second][static_cast<size_t>(key.first)];
  if (key.first == kPendingSlot) {
    auto it = pending_.find(user);
    if (it != pending_.end() && --it->second == 0) pending_.erase(it);
  }
}

void JobCounts::Clear() {
  for (Slots& slots : counts_) slots.fill(0);
  pending_.clear();
}

int64_t JobCounts::Pending(const std::string& user) const {
  auto it = pending_.find(user);
  return it == pending_.end() ? 0 : it->second;
}

JobCounts::Slots JobCounts::Totals() const {
  Slots total{};
  for (const Slots& slots : counts_) {
    for (size_t slot = 0; slot < total.size(); ++slot) total[slot] += slots[slot];
  }
  return total;
}

}  // namespace berth
