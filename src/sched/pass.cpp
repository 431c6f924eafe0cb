#include "sched/pass.h"

#include <algorithm>
#include <deque>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/quantity.h"
#include "sched/describe.h"
#include "sched/matching.h"
#include "sched/running_sweep.h"
#include "sched/short_text.h"
#include "sched/waiting_reasons.h"

namespace berth::sched::internal {
namespace {

// A job's shape: the parts of it that decide where it can go (per-node resources, node count, pool,
// selector, exclusivity). Within one pass free resources only shrink, exclusive domains only close
// and reservations only grow, so once a shape fails, every later job of that shape would fail in
// the same way: it gets the first one's reason without being tried (the pass stays O(shapes x
// nodes) however long the queue of identical jobs). Keyed by the first job of the shape, by
// pointer.
struct ShapeRef {
  const JobRequest* job;
  size_t hash;
  int windows;  // ReservedWindows::ShapeKey: jobs operators' reservations treat alike
};

// A queue of 100,000 jobs is hashed once per pass (sched/short_text.h for its strings).
uint64_t HashInt(uint64_t h, int64_t v) {
  return (h ^ static_cast<uint64_t>(v)) * 0x9e3779b97f4a7c15ULL;
}

size_t HashShape(const JobRequest& j) {
  uint64_t h = kFnvBasis;
  h = HashInt(h, j.per_node.cpus);
  h = HashInt(h, j.per_node.memory);
  h = HashInt(h, j.per_node.gpu_milli);
  h = HashInt(h, j.num_nodes);
  h = HashText(h, j.per_node.gpu_type);
  h = HashText(h, j.pool);
  h = HashText(h, j.exclusive);
  h = HashInt(HashInt(h, j.topology.required), j.topology.preferred);
  for (const auto& [key, value] : j.node_selector) h = HashText(HashText(h, key), value);
  for (const std::string& path : j.container_mounts) h = HashText(h, path);
  return static_cast<size_t>(h ^ (h >> 29));
}

struct ShapeHash {
  size_t operator()(const ShapeRef& s) const { return s.hash; }
};
struct ShapeEq {
  bool operator()(const ShapeRef& a, const ShapeRef& b) const {
    const JobRequest& x = *a.job;
    const JobRequest& y = *b.job;
    if (a.hash != b.hash || a.windows != b.windows || x.per_node.cpus != y.per_node.cpus ||
        x.per_node.memory != y.per_node.memory || x.per_node.gpu_milli != y.per_node.gpu_milli ||
        x.num_nodes != y.num_nodes || !SameText(x.per_node.gpu_type, y.per_node.gpu_type) ||
        !SameText(x.pool, y.pool) || !SameText(x.exclusive, y.exclusive) ||
        x.topology != y.topology || x.node_selector.size() != y.node_selector.size() ||
        x.container_mounts.size() != y.container_mounts.size()) {
      return false;
    }
    return x.node_selector == y.node_selector && x.container_mounts == y.container_mounts;
  }
};

// Priority high first, then id (then position, for duplicate ids). The server lists the queue by
// id and uses a narrow range of priorities, so a stable counting sort by priority usually does.
std::vector<QueueEntry> InQueueOrder(std::vector<QueueEntry> entries) {
  constexpr int64_t kMaxBuckets = 4096;
  bool by_id = true;
  int lowest = std::numeric_limits<int>::max();
  int highest = std::numeric_limits<int>::min();
  for (size_t k = 0; k < entries.size(); ++k) {
    if (k > 0 && entries[k].id < entries[k - 1].id) by_id = false;
    lowest = std::min(lowest, entries[k].priority);
    highest = std::max(highest, entries[k].priority);
  }
  if (entries.empty()) return entries;
  if (!by_id || int64_t{highest} - lowest >= kMaxBuckets) {
    std::sort(entries.begin(), entries.end(), [](const QueueEntry& a, const QueueEntry& b) {
      if (a.priority != b.priority) return a.priority > b.priority;
      if (a.id != b.id) return a.id < b.id;
      return a.pos < b.pos;
    });
    return entries;
  }
  auto bucket = [&](int p) { return static_cast<size_t>(highest - p); };
  std::vector<size_t> start(static_cast<size_t>(highest - lowest) + 2, 0);
  for (const QueueEntry& e : entries) ++start[bucket(e.priority) + 1];
  for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
  std::vector<QueueEntry> out(entries.size());
  for (const QueueEntry& e : entries) out[start[bucket(e.priority)]++] = e;
  return out;
}

}  // namespace

int PoolOf(const NodeState& state, const JobRequest& job) {
  if (job.pool.empty()) return -1;
  const int pool = state.PoolId(job.pool);
  return pool < 0 ? -2 : pool;
}

PassResult Schedule(const Snapshot& snapshot, const Config& config, const Tuning& tuning) {
  Pass pass(snapshot, config, tuning);
  return pass.Run();
}

bool Pass::Memo::Covers(const std::optional<DurationMs>& limit) const {
  if (any) return true;
  if (!limit) return unlimited || shortest.has_value();
  return shortest && *limit >= *shortest;
}

void Pass::Memo::Add(bool reservations, const std::optional<DurationMs>& limit) {
  if (!reservations) {
    any = true;
  } else if (!limit) {
    unlimited = true;
  } else if (!shortest || *limit < *shortest) {
    shortest = limit;
  }
}

Pass::Pass(const Snapshot& snapshot, const Config& config, const Tuning& tuning)
    : snapshot_(snapshot),
      config_(config),
      tuning_(tuning),
      shares_(snapshot, config),
      state_(snapshot.nodes),
      index_(state_),
      topology_(state_, config.topology_levels),
      kept_(topology_, state_.size()),
      windows_(snapshot, state_, shares_) {
  closed_.assign(state_.size(), 0);
  version_.assign(state_.size(), 0);
  for (size_t t = 0; t < shares_.team_count(); ++t) {
    any_quota_ = any_quota_ || shares_.HasQuota(static_cast<int>(t));
  }
  for (size_t k = 0; k < snapshot.running.size(); ++k) {
    PrefetchRunning(snapshot.running, k + kRunningPrefetchAhead);
    const RunningJob& job = *snapshot.running[k];
    if (job.exclusive.empty()) continue;
    for (const NodeGrant& grant : job.placement) {
      const NodeIdx i = state_.Find(grant.node);
      if (i == kNoNode) continue;  // the node left; its jobs no longer constrain anyone
      CloseDomainOf(job.exclusive, i);
    }
  }
}

PassResult Pass::Run() {
  const size_t pending = PendingCount(snapshot_);
  // The jobs tried, when their request is shared: a copy each, with its id, which the pass's
  // decisions and occupants point into until it ends.
  std::deque<JobRequest> tried;

  // One sequential sweep over the queue groups it by shape; the queue is then walked in order
  // through these small entries, and a job's request is read again only when it is tried.
  struct ShapeState {
    const JobRequest* first = nullptr;
    Need need;
    Memo place;             // placement failed
    Memo preempt;           // preemption failed (for its priority, so for every later, lower one)
    bool reserved = false;  // a starving job of this shape holds a reservation
    uint32_t reason = kNoReason;
    int blocking = -1;             // into blockings_ (the numbers behind `reason`)
    int memo_team = -1;            // the team of `team_preempt`
    Memo* team_preempt = nullptr;  // with quotas: preemption failed for jobs of memo_team
    bool limited = false;          // some job of the shape has a time limit
    // Whether `m` covers every job of the shape, whatever its limit: the common case of a long
    // queue needs not read the job's request.
    bool AllCovered(const Memo& m) const { return m.any || (!limited && m.unlimited); }
  };
  std::vector<ShapeState> shapes;
  std::vector<Ask> asks;  // by shape: what it asks of quotas and caps
  std::vector<QueueEntry> entries;
  // Groups with a max_running: how many of their jobs hold resources, counting this pass's
  // admissions, and the sentence of those at their cap (made once, when first needed).
  struct CapState {
    int64_t group = 0;
    int max_running = 0;
    int running = 0;
    uint32_t reason = kNoReason;
  };
  std::vector<CapState> caps;
  std::vector<int> cap_of;  // by position in `pending`: into caps, or -1
  if (!snapshot_.group_caps.empty()) {
    std::unordered_map<int64_t, int> slot;
    for (const auto& [group, cap] : snapshot_.group_caps) {
      slot.emplace(group, static_cast<int>(caps.size()));
      caps.push_back({group, cap.max_running, cap.running, kNoReason});
    }
    cap_of.assign(pending, -1);
    for (size_t k = 0; k < pending; ++k) {
      const std::optional<int64_t>& group = PendingRequest(snapshot_, k).group;
      if (!group) continue;
      auto it = slot.find(*group);
      if (it != slot.end()) cap_of[k] = it->second;
    }
  }
  PendingIndex jobs;
  jobs.id.resize(pending);
  jobs.shape.resize(pending);
  jobs.user.resize(pending);
  entries.reserve(pending);
  {
    std::unordered_map<ShapeRef, uint32_t, ShapeHash, ShapeEq> ids;
    for (uint32_t k = 0; k < pending; ++k) {
      const JobRequest& job = PendingRequest(snapshot_, k);
      const JobId id = PendingId(snapshot_, k);
      const int windows = windows_.ShapeKey(job);
      auto [it, fresh] = ids.try_emplace(
          ShapeRef{&job, HashShape(job) ^ static_cast<size_t>(windows + 2), windows},
          static_cast<uint32_t>(shapes.size()));
      if (fresh) {
        shapes.push_back(
            {&job, state_.NeedOf(job.per_node), {}, {}, false, kNoReason, -1, -1, nullptr});
        shapes.back().need.valid = RequestProblem(job).empty();
        asks.push_back(shares_.AskOf(job));
      }
      shapes[it->second].limited = shapes[it->second].limited || job.time_limit.has_value();
      const int user = shares_.pending_users()[k];
      jobs.id[k] = id;
      jobs.shape[k] = it->second;
      jobs.user[k] = user;
      entries.push_back({job.priority, it->second, id, k, user, Starving(job)});
    }
  }
  // The plain order (one owner) is a sort; a fair one is decided job by job, as jobs are admitted.
  std::optional<FairOrder> fair;
  std::vector<QueueEntry> order;
  if (shares_.plain()) {
    order = InQueueOrder(std::move(entries));
  } else {
    fair.emplace(shares_, asks, std::move(entries));
  }
  size_t next_in_order = 0;
  auto next = [&](QueueEntry* e) {
    if (fair) return fair->Next(e);
    if (next_in_order == order.size()) return false;
    *e = order[next_in_order++];
    return true;
  };

  // With team quotas, whom a job may preempt depends on its team: memos are per (shape, team).
  const bool any_quota = any_quota_;
  const bool any_limits = shares_.any_limits();
  auto key = [](uint32_t shape, int other) {
    return (static_cast<uint64_t>(shape) << 32) | static_cast<uint32_t>(other);
  };
  std::unordered_map<uint64_t, Memo> team_preempt;      // by (shape, team)
  std::unordered_map<uint64_t, Memo> reclaim;           // by (shape, team)
  std::unordered_map<uint64_t, uint32_t> rate_limited;  // reasons, by (shape, team)
  // Limit reasons are the same for every job of a (shape, user) until something is admitted.
  std::unordered_map<uint64_t, std::pair<uint64_t, uint32_t>> limits;
  uint64_t admissions = 0;

  // The sentences of the pass, each once; jobs point at them by index.
  std::vector<std::string> reasons;
  auto add = [&](std::string reason) {
    reasons.push_back(std::move(reason));
    return static_cast<uint32_t>(reasons.size() - 1);
  };
  std::vector<uint32_t> outcome(pending, kNoReason);  // kNoReason: placed
  std::vector<uint32_t> considered;
  considered.reserve(pending);
  // Whether a reservation (a starving job's, or an operator's) kept the job off a node since
  // `before` (blocks_): only then does its failure depend on its time limit (Memo).
  auto reserving_now = [&](uint64_t before) { return blocks_ != before; };
  auto consider = [&](const QueueEntry& e) -> bool {  // true: admitted
    // Only what the shape says is read until the job has something left to try: in a long queue
    // of jobs that cannot start, a job's own request is never touched.
    ShapeState& shape = shapes[e.shape];
    const Ask& ask = asks[e.shape];
    if (!cap_of.empty() && cap_of[e.pos] >= 0) {
      CapState& cap = caps[static_cast<size_t>(cap_of[e.pos])];
      if (cap.running >= cap.max_running) {
        if (cap.reason == kNoReason) {
          cap.reason = add("waiting: group " + std::to_string(cap.group) +
                           " is at its max_running (" + std::to_string(cap.running) +
                           " of its jobs placed, at most " + std::to_string(cap.max_running) + ")");
        }
        outcome[e.pos] = cap.reason;
        return false;
      }
    }
    if (any_limits && ask.gpus > 0 && shares_.Limited(e.user, ask)) {
      // The sentence is the same for every job of a (shape, user) until something is admitted.
      auto [it, fresh] = limits.try_emplace(key(e.shape, e.user), admissions, kNoReason);
      if (fresh || it->second.first != admissions) {
        it->second.first = admissions;
        it->second.second = add(shares_.LimitReason(e.user, ask));
      }
      outcome[e.pos] = it->second.second;
      return false;
    }
    const int team = shares_.TeamOf(e.user);
    // Consecutive jobs of a shape mostly share a team (a user's jobs come together in the fair
    // order): the last team's memo is kept with the shape (the map's values do not move).
    if (any_quota && shape.memo_team != team) {
      shape.memo_team = team;
      shape.team_preempt = &team_preempt[key(e.shape, team)];
    }
    Memo& preempt = any_quota ? *shape.team_preempt : shape.preempt;
    // A job within its team's quota may reclaim it from other teams' borrowed work.
    const bool in_quota = config_.preemption && any_quota && shares_.InQuota(e.user, ask);
    Memo* reclaim_memo = nullptr;
    if (in_quota && shares_.ReclaimsLeft(team) > 0) {
      reclaim_memo = &reclaim[key(e.shape, team)];
      if (reclaim_memo->any || reclaim_memo->Covers(PendingRequest(snapshot_, e.pos).time_limit)) {
        reclaim_memo = nullptr;
      }
    }
    // Its reason, and why it does not reclaim when the team's rate limit is what stops it.
    auto waits = [&](uint32_t reason) {
      if (!in_quota || config_.reclaim_limit <= 0 || shares_.ReclaimsLeft(team) > 0 ||
          !AnyBorrowedOutside(team)) {
        return reason;
      }
      auto [it, fresh] = rate_limited.try_emplace(key(e.shape, team), kNoReason);
      if (fresh) {
        it->second =
            add(reasons[reason] + "; team " + TeamLabel(shares_.TeamName(team)) +
                "'s quota is held by other teams' borrowed jobs, but the team has made its " +
                std::to_string(config_.reclaim_limit) + " reclaims allowed per " +
                FormatDuration(config_.reclaim_window) + "; the next is allowed in " +
                FormatDuration(shares_.NextReclaimAt(team) - snapshot_.now));
      }
      return it->second;
    };
    if (shape.AllCovered(shape.place) && (!config_.preemption || shape.AllCovered(preempt)) &&
        reclaim_memo == nullptr && (shape.reserved || !e.starving)) {
      outcome[e.pos] = waits(shape.reason);  // the common case of a long queue: nothing to try
      return false;
    }
    const JobRequest* request = &PendingRequest(snapshot_, e.pos);
    if (e.pos >= snapshot_.pending.size()) {
      request = &tried.emplace_back(*request);
      tried.back().id = e.id;
    }
    const JobRequest& job = *request;
    const Need& need = shape.need;
    // A job that names an operator's reservation waits for its window (docs/reservations.md).
    if (!job.reservation.empty() && !windows_.empty()) {
      if (std::string why = windows_.NotInForce(job); !why.empty()) {
        outcome[e.pos] = add(std::move(why));
        return false;
      }
    }
    if (!shape.place.Covers(job.time_limit)) {
      std::string reason;
      blocking_.reset();
      const uint64_t before = blocks_;
      if (TryPlace(job, need, &reason)) return true;
      shape.place.Add(reserving_now(before), job.time_limit);
      shape.reason = add(std::move(reason));
      if (blocking_) {
        shape.blocking = static_cast<int>(blockings_.size());
        blockings_.push_back(std::move(*blocking_));
      }
    }
    if (config_.preemption && !preempt.Covers(job.time_limit)) {
      std::string reason;
      const uint64_t before = blocks_;
      if (TryPreempt(e.shape, job, need, Claim{job.priority, team, false}, &reason) !=
          Outcome::kNone) {
        outcome[e.pos] = add(std::move(reason));
        return true;
      }
      preempt.Add(reserving_now(before), job.time_limit);
    }
    if (reclaim_memo != nullptr) {
      std::string reason;
      const uint64_t before = blocks_;
      const Outcome got = TryPreempt(e.shape, job, need, Claim{job.priority, team, true}, &reason);
      if (got != Outcome::kNone) {
        if (got == Outcome::kPreempted) shares_.Reclaimed(team, snapshot_.now);
        outcome[e.pos] = add(std::move(reason));
        return true;
      }
      reclaim_memo->Add(reserving_now(before), job.time_limit);
    }
    if (!shape.reserved && e.starving) {
      std::string more = Reserve(job, need);
      if (!more.empty()) {
        shape.reserved = true;  // later jobs of the shape queue behind this one
        outcome[e.pos] = add(reasons[shape.reason] + more);
        return false;
      }
    }
    outcome[e.pos] = waits(shape.reason);
    return false;
  };
  QueueEntry e{};
  while (next(&e)) {
    considered.push_back(e.pos);
    const bool admitted = consider(e);
    if (admitted) {
      shares_.Admit(e.user, asks[e.shape]);
      ++admissions;
      if (!cap_of.empty() && cap_of[e.pos] >= 0) ++caps[static_cast<size_t>(cap_of[e.pos])].running;
    }
    if (fair) fair->Done(admitted);
  }

  PassResult result;
  result.placements.reserve(placed_.size());
  for (PlaceDecision& d : placed_) result.placements.push_back(std::move(d));
  result.preemptions.reserve(preempted_.size());
  for (PreemptDecision& d : preempted_) result.preemptions.push_back(std::move(d));
  for (HoldDecision& d : held_) result.holds.push_back(std::move(d));
  std::vector<int> blocking(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) blocking[k] = shapes[k].blocking;
  Explain(considered, outcome, jobs, asks, blocking, std::move(reasons), result.waiting);
  return result;
}

void Pass::Explain(const std::vector<uint32_t>& considered, const std::vector<uint32_t>& outcome,
                   const PendingIndex& jobs, const std::vector<Ask>& asks,
                   const std::vector<int>& blocking, std::vector<std::string> reasons,
                   Waiting& out) {
  out.reasons_ = std::move(reasons);
  out.blockings_ = std::move(blockings_);
  for (size_t r = 0; r < reservations_.size(); ++r) {
    ReservationView& v = out.reservations_.emplace_back();
    v.job = reservations_[r].job;
    if (reservations_[r].until != kNever) v.until = reservations_[r].until;
  }
  for (NodeIdx i = 0; i < reserved_.size(); ++i) {
    if (reserved_[i] >= 0) {
      out.reservations_[static_cast<size_t>(reserved_[i])].nodes.push_back(state_.name(i));
    }
  }
  // The tables an Explanation is computed from, as they stand after the pass.
  out.teams_.reserve(shares_.team_count());
  out.team_rows_.reserve(shares_.team_count());
  for (size_t t = 0; t < shares_.team_count(); ++t) {
    const int team = static_cast<int>(t);
    out.teams_.push_back(shares_.TeamName(team));
    Waiting::TeamRow& row = out.team_rows_.emplace_back();
    row.usage = shares_.TeamUsage(team);
    row.weight = shares_.TeamWeight(team);
    for (size_t k = 0; k < shares_.type_count(); ++k) {
      const int type = static_cast<int>(k);
      row.holds.push_back(shares_.TeamHolds(team, type));
      row.quota.push_back(shares_.TeamQuota(team, type));
      row.limit.push_back(shares_.TeamBorrowLimit(team, type).value_or(-1));
    }
  }
  out.users_.reserve(shares_.user_count());
  for (size_t u = 0; u < shares_.user_count(); ++u) {
    out.users_.push_back(
        {shares_.UserName(int(u)), shares_.TeamOf(int(u)), shares_.UserUsage(int(u))});
  }
  out.shapes_.reserve(asks.size());
  for (size_t k = 0; k < asks.size(); ++k) {
    out.shapes_.push_back({asks[k].type, asks[k].gpus, blocking[k]});
  }
  // Positions in the order the pass considered the jobs; the entries in pending order (the
  // server's, by id), so that no job's request is read again.
  const size_t n = outcome.size();
  std::vector<int32_t> position(n, 0);
  std::vector<int32_t> team_position(n, 0);
  std::vector<int32_t> team_waiting(shares_.team_count(), 0);
  int32_t waiting = 0;
  for (uint32_t pos : considered) {
    if (outcome[pos] == kNoReason) continue;
    if (out.first_waiting_ == 0) out.first_waiting_ = jobs.id[pos];
    position[pos] = ++waiting;
    team_position[pos] = ++team_waiting[static_cast<size_t>(shares_.TeamOf(jobs.user[pos]))];
  }
  out.entries_.reserve(static_cast<size_t>(waiting));
  for (size_t pos = 0; pos < n; ++pos) {
    if (outcome[pos] == kNoReason) continue;
    out.entries_.push_back({jobs.id[pos], outcome[pos], position[pos], team_position[pos],
                            jobs.user[pos], jobs.shape[pos]});
  }
  auto by_id = [](const Waiting::Entry& a, const Waiting::Entry& b) { return a.id < b.id; };
  if (!std::is_sorted(out.entries_.begin(), out.entries_.end(), by_id)) {
    std::sort(out.entries_.begin(), out.entries_.end(), by_id);
  }
}

bool Pass::TryPlace(const JobRequest& job, const Need& need, std::string* reason) {
  if (!need.valid) {
    *reason = "invalid request: " + RequestProblem(job);
    return false;
  }
  if (!job.exclusive.empty()) return TryPlaceExclusive(job, need, reason);
  Shortfall shortfall;
  std::vector<NodeIdx> nodes = BestNodes(job, need, static_cast<size_t>(job.num_nodes), &shortfall);
  if (!shortfall.why.empty()) {
    if (shortfall.domain >= 0) RunningNodes();  // HeldBy reads them
    *reason = "waiting for resources: needs " + CountNodes(job.num_nodes) + " under one '" +
              topology_.level_name(Topology::RequiredOf(job)) + "' with " +
              DescribeRequest(job.per_node) + "; " + shortfall.why +
              (shortfall.domain >= 0
                   ? WaitingReasons(*this).HeldBy(Topology::RequiredOf(job), shortfall.domain)
                   : "");
    return false;
  }
  if (nodes.size() < static_cast<size_t>(job.num_nodes)) {
    *reason = WaitingReasons(*this).WhyNot(job, need);
    return false;
  }
  Commit(job, need, nodes);
  return true;
}

bool Pass::InScope(NodeIdx i, const JobRequest& job, int pool) const {
  if (pool == -2 || (pool >= 0 && state_.pool(i) != pool)) return false;
  return !job.narrowed() || InPoolAndSelector(state_.view(i), job);
}

std::vector<NodeIdx> Pass::BestNodes(const JobRequest& job, const Need& need, size_t count,
                                     Shortfall* shortfall) {
  std::vector<NodeIdx> out;
  const int pool = PoolOf(state_, job);
  if (need.unknown_type || pool == -2) return out;
  auto fits = [&](NodeIdx i) {
    return state_.Fits(i, need) && (!job.narrowed() || InPoolAndSelector(state_.view(i), job)) &&
           !Blocked(i, job);
  };
  // A member of a reservation window in force may use its nodes, which the index leaves out: its
  // search scans every node (such jobs are few).
  const bool member = windows_.MemberInForce(job);
  auto candidate = [&](NodeIdx i) {
    return member ? state_.schedulable(i) && !closed_[i] : InIndex(i);
  };
  const int slot = need.wants_gpu() ? need.type : state_.all_slot();
  // A gang placed by the topology chooses among every node that fits, not the `count` tightest:
  // the index finds them without visiting the nodes short of GPUs.
  if (topology_.Applies(job)) {
    ++searches_;
    auto order = [&](NodeIdx i) { return state_.Order(i, need); };
    // Counts kept across the pass serve every job whose fit is its Need's alone.
    if (tuning_.keep_topology_counts && pool == -1 && !job.narrowed() && reserved_.empty() &&
        windows_.empty()) {
      return kept_.Choose(
          KeptCandidates::KeyOf(need, std::max(topology_.PreferredOf(job), job.topology.required)),
          [&](NodeIdx i) { return InIndex(i) && state_.Fits(i, need); }, touched_, closings_, count,
          job, order, shortfall);
    }
    if (member) {
      for (NodeIdx i = 0; i < state_.size(); ++i) {
        if (candidate(i) && (pool < 0 || state_.pool(i) == pool) && fits(i)) out.push_back(i);
      }
      std::sort(out.begin(), out.end(), [&](NodeIdx a, NodeIdx b) {
        return state_.Order(a, need) < state_.Order(b, need);
      });
    } else {
      if (!index_.built(slot)) index_.Build(slot, [&](NodeIdx i) { return InIndex(i); });
      index_.Scan(slot, pool, need.wants_gpu() ? need.milli : 0, need.cpus, need.memory,
                  [&](NodeIdx i) {
                    if (fits(i)) out.push_back(i);
                    return true;
                  });
    }
    if (out.size() < count) return out;
    return topology_.Choose(out, count, job, order, shortfall);
  }
  // With topology levels, a one-node job packs into a partly used domain of the coarsest level
  // where one of its tightest fits is (Topology::Pack), keeping whole blocks free for gangs.
  const bool pack = topology_.levels() > 0 && count == 1;
  const size_t keep = pack ? Topology::kPackAmong : count;
  if (++searches_ > tuning_.index_after_searches && !member) {
    if (!index_.built(slot)) index_.Build(slot, [&](NodeIdx i) { return InIndex(i); });
    index_.Scan(slot, pool, need.wants_gpu() ? need.milli : 0, need.cpus, need.memory,
                [&](NodeIdx i) {
                  if (fits(i)) out.push_back(i);
                  return out.size() < keep;
                });
    if (pack && out.size() > 1) return {topology_.Pack(out)};
    return out;
  }
  // A scan of every node, keeping the `keep` tightest fits in a max-heap.
  std::vector<FitOrder> best;
  best.reserve(keep + 1);
  for (NodeIdx i = 0; i < state_.size(); ++i) {
    if (!candidate(i) || (pool >= 0 && state_.pool(i) != pool) || !fits(i)) continue;
    const FitOrder order = state_.Order(i, need);
    if (best.size() == keep) {
      if (!(order < best.front())) continue;
      std::pop_heap(best.begin(), best.end());
      best.pop_back();
    }
    best.push_back(order);
    std::push_heap(best.begin(), best.end());
  }
  std::sort_heap(best.begin(), best.end());
  for (const FitOrder& o : best) out.push_back(o.node);
  if (pack && out.size() > 1) return {topology_.Pack(out)};
  return out;
}

bool Pass::TryPlaceExclusive(const JobRequest& job, const Need& need, std::string* reason) {
  Domains& d = DomainsOf(job.exclusive);
  if (!d.tracked) Track(d);
  const int pool = PoolOf(state_, job);
  const size_t needed = static_cast<size_t>(job.num_nodes);
  if (!need.unknown_type && pool != -2) {
    // Free domains from the smallest (then the first by value): the domain-level analogue of best
    // fit, which keeps big domains for big jobs.
    std::vector<FitOrder> fits;
    for (const auto& [size, dom] : d.free) {
      fits.clear();
      bool blocked = false;
      for (NodeIdx m : d.members[static_cast<size_t>(dom)]) {
        // Holding the domain would keep a starving job off its reserved node in it.
        if (Blocked(m, job)) {
          blocked = true;
          break;
        }
        // (Nodes in a window in force too, which the index leaves out: Blocked said it may.)
        if (state_.schedulable(m) && !closed_[m] && InScope(m, job, pool) && state_.Fits(m, need)) {
          fits.push_back(state_.Order(m, need));
        }
      }
      if (blocked || fits.size() < needed) continue;
      std::partial_sort(fits.begin(), fits.begin() + static_cast<std::ptrdiff_t>(needed),
                        fits.end());
      std::vector<NodeIdx> nodes;
      for (size_t k = 0; k < needed; ++k) nodes.push_back(fits[k].node);
      Commit(job, need, nodes);  // changes d.free: do not touch the loop again
      return true;
    }
  }
  *reason = WaitingReasons(*this).ExclusiveReason(job, need, d);
  return false;
}

void Pass::Commit(const JobRequest& job, const Need& need, const std::vector<NodeIdx>& nodes) {
  PlaceDecision& decision = placed_.emplace_back();
  decision.job = job.id;
  decision.placement.reserve(nodes.size());
  for (size_t rank = 0; rank < nodes.size(); ++rank) {
    std::vector<GpuGrant> gpus = state_.Pick(nodes[rank], need);
    TakeOn(nodes[rank], need, gpus);
    decision.placement.push_back(
        {state_.name(nodes[rank]), static_cast<int>(rank), std::move(gpus)});
  }
  Hold(job, &decision.placement, nodes);
}

void Pass::TakeOn(NodeIdx i, const Need& need, const std::vector<GpuGrant>& gpus) {
  index_.Remove(i);
  state_.Take(i, need, gpus);
  index_.Insert(i);
  topology_.Took(i);
  Touch(i);
}

void Pass::Hold(const JobRequest& job, const Placement* placement,
                const std::vector<NodeIdx>& nodes) {
  if (!job.exclusive.empty()) {
    for (NodeIdx i : nodes) CloseDomainOf(job.exclusive, i);
  }
  for (auto& [key, d] : domains_) {
    if (!d->tracked) continue;
    for (NodeIdx i : nodes) {
      const int dom = d->of_node[i];
      if (dom >= 0 && d->grants[static_cast<size_t>(dom)]++ == 0) {
        d->free.erase({d->members[static_cast<size_t>(dom)].size(), dom});
      }
    }
  }
  if (occupancy_built_) {
    AddOccupant(OccupantOf(job, placement, nodes));
  } else {
    early_.push_back(OccupantOf(job, placement, nodes));
  }
}

Pass::Occupant Pass::OccupantOf(const JobRequest& job, const Placement* placement,
                                std::vector<NodeIdx> nodes) const {
  Occupant o;
  o.id = job.id;
  o.priority = job.priority;
  o.kind = Kind::kPlaced;
  o.team = shares_.TeamOf(shares_.UserIndex(job.user));
  o.borrowed = false;
  o.started_at = snapshot_.now;
  o.end = job.time_limit ? snapshot_.now + *job.time_limit : kNever;
  o.per_node = &job.per_node;
  o.exclusive = &job.exclusive;
  o.placement = placement;
  o.nodes = std::move(nodes);
  return o;
}

void Pass::CloseDomainOf(const std::string& key, NodeIdx i) {
  Domains& d = DomainsOf(key);
  const int dom = d.of_node[i];
  auto close = [&](NodeIdx n) {
    if (closed_[n]) return;
    closed_[n] = 1;
    ++closings_;
    index_.Exclude(n);
  };
  if (dom < 0) {
    close(i);  // its label was removed while the job ran: still keep others off it
    return;
  }
  if (d.closed[static_cast<size_t>(dom)]) return;
  d.closed[static_cast<size_t>(dom)] = 1;
  for (NodeIdx n : d.members[static_cast<size_t>(dom)]) close(n);
}

Pass::Domains& Pass::DomainsOf(const std::string& key) {
  auto it = domains_.find(key);
  if (it != domains_.end()) return *it->second;
  auto d = std::make_unique<Domains>();
  const size_t n = state_.size();
  d->of_node.assign(n, -1);
  // Numbered in order of first appearance, then renumbered in value order. Domains are usually runs
  // of consecutive nodes (rack r12: node-0192..0207), so most nodes cost no map lookup.
  std::map<std::string_view, int> ids;
  std::string_view last;
  int last_id = -1;
  for (NodeIdx i = 0; i < n; ++i) {
    const std::string* value = LabelOf(state_.view(i), key);
    if (value == nullptr) continue;
    if (last_id < 0 || !SameText(*value, last)) {
      last = *value;
      last_id = ids.try_emplace(last, static_cast<int>(ids.size())).first->second;
    }
    d->of_node[i] = last_id;
  }
  std::vector<int> renumber(ids.size());
  for (const auto& [value, id] : ids) {
    renumber[static_cast<size_t>(id)] = static_cast<int>(d->values.size());
    d->values.emplace_back(value);
  }
  d->members.resize(ids.size());
  for (NodeIdx i = 0; i < n; ++i) {
    int& dom = d->of_node[i];
    if (dom < 0) continue;
    dom = renumber[static_cast<size_t>(dom)];
    d->members[static_cast<size_t>(dom)].push_back(i);
  }
  d->closed.assign(ids.size(), 0);
  return *domains_.emplace(key, std::move(d)).first->second;
}

void Pass::Track(Domains& d) {
  d.grants.assign(d.values.size(), 0);
  auto count = [&](NodeIdx i) {
    if (i != kNoNode && d.of_node[i] >= 0) ++d.grants[static_cast<size_t>(d.of_node[i])];
  };
  if (occupancy_built_) {
    for (const Occupant& o : occupants_) {
      for (NodeIdx i : o.nodes) count(i);
    }
  } else {  // only where jobs are, not who: cheaper than building the occupancy
    for (NodeIdx i : RunningNodes()) count(i);
    for (const Occupant& o : early_) {
      for (NodeIdx i : o.nodes) count(i);
    }
  }
  for (size_t dom = 0; dom < d.values.size(); ++dom) {
    if (d.grants[dom] == 0) d.free.emplace(d.members[dom].size(), static_cast<int>(dom));
  }
  d.tracked = true;
}

const std::vector<NodeIdx>& Pass::RunningNodes() {
  if (running_nodes_.empty() && !snapshot_.running.empty()) {
    if (snapshot_.running.size() > 64) state_.IndexNames();
    for (const auto& r : snapshot_.running) {
      for (const NodeGrant& g : r->placement) running_nodes_.push_back(state_.Find(g.node));
    }
  }
  return running_nodes_;
}

void Pass::EnsureOccupancy() {
  if (occupancy_built_) return;
  occupancy_built_ = true;
  on_node_.resize(state_.size());
  holders_.resize(state_.size());
  occupants_.reserve(snapshot_.running.size() + early_.size());
  const std::vector<NodeIdx>& running_nodes = RunningNodes();
  size_t at = 0;
  for (const auto& running : snapshot_.running) {
    const RunningJob& r = *running;
    Occupant o;
    o.id = r.id;
    o.attempt = r.attempt;
    o.priority = r.priority;
    o.kind = r.stopping ? Kind::kStopping : Kind::kRunning;
    o.started_at = r.started_at;
    o.end = r.stopping ? snapshot_.now : r.time_limit ? r.started_at + *r.time_limit : kNever;
    o.per_node = &r.per_node;
    o.exclusive = &r.exclusive;
    o.placement = &r.placement;
    o.team = shares_.TeamOf(shares_.running_users()[occupants_.size()]);
    o.nodes.reserve(r.placement.size());
    o.nodes.assign(running_nodes.begin() + static_cast<std::ptrdiff_t>(at),
                   running_nodes.begin() + static_cast<std::ptrdiff_t>(at + r.placement.size()));
    at += r.placement.size();
    AddOccupant(std::move(o));
  }
  // Borrowed work: per team and GPU type, the running jobs oldest first fill the quota; a job that
  // starts once the older ones already fill it is borrowed (and so is everything of a type or
  // resource without a quota). A job partly within the quota is not: evicting it would take its
  // team below its quota, and the team could then reclaim back.
  if (any_quota_) {
    for (size_t k = 0; k < snapshot_.running.size(); ++k) {
      Occupant& o = occupants_[k];
      if (o.kind != Kind::kRunning || o.per_node->gpu_milli <= 0) continue;
      std::tie(o.quota_type, o.quota_gpus) =
          shares_.Counted(shares_.FindType(o.per_node->gpu_type),
                          o.per_node->gpu_milli * static_cast<MilliGpu>(o.nodes.size()));
      if (shares_.TeamQuota(o.team, o.quota_type) <= 0) continue;
      borrow_groups_[{o.team, o.quota_type}].push_back(static_cast<int>(k));
    }
    for (auto& [key, members] : borrow_groups_) {
      std::sort(members.begin(), members.end(), [&](int a, int b) {
        const Occupant& x = occupants_[static_cast<size_t>(a)];
        const Occupant& y = occupants_[static_cast<size_t>(b)];
        return std::pair(x.started_at, x.id) < std::pair(y.started_at, y.id);
      });
      const MilliGpu quota = shares_.TeamQuota(key.first, key.second);
      MilliGpu filled = 0;
      for (int k : members) {
        Occupant& o = occupants_[static_cast<size_t>(k)];
        o.borrowed = filled >= quota;  // older jobs fill the quota without it
        filled += o.quota_gpus;
      }
    }
  }
  for (Occupant& o : early_) AddOccupant(std::move(o));
  early_.clear();
  marked_.assign(occupants_.size(), 0);
}

int Pass::AddOccupant(Occupant o) {
  const int id = static_cast<int>(occupants_.size());
  for (NodeIdx i : o.nodes) {
    if (i != kNoNode) on_node_[i].push_back(id);
  }
  if (!o.exclusive->empty()) {
    const Domains& d = DomainsOf(*o.exclusive);
    std::vector<int> done;
    for (NodeIdx i : o.nodes) {
      if (i == kNoNode) continue;
      const int dom = d.of_node[i];
      if (dom < 0) {
        holders_[i].push_back(id);
      } else if (std::find(done.begin(), done.end(), dom) == done.end()) {
        done.push_back(dom);
        for (NodeIdx m : d.members[static_cast<size_t>(dom)]) holders_[m].push_back(id);
      }
    }
  }
  TouchOccupant(o);
  occupants_.push_back(std::move(o));
  marked_.push_back(0);
  return id;
}

std::vector<NodeIdx> Pass::EligibleNodes(const JobRequest& job, std::string* reason) const {
  // Many failing shapes share a scope (the default pool, no selector): one scan serves them until
  // a domain closes.
  const bool cacheable = !job.narrowed();
  if (cacheable) {
    auto it = eligible_.find(job.pool);
    if (it != eligible_.end() && it->second.closed == closings_) {
      if (it->second.nodes.empty()) *reason = it->second.reason;
      return it->second.nodes;
    }
  }
  std::vector<NodeIdx> out = ScanEligible(job, reason);
  if (cacheable) eligible_[job.pool] = {closings_, out, out.empty() ? *reason : ""};
  return out;
}

std::vector<NodeIdx> Pass::ScanEligible(const JobRequest& job, std::string* reason) const {
  std::vector<NodeIdx> out;
  const int pool = PoolOf(state_, job);
  int in_pool = 0;
  int in_scope = 0;
  int schedulable = 0;
  for (NodeIdx i = 0; i < state_.size(); ++i) {
    if (pool == -2 || (pool >= 0 && state_.pool(i) != pool)) continue;
    ++in_pool;
    if (job.narrowed() && !InPoolAndSelector(state_.view(i), job)) continue;
    ++in_scope;
    if (!state_.schedulable(i)) continue;
    ++schedulable;
    if (closed_[i]) continue;
    out.push_back(i);
  }
  if (!out.empty()) return out;
  const std::string pool_words = job.pool.empty() ? "" : " in pool '" + job.pool + "'";
  if (state_.size() == 0) {
    *reason = "waiting: no nodes have joined the cluster";
  } else if (in_pool == 0) {
    *reason = "waiting: no node" + pool_words;
  } else if (in_scope == 0) {
    *reason = "waiting: no node" + pool_words + DescribeNarrowing(job);
  } else if (schedulable == 0) {
    *reason = "waiting: no schedulable node" + DescribeScope(job) + " (" +
              (in_scope == 1 ? "its 1 node is" : "all " + std::to_string(in_scope) + " are") +
              " draining or down)";
  } else {
    *reason = "waiting: every schedulable node" + DescribeScope(job) +
              " is in a domain held by an exclusive job";
  }
  return out;
}

}  // namespace berth::sched::internal
