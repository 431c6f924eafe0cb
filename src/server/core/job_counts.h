// JobCounts: how many jobs are in each state, per count group (a (pool, team) pair), and how many
// each user has pending — kept as jobs change, so that /metrics (berth_jobs{status,pool,team}),
// the dashboard's totals and max-pending-jobs at submission read them without walking every job.
// A job is counted under a key (status slot, group); the Core keeps each job's key with the job
// (ActiveJob::counted) and moves it as the job changes (JobBooks::CountJob).
//
// Thread-safety: none; the Core owns one and guards it with its mutex.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace berth {

class JobCounts {
 public:
  // Slots 0..9 are JobStatus values; kStoppingSlot is a job that ended for its user whose
  // processes are still being stopped.
  static constexpr int kStoppingSlot = 10;
  static constexpr int kSlots = 11;
  using Slots = std::array<int64_t, kSlots>;
  using Key = std::pair<int, uint32_t>;  // (slot, group)

  // The id of (pool, team), made on first use; ids are dense and never reused.
  uint32_t Group(const std::string& pool, const std::string& team);
  // (pool, team) of a group id from Group().
  const std::pair<std::string, std::string>& GroupNames(uint32_t group) const {
    return groups_[group];
  }

  // Counts one job of `user` under `key`, or takes it out.
  void Add(const Key& key, const std::string& user);
  void Remove(const Key& key, const std::string& user);
  // Every count back to zero (the groups stay).
  void Clear();

  // `user`'s pending jobs.
  int64_t Pending(const std::string& user) const;
  // Whether any job is pending (a user with none has no entry).
  bool AnyPending() const { return !pending_.empty(); }
  // Every group's counts added up.
  Slots Totals() const;
  const std::vector<std::pair<std::string, std::string>>& groups() const { return groups_; }
  const std::vector<Slots>& counts() const { return counts_; }

  // The same counts (groups may differ in order only if made in another order: they do not here).
  bool SameCounts(const JobCounts& other) const {
    return counts_ == other.counts_ && pending_ == other.pending_;
  }

 private:
  static constexpr int kPendingSlot = 0;  // JobStatus::kPending
  std::map<std::pair<std::string, std::string>, uint32_t> group_ids_;
  std::vector<std::pair<std::string, std::string>> groups_;
  std::vector<Slots> counts_;                         // by group
  std::unordered_map<std::string, int64_t> pending_;  // by user; none: absent
};

}  // namespace berth
