// FairShare: what the core knows of fair share (docs/fair-share.md) — the rules Accounts hands over
// (each user's caps and team, each team's quota, borrow limit and weight), the decayed usage of
// ended attempts (a UsageLedger), and each team's recent reclaims, which a rate limit counts. It
// turns them into the users and teams of a scheduling pass's snapshot; the pass decides.
//
// Pure: no clock (callers pass `now`), no store, no jobs (the caller says what running attempts
// used). Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "sched/scheduler.h"
#include "server/core/usage_ledger.h"
#include "store/store.h"

namespace berth {

class FairShare {
 public:
  // `reclaim_window`: how long a team's reclaim counts against its rate limit.
  FairShare(UsageConfig usage, DurationMs reclaim_window)
      : ledger_(std::move(usage)), reclaim_window_(reclaim_window) {}

  // Replaces the rules (at start, and after every change to users or teams).
  void SetRules(const std::vector<UserRow>& users, const std::vector<TeamRow>& teams);
  // A user's rules, or nullptr for a user without any (no caps, the default team).
  const UserRow* RulesOf(const std::string& user) const;
  // The team a user is in ("" = the default team).
  std::string TeamOf(const std::string& user) const;

  // An ended attempt's usage, once its end is committed.
  void AddEnded(const UsageRecord& record) { ledger_.Add(record); }
  // One hour of the store's rollup (start-up).
  void AddBucket(const UsageBucket& bucket) { ledger_.AddBucket(bucket); }
  // Decayed usage at `now` of a team's ended attempts.
  double EndedTeamUsage(const std::string& team, TimeMs now) const {
    return ledger_.Team(team, now);
  }
  // What holding `gpu_milli` of `gpu_type` from `since` until `now` counts, decayed to `now`.
  double RunningUse(const std::string& gpu_type, MilliGpu gpu_milli, TimeMs since,
                    TimeMs now) const {
    return ledger_.Decayed(gpu_type, gpu_milli, since, now, now);
  }

  // A reclaim by `team` committed at `at`.
  void Reclaimed(const std::string& team, TimeMs at) { reclaims_[team].push_back(at); }
  // Forgets reclaims that have left the window by `now`; true when one did (a job the rate limit
  // held may reclaim now, and nothing else would start a pass for it).
  bool ExpireReclaims(TimeMs now);

  // What a running attempt used so far, for the snapshot: its user's weighted GPU-seconds.
  struct Running {
    std::string user;
    double used = 0;
  };
  // Adds the users and teams to a pass's snapshot (whose `now` is used): every user and team with
  // rules or usage, usage being ended attempts plus `running`; caps in milli-GPUs; each team's
  // reclaims within the window.
  void AddTo(sched::Snapshot& snap, const std::vector<Running>& running);

  // For DebugState.
  const UsageLedger& ledger() const { return ledger_; }
  const std::map<std::string, std::deque<TimeMs>>& reclaims() const { return reclaims_; }

 private:
  std::map<std::string, UserRow> users_;
  std::map<std::string, TeamRow> teams_;
  UsageLedger ledger_;
  const DurationMs reclaim_window_;
  std::map<std::string, std::deque<TimeMs>> reclaims_;  // team -> committed reclaims, oldest first
};

}  // namespace berth
