// GroupLimits: the max_running of bulk groups (docs/task-yaml.md), for the groups that have jobs in
// the core's memory, and how many of each group's jobs are there — so that a group's limit is
// forgotten with its last job and memory never holds the limits of every group ever made.
//
// Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

namespace berth {

class GroupLimits {
 public:
  // At start: the limits the store holds (the Core then adds each loaded job with JobsAdded).
  void Load(std::map<int64_t, int> limits) { limits_ = std::move(limits); }
  // `count` jobs of `group` came into memory (loaded, or a submission applied).
  void JobsAdded(int64_t group, int count) { live_[group] += count; }
  // One job of `group` left memory (ended for good); the group's limit goes with its last job.
  void JobGone(int64_t group);
  // Sets (or, with nullopt, lifts) a group's limit. A group without jobs in memory keeps none: its
  // limit is in the store, and matters again only if jobs of it come back.
  void Set(int64_t group, std::optional<int> max_running);
  // Puts back a limit as it was before a change whose commit failed.
  void Restore(int64_t group, std::optional<int> before);

  std::optional<int> Limit(int64_t group) const;
  // Whether `group` has a limit (what a pass counts running jobs for).
  bool Limited(int64_t group) const { return !limits_.empty() && limits_.count(group) > 0; }
  // Every limit kept: group -> max_running.
  const std::map<int64_t, int>& limits() const { return limits_; }
  // Jobs in memory per group (for DebugState).
  const std::unordered_map<int64_t, int>& live() const { return live_; }

 private:
  std::map<int64_t, int> limits_;
  std::unordered_map<int64_t, int> live_;
};

}  // namespace berth
