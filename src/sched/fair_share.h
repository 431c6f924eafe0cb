// Fair share within one pass (docs/fair-share.md): what each team and user holds, their scores, the
// per-user caps and per-team quotas that hold jobs back, which running jobs are borrowed, and the
// order in which a pass considers the jobs of one priority.
//
// Score: (decayed usage + admission_charge x weighted GPUs held) / weight, for a user (weight 1)
// and for a team (its weight). Holdings start as what the snapshot's running jobs hold (those not
// stopping) and grow as the pass admits jobs, so each admission moves its user and team back in the
// order.
//
// Order within one priority (FairOrder): teams whose next job fits in their nominal quota first,
// then the team with the lowest score (ties: name); within it, users the same way (in-quota first,
// lowest score, name); each user's jobs by id. Only the team and users an admission changed are
// re-keyed, so a pass over N jobs costs O(N log(users + teams)) beyond the plain order.
//
// Internal to sched/. Not thread-safe: a pass owns its Shares and FairOrder.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sched/scheduler.h"

namespace berth::sched::internal {

// A pending job as a pass walks the queue.
struct QueueEntry {
  int priority;
  uint32_t shape;
  JobId id;
  uint32_t pos;   // in Snapshot::pending
  int user;       // Shares' index
  bool starving;  // waited longer than the starvation bound
};

// "vision", or "(default)" for the default team.
inline std::string TeamLabel(const std::string& team) {
  return team.empty() ? std::string("(default)") : team;
}

// What a job (of one shape) asks of quotas and caps: its GPU type (Shares' index; -1 for none) and
// its GPUs over all its nodes.
struct Ask {
  int type = -1;
  MilliGpu gpus = 0;
};

class Shares {
 public:
  Shares(const Snapshot& snapshot, const Config& config);

  // The index of a user (by name); users the snapshot does not list are in the default team.
  int UserIndex(std::string_view name) const;
  int TeamOf(int user) const { return users_[static_cast<size_t>(user)].team; }
  const std::string& TeamName(int team) const { return teams_[static_cast<size_t>(team)].name; }
  const std::string& UserName(int user) const { return users_[static_cast<size_t>(user)].name; }
  size_t team_count() const { return teams_.size(); }
  size_t user_count() const { return users_.size(); }
  size_t type_count() const { return type_names_.size(); }
  bool HasQuota(int team) const { return teams_[static_cast<size_t>(team)].has_quota; }
  bool any_quota() const { return any_quota_; }
  // Some user has a cap or some team a borrow limit: jobs may be held by LimitReason().
  bool any_limits() const { return any_limits_; }

  // Whether the queue's order is the plain (priority, id) one: every pending job has one owner.
  bool plain() const { return plain_; }

  // GPU types by index (interned: quotas and holdings are arrays).
  int TypeId(const std::string& type);
  int FindType(const std::string& type) const;  // -1 when unknown
  // What `milli` of type `type` counts as against quotas, borrow limits and max_running_gpus: a MIG
  // slice as its share of its GPU's type (an A100-3g.40gb: 3/7 of an A100, rounded down), anything
  // else as itself. Quotas are of GPU types: `quota: A100: 4` covers A100 slices by that share.
  std::pair<int, MilliGpu> Counted(int type, MilliGpu milli) const {
    if (type < 0) return {type, milli};
    const size_t k = static_cast<size_t>(type);
    return {counted_type_[k], milli * counted_sevenths_[k] / 7};
  }
  Ask AskOf(const JobRequest& job);

  // Whether a job asking `ask` may not start now: its user's max_running_gpus, or its team's quota
  // plus borrow limit for its GPU type, would be exceeded. LimitReason says why in words.
  bool Limited(int user, const Ask& ask) const;
  std::string LimitReason(int user, const Ask& ask) const;
  // Whether a job asking `ask` fits in its team's nominal quota, on top of what the team holds.
  bool InQuota(int user, const Ask& ask) const;
  // The pass admitted a job (placed, preempting, or held for it): its user and team hold it now.
  // (`ask` is counted already: AskOf.)
  void Admit(int user, const Ask& ask);

  double UserUsage(int user) const;
  double TeamUsage(int team) const;
  double UserScore(int user) const { return UserUsage(user); }
  double TeamScore(int team) const {
    return TeamUsage(team) / teams_[static_cast<size_t>(team)].weight;
  }
  double TeamWeight(int team) const { return teams_[static_cast<size_t>(team)].weight; }
  MilliGpu TeamHolds(int team, int type) const;
  MilliGpu TeamQuota(int team, int type) const;
  std::optional<MilliGpu> TeamBorrowLimit(int team, int type) const;

