// Waiting: the jobs a pass left waiting, with why (a sentence for `berth show`) and where each
// stands (the numbers behind the sentence, as an Explanation on demand).
//
// Compact on purpose: a pass over 100,000 pending jobs leaves one small entry of plain numbers per
// job; the sentences (a handful per pass: one per failing request shape, plus caps and limits) and
// the per-user, per-team and per-shape tables an Explanation is computed from are stored once and
// shared. An Explanation is built only when someone asks for a job's (Explain).
//
// Built by a pass (sched/pass.cpp), then read-only. Const methods are safe to call from several
// threads at once; the server shares one pass's Waiting between requests.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sched/cluster.h"

namespace berth::sched {

namespace internal {
class Pass;
}

// Why one resource blocks a job: the numbers behind "needs V100:4 on 1 node; most free on one node:
// 2 V100 (n1)". GPUs count devices (a share: the fraction of one), CPUs count CPUs, memory MiB.
struct Blocking {
  std::string resource;  // a GPU type, "cpus" or "memory"; "" when no single resource is short
  double needed = 0;     // per node
  int nodes_needed = 1;
  int nodes_with_enough = 0;  // how many eligible nodes have `needed` free
  double most_free = 0;       // the most free on one eligible node
  std::string most_free_node;
};

// A starving job's reservation (scheduler.h, "Starvation").
struct ReservationView {
  JobId job = 0;
  std::vector<std::string> nodes;
  std::optional<TimeMs> until;  // when they are expected free; none: unknown
};

// Where a waiting job stands, as numbers (the job JSON's `waiting` object; docs/fair-share.md).
// Indexes point into the Waiting it came from (teams(), blockings(), reservations()).
struct Explanation {
  enum class Quota : uint8_t {
    kNoGpu,      // the job wants no GPU: quotas do not apply
    kWithin,     // it fits in its team's nominal quota
    kBorrowing,  // it would borrow beyond the quota
    kOverLimit,  // it would exceed quota plus borrow limit: it waits for its team
  };
  int position = 0;       // 1-based, among the jobs still waiting after the pass, in pass order
  int team_position = 0;  // the same among its team's waiting jobs
  int team = 0;           // into Waiting::teams()
  Quota quota_state = Quota::kNoGpu;
  MilliGpu team_uses = 0;  // of the job's GPU type, after the pass
  MilliGpu quota = 0;
  std::optional<MilliGpu> borrow_limit;
  MilliGpu job_needs = 0;  // over all its nodes
  double user_usage = 0;   // decayed usage + admission charge, weighted GPU-seconds
  double team_usage = 0;
  double team_weight = 1;
  double user_score = 0;    // = user_usage (users weigh 1 within their team)
  double team_score = 0;    // = team_usage / team_weight
  JobId first_waiting = 0;  // the first waiting job in pass order: the next to start
  int blocking = -1;        // into Waiting::blockings(), or -1
  int reservation = -1;     // into Waiting::reservations(), or -1
};

class Waiting {
 public:
  // One waiting job, by id.
  struct Entry {
    JobId id = 0;
    uint32_t reason = 0;  // into the sentences
    int32_t position = 0;
    int32_t team_position = 0;
    int32_t user = 0;    // into the user table
    uint32_t shape = 0;  // into the shape table
  };

  // Iterates (id, reason) in id order, as a map<JobId, std::string> would.
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::pair<JobId, const std::string&>;
    using difference_type = std::ptrdiff_t;
    Iterator(const Waiting* w, size_t k) : w_(w), k_(k) {}
    value_type operator*() const { return {w_->entries_[k_].id, w_->ReasonOf(w_->entries_[k_])}; }
    Iterator& operator++() {
      ++k_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return k_ == o.k_; }

   private:
    const Waiting* w_;
    size_t k_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, entries_.size()}; }

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  size_t count(JobId id) const { return Find(id) != nullptr; }
  // The job's reason; throws std::out_of_range when it is not waiting (as map::at).
  const std::string& at(JobId id) const;
  const Entry* Find(JobId id) const;
  const std::vector<Entry>& entries() const { return entries_; }
  const std::string& ReasonOf(const Entry& e) const { return reasons_[e.reason]; }
  // The job's owner and its team ("" = the default team).
  const std::string& UserOf(const Entry& e) const {
    return users_[static_cast<size_t>(e.user)].name;
  }
  const std::string& TeamOf(const Entry& e) const {
    return teams_[static_cast<size_t>(users_[static_cast<size_t>(e.user)].team)];
  }
  // The distinct sentences, which entries point at (Entry::reason).
  const std::vector<std::string>& reasons() const { return reasons_; }

  // The numbers behind a waiting job's reason; nullopt when it is not waiting.
  std::optional<Explanation> Explain(JobId id) const;
  Explanation ExplainEntry(const Entry& e) const;

  const std::vector<std::string>& teams() const { return teams_; }  // "" = the default team
  const std::vector<Blocking>& blockings() const { return blockings_; }
  const std::vector<ReservationView>& reservations() const { return reservations_; }

 private:
  friend class internal::Pass;
  struct UserRow {
    std::string name;
    int team = 0;
    double usage = 0;  // decayed usage + admission charge, after the pass
  };
  struct TeamRow {
    double usage = 0;
    double weight = 1;
    std::vector<MilliGpu> holds;  // by GPU type (index), after the pass
    std::vector<MilliGpu> quota;
    std::vector<MilliGpu> limit;  // -1: none
  };
  struct ShapeRow {
    int type = -1;  // GPU type index, -1: no GPU
    MilliGpu gpus = 0;
    int blocking = -1;
  };

  std::vector<Entry> entries_;  // by id
  std::vector<std::string> reasons_;
  std::vector<std::string> teams_;
  std::vector<UserRow> users_;
  std::vector<TeamRow> team_rows_;
  std::vector<ShapeRow> shapes_;
  std::vector<Blocking> blockings_;
  std::vector<ReservationView> reservations_;
  JobId first_waiting_ = 0;
};

}  // namespace berth::sched
