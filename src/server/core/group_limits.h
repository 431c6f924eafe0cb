// GroupLimits: the max_running of bulk groups (docs/task-yaml.md), for the groups that have jobs in
// the core's memory, and how many of each group's jobs are there — so that a group's limit is
// forgotten with its last job and memory never holds the limits of every group ever made. It counts
// the jobs by watching the job table (job_table.h): every job that enters or leaves memory.
//
// Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

#include "server/core/job_table.h"

namespace berth {

class GroupLimits final : public JobTable::Observer {
 public:
  // At start: the limits the store holds (the jobs loaded are counted as they enter the table).
  void Load(std::map<int64_t, int> limits) { limits_ = std::move(limits); }
  // A job of a group came into memory (loaded, submitted, held again), or left it (ended for good,
  // or undone); the group's limit goes with its last job.
  void Entered(ActiveJob& job) override {
    if (job.row.group) ++live_[*job.row.group];
  }
  void Left(ActiveJob& job) override {
    if (job.row.group) JobGone(*job.row.group);
  }
  // Sets (or, with nullopt, lifts) a group's limit. A group without jobs in memory keeps none: its
  // limit is in the store, and matters again only if jobs of it come back.
  void Set(int64_t group, std::optional<int> max_running);
  // Puts back a limit as it was before a change whose commit failed.
  void Restore(int64_t group, std::optional<int> before);
  // Its side of a Txn's undo journal (txn.h): a group's limit.
  using Key = int64_t;
  using Snapshot = std::optional<int>;
  std::optional<int> Save(int64_t group) const { return Limit(group); }

  std::optional<int> Limit(int64_t group) const;
  // Whether `group` has a limit (what a pass counts running jobs for).
  bool Limited(int64_t group) const { return !limits_.empty() && limits_.count(group) > 0; }
  // Every limit kept: group -> max_running.
  const std::map<int64_t, int>& limits() const { return limits_; }
  // Jobs in memory per group (for DebugState).
  const std::unordered_map<int64_t, int>& live() const { return live_; }

 private:
  std::map<int64_t, int> limits_;
  void JobGone(int64_t group);

  std::unordered_map<int64_t, int> live_;
};

}  // namespace berth
