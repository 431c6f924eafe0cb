// DyingAttempts: earlier attempts of jobs that went back to the queue (preempted, their node lost,
// restarted) while some of their ranks still run. Each keeps its placement's resources held until
// every one of those ranks is reported gone, so that no new job — nor the job's next attempt —
// lands on devices its old processes still use.
//
// The table keeps which ranks are alive; the Core frees the resources when RankGone says the last
// one went, and saves an entry (Save) before a change so that a failed commit can put it back
// (Restore).
//
// Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/resources.h"

namespace berth {

using AttemptKey = std::pair<int64_t, int>;  // (job, attempt)

struct DyingAttempt {
  Placement placement;
  ResourceRequest per_node;
  std::set<int> alive;  // ranks not yet reported gone
  // Ranks whose grants are not allocated: an attempt a registration found still running holds only
  // the ranks placed on the nodes that claimed them (the rest until their own node does).
  std::set<int> unheld;

  // The grants whose resources the attempt holds.
  Placement Held() const;
};

class DyingAttempts {
 public:
  using Map = std::map<AttemptKey, DyingAttempt>;

  Map::const_iterator begin() const { return attempts_.begin(); }
  Map::const_iterator end() const { return attempts_.end(); }
  Map::const_iterator find(const AttemptKey& key) const { return attempts_.find(key); }
  size_t count(const AttemptKey& key) const { return attempts_.count(key); }
  size_t size() const { return attempts_.size(); }

  // An attempt starts dying (its `alive` ranks are not empty).
  void Add(const AttemptKey& key, DyingAttempt attempt) { attempts_[key] = std::move(attempt); }
  // Rank `rank` of the attempt is gone. When it was the last, the attempt leaves the table and is
  // returned (its resources are free now); else nullopt.
  std::optional<DyingAttempt> RankGone(const AttemptKey& key, int rank);
  // The ranks still alive placed on `node`: (job, attempt, rank), in key order.
  std::vector<std::tuple<int64_t, int, int>> AliveOn(const std::string& node) const;

  // An entry as it is (nullopt: none), and putting it back after a failed commit.
  using Key = AttemptKey;  // a Txn's undo journal (txn.h) saves entries by key
  using Snapshot = std::optional<DyingAttempt>;
  std::optional<DyingAttempt> Save(const AttemptKey& key) const;
  void Restore(const AttemptKey& key, std::optional<DyingAttempt> before);

 private:
  Map attempts_;
};

}  // namespace berth