  // Whether some team other than `team` may hold borrowed work: it held, at the snapshot, more than
  // its nominal quota of some GPU type, or running jobs without GPUs. False means certainly none
  // (a pass only admits and evicts, so it never creates borrowed running work).
  bool MayBorrowOutside(int team) const {
    return borrowing_teams_ > 1 || (borrowing_teams_ == 1 && !MayBorrow(team));
  }
  bool MayBorrow(int team) const { return teams_[static_cast<size_t>(team)].may_borrow; }

  // Reclaims `team` may still decide in this pass (Config::reclaim_limit within the window).
  int ReclaimsLeft(int team) const { return teams_[static_cast<size_t>(team)].reclaims_left; }
  void Reclaimed(int team, TimeMs now);
  // When `team` may reclaim again, once it has none left.
  TimeMs NextReclaimAt(int team) const;

  // For each snapshot running job, and each pending job: its user index.
  const std::vector<int>& running_users() const { return running_users_; }
  const std::vector<int>& pending_users() const { return pending_users_; }

  static MilliGpu JobGpus(const JobRequest& job) {
    return job.per_node.gpu_milli * static_cast<MilliGpu>(job.num_nodes);
  }

 private:
  struct User {
    std::string name;
    int team = 0;
    double usage = 0;
    std::optional<MilliGpu> cap;
    MilliGpu held = 0;    // all GPU types
    double weighted = 0;  // weighted GPUs held
  };
  struct Team {
    std::string name;
    std::vector<MilliGpu> quota;  // by type; 0 beyond the end
    std::vector<MilliGpu> limit;  // by type; -1 (none) beyond the end
    std::vector<MilliGpu> held;   // by type
    bool has_quota = false;
    double weight = 1;
    double usage = 0;
    double weighted = 0;
    int reclaims_left = 0;
    bool may_borrow = false;       // see MayBorrowOutside()
    std::vector<TimeMs> reclaims;  // within the window, and this pass's
  };
  static MilliGpu At(const std::vector<MilliGpu>& v, int type, MilliGpu beyond) {
    return type >= 0 && static_cast<size_t>(type) < v.size() ? v[static_cast<size_t>(type)]
                                                             : beyond;
  }
  void Hold(int user, int type, MilliGpu milli);

  const Config& config_;
  std::vector<User> users_;                               // in name order
  std::vector<Team> teams_;                               // in name order
  std::unordered_map<std::string_view, int> user_index_;  // views of users_[i].name
  std::unordered_map<std::string, int> type_index_;
  std::vector<std::string> type_names_;  // by index
  std::vector<double> type_weight_;
  std::vector<int> counted_type_;      // by index: the type it counts as (Counted)
  std::vector<int> counted_sevenths_;  // by index: the sevenths of that type it is (7: all)
  std::vector<int> running_users_;
  std::vector<int> pending_users_;
  bool plain_ = true;
  bool any_quota_ = false;
  bool any_limits_ = false;
  int borrowing_teams_ = 0;  // teams with may_borrow
};

// The order of a pass over the pending jobs when it is not plain (see the header comment).
class FairOrder {
 public:
  // `entries`: every pending job, any order; `asks`: by shape. Both must outlive the order.
  FairOrder(Shares& shares, const std::vector<Ask>& asks, std::vector<QueueEntry> entries);
  // The next job to consider; false when every job was. Call Done() for it before the next call.
  bool Next(QueueEntry* out);
  // The job Next() returned was admitted (its user and team were charged by Shares::Admit) or not.
  void Done(bool admitted);

 private:
  struct Key {
    int cls = 0;  // 0: its next job fits in the team's quota; 1: it would borrow
    double score = 0;
    int idx = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct UserQueue {
    int user = 0;
    size_t next = 0;  // into entries_
    size_t end = 0;
    Key key;
  };
  struct TeamQueue {
    int team = 0;
    std::set<std::pair<Key, size_t>> users;  // (key, index into users_)
    Key key;
  };
  bool EnterLevel();
  Key UserKey(const UserQueue& u) const;
  Key TeamKey(const TeamQueue& t) const;

  Shares& shares_;
  const std::vector<Ask>& asks_;
  std::vector<QueueEntry> entries_;         // by (priority desc, team, user, id)
  size_t level_end_ = 0;                    // entries_ of the current priority end here
  std::vector<UserQueue> users_;            // of the current priority
  std::vector<TeamQueue> teams_;            // of the current priority
  std::set<std::pair<Key, size_t>> order_;  // (key, index into teams_)
  size_t current_team_ = 0;
  size_t current_user_ = 0;
  bool started_ = false;
};

}  // namespace berth::sched::internal
