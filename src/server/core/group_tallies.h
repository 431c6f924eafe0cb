// GroupTallies: how many of a bulk group's jobs are in each status, kept in memory for the groups
// that have jobs in the core's memory — so that GET /v1/groups/{id} (what `berth wait --group`
// polls), the queue's and the dashboard's group rows read a group's counts without counting its
// jobs in the store (a 10,000-job group took ~9 ms there, on the one read connection listings
// share), and without waiting for the core's lock (a pass holds it for tens of milliseconds at
// 100,000 jobs).
//
// A tally counts every job of its group, those already reaped from memory included (under their
// final status, which no longer changes). It is made when the group's submission is applied (all
// its jobs pending) or, at load, from the store's counts; it moves as the core's jobs change
// status, once each change is committed (JobBooks::TallyJob notes the move in the plan,
// CoreState::CountCommitted makes it: readers never see a change a failed commit undoes), and is
// dropped with the group's last job in memory — from then on the store answers for the group. A job
// of a group that has no tally never starts one. It keeps the group's max_running too, as
// GroupLimits holds it.
//
// Thread-safety: thread-safe; one mutex of its own, never held while calling out. The Core changes
// it under its own lock (core lock, then this one); readers take only this one.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/job_status.h"
#include "common/mutex.h"

namespace berth {

class GroupTallies {
 public:
  static constexpr int kStatuses = static_cast<int>(JobStatus::kPreempted) + 1;
  struct Tally {
    int64_t size = 0;                            // jobs in the group
    std::string user;                            // its owner
    std::optional<int> max_running;              // its limit (none: no limit)
    std::array<int64_t, kStatuses> by_status{};  // jobs per JobStatus
    int64_t live = 0;                            // of them in the core's memory

    // The counts as the API shows them: statuses with at least one job.
    std::map<JobStatus, int> Counts() const;
  };

  // Starts tallying `group`: `tally` counts all its jobs, `live` of them in memory.
  void Start(int64_t group, Tally tally) EXCLUDES(mu_);
  // A copy of the group's tally; nullopt when it is not tallied.
  std::optional<Tally> Find(int64_t group) const EXCLUDES(mu_);
  // The counts of those of `groups` that are tallied.
  std::map<int64_t, std::map<JobStatus, int>> Counts(const std::vector<int64_t>& groups) const
      EXCLUDES(mu_);
  // One job of a tallied group went from status `from` to `to`.
  void Move(int64_t group, JobStatus from, JobStatus to) EXCLUDES(mu_);
  // The group's limit changed (or was put back after a failed commit).
  void SetLimit(int64_t group, std::optional<int> max_running) EXCLUDES(mu_);
  // A job of `group`, already counted, came into memory again; false (and nothing kept) when the
  // group is not tallied.
  bool Enter(int64_t group) EXCLUDES(mu_);
  // A job of a tallied group left memory; the tally goes with the group's last one.
  void Leave(int64_t group) EXCLUDES(mu_);
  // Every tally (for the consistency check of the tests).
  std::unordered_map<int64_t, Tally> All() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::unordered_map<int64_t, Tally> tallies_ GUARDED_BY(mu_);
};

}  // namespace berth
