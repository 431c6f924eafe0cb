// Preemption (docs/design.md "Scheduling"): a pending job that cannot be placed may evict running
// jobs of strictly lower priority when that lets it start now. Victims are whole jobs, chosen to
// lose the least: lowest priority first, then fewest victims, then the most recently started; and
// never more than needed (every victim of a decision is one without which the job would not fit).
//
// Jobs already stopping are never victims, but their resources are on the way back: a preemptor
// waits for lower-priority stopping jobs rather than evicting anyone else (so a preemptor that is
// still pending in the next pass, while its victims stop, does not take more victims).
//
// Exclusive domains: an exclusive job may take a domain only when everything in it has lower
// priority, and evicts all of it; any other job enters a domain held exclusively only by evicting
// the holder, which must have lower priority. Priorities are strict, so a job is never preempted by
// a job it could itself preempt, and equal priorities never preempt each other.
#include <algorithm>
#include <unordered_map>

#include "sched/describe.h"
#include "sched/matching.h"
#include "sched/pass.h"

namespace berth::sched::internal {
namespace {

// "job 3", "jobs 3, 4, 5".
std::string Jobs(const std::vector<JobId>& ids) {
  std::vector<std::string> names;
  for (JobId id : ids) names.push_back(std::to_string(id));
  return (ids.size() == 1 ? "job " : "jobs ") + ListNames(names, 8);
}

}  // namespace

bool Pass::Cost::operator<(const Cost& o) const {
  if (max_priority != o.max_priority) return max_priority < o.max_priority;
  if (victims != o.victims) return victims < o.victims;
  if (oldest_start != o.oldest_start) return oldest_start > o.oldest_start;
  return waits < o.waits;
}

Pass::Role Pass::RoleOf(const Occupant& o) const {
  if (o.kind == Kind::kPlaced || o.kind == Kind::kVictim) return Role::kBlocks;
  if (claim_.reclaim) {
    // Not what is stopping: its resources may already be promised to the job that evicted it.
    if (o.kind == Kind::kStopping) return Role::kBlocks;
    return o.team != claim_.team && o.borrowed ? Role::kVictim : Role::kBlocks;
  }
  if (o.priority >= claim_.priority) return Role::kBlocks;
  if (o.kind == Kind::kStopping) return Role::kWait;
  // Work within another team's quota is never preempted by priority.
  return o.team == claim_.team || o.borrowed ? Role::kVictim : Role::kBlocks;
}

void Pass::UpdateBorrowed(const Occupant& victim) {
  if (victim.per_node->gpu_milli <= 0) return;  // no quota covers it: always borrowed
  auto it = borrow_groups_.find({victim.team, victim.quota_type});
  if (it == borrow_groups_.end()) return;
  const MilliGpu quota = shares_.TeamQuota(victim.team, victim.quota_type);
  MilliGpu filled = 0;
  for (int k : it->second) {
    Occupant& o = occupants_[static_cast<size_t>(k)];
    if (o.kind != Kind::kRunning) continue;
    const bool borrowed = filled >= quota;  // older jobs fill the quota without it
    filled += o.quota_gpus;
    if (borrowed != o.borrowed) {
      o.borrowed = borrowed;
      TouchOccupant(o);
    }
  }
}

bool Pass::AnyBorrowedOutside(int team) {
  if (!shares_.MayBorrowOutside(team)) return false;  // no need to know who runs where
  EnsureOccupancy();
  // Borrowed work only changes when the pass evicts someone: one scan per team in between.
  if (borrowed_outside_.size() < shares_.team_count()) {
    borrowed_outside_.assign(shares_.team_count(), {~uint64_t{0}, false});
  }
  auto& [seen, any] = borrowed_outside_[static_cast<size_t>(team)];
  if (seen != evictions_) {
    seen = evictions_;
    any = std::any_of(occupants_.begin(), occupants_.end(), [&](const Occupant& o) {
      return o.kind == Kind::kRunning && o.borrowed && o.team != team;
    });
  }
  return any;
}

Pass::Cost Pass::CostOf(const std::vector<int>& set) const {
  Cost c;
  for (int v : set) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    if (o.kind == Kind::kStopping) {
      ++c.waits;
      continue;
    }
    c.max_priority = std::max(c.max_priority, o.priority);
    ++c.victims;
    c.oldest_start = std::min(c.oldest_start, o.started_at);
  }
  return c;
}

void Pass::ReleaseOn(Scratch& s, const Occupant& o, NodeIdx i) const {
  for (size_t k = 0; k < o.nodes.size(); ++k) {
    if (o.nodes[k] == i) {
      s.Release(*o.per_node, (*o.placement)[k]);
      return;
    }
  }
}

Scratch Pass::Without(NodeIdx i, const std::vector<int>& set) const {
  Scratch s = state_.ScratchOf(i);
  for (int v : set) ReleaseOn(s, occupants_[static_cast<size_t>(v)], i);
  return s;
}

bool Pass::FitsWithout(NodeIdx i, const Need& need, Scratch* after) const {
  for (int h : holders_[i]) {
    if (!marked_[static_cast<size_t>(h)]) return false;
  }
  Scratch s = state_.ScratchOf(i);
  for (int o : on_node_[i]) {
    if (marked_[static_cast<size_t>(o)]) ReleaseOn(s, occupants_[static_cast<size_t>(o)], i);
  }
  if (!s.Fits(need)) return false;
  if (after != nullptr) *after = std::move(s);
  return true;
}

void Pass::CandidateQueue::Push(const Candidate& c) {
  heap.push_back(c);
  std::push_heap(heap.begin(), heap.end(), Later);
}

Pass::Candidate Pass::CandidateQueue::Pop() {
  std::pop_heap(heap.begin(), heap.end(), Later);
  Candidate c = heap.back();
  heap.pop_back();
  return c;
}

bool Pass::Later(const Candidate& a, const Candidate& b) {
  if (a.cost < b.cost) return false;
  if (b.cost < a.cost) return true;
  if (a.order != b.order) return b.order < a.order;
  return a.exact && !b.exact;  // a bound comes out before the exact entry it bounds
}

void Pass::TouchOccupant(const Occupant& o) {
  for (NodeIdx i : o.nodes) {
    if (i != kNoNode) Touch(i);
  }
  if (o.exclusive->empty()) return;
  const Domains& d = DomainsOf(*o.exclusive);
  for (NodeIdx i : o.nodes) {
    if (i == kNoNode || d.of_node[i] < 0) continue;
    for (NodeIdx m : d.members[static_cast<size_t>(d.of_node[i])]) Touch(m);
  }
}

Pass::Outcome Pass::TryPreempt(uint32_t shape, const JobRequest& job, const Need& need,
                               const Claim& claim, std::string* reason) {
  if (!need.valid || need.unknown_type) return Outcome::kNone;
  if (claim.reclaim) {
    if (!AnyBorrowedOutside(claim.team)) return Outcome::kNone;  // nothing to take back
  } else {
    if (!min_running_priority_) {
      min_running_priority_ = std::numeric_limits<int>::max();
      for (const auto& r : snapshot_.running) {
        min_running_priority_ = std::min(*min_running_priority_, r->priority);
      }
    }
    if (job.priority <= *min_running_priority_) return Outcome::kNone;  // nobody it may evict
  }
  EnsureOccupancy();
  claim_ = claim;
  // Jobs come in priority order: the queues of a higher priority serve nobody any more.
  if (job.priority < queues_priority_ || !tuning_.reuse_preemption_queues) {
    queues_.clear();
    queues_priority_ = job.priority;
  }
  // Whom a job may evict depends on its team once teams have quotas (and always in a reclaim).
  const int team_key = claim.reclaim ? -2 - claim.team : any_quota_ ? claim.team : 0;
  auto [it, fresh] = queues_.try_emplace(QueueKey(shape, job.priority, job.time_limit, team_key));
  CandidateQueue& queue = it->second;
  const int pool = PoolOf(state_, job);
  if (fresh && job.exclusive.empty()) {
    queue.latest.assign(version_.begin(), version_.end());
    for (NodeIdx i = 0; i < state_.size(); ++i) {
      if (!state_.schedulable(i) || !InScope(i, job, pool)) continue;
      std::optional<Candidate> c = tuning_.bound_preemption_queues
                                       ? NodeBound(i, job, need)
                                       : NodeExact(i, job, need, nullptr);
      if (c) queue.heap.push_back(*c);
    }
    std::make_heap(queue.heap.begin(), queue.heap.end(), Later);
  } else if (fresh) {
    const Domains& d = DomainsOf(job.exclusive);
    queue.latest.resize(d.values.size());
    for (size_t dom = 0; dom < d.values.size(); ++dom) {
      queue.latest[dom] = DomainVersion(d, dom);
      if (std::optional<Candidate> c = DomainExact(d, dom, job, need, nullptr)) {
        queue.heap.push_back(*c);
      }
    }
    std::make_heap(queue.heap.begin(), queue.heap.end(), Later);
  }
  if (fresh) queue.synced = touched_.size();
  std::optional<Choice> choice =
      job.exclusive.empty() ? ChooseVictims(queue, job, need) : ChooseDomain(queue, job, need);
  if (!choice) return Outcome::kNone;
  return Execute(job, need, std::move(*choice), reason);
}

std::optional<Pass::Candidate> Pass::NodeBound(NodeIdx i, const JobRequest& /*job*/,
                                               const Need& need) const {
  // Holders of the node's domain must all go; any job may go only if it has lower priority.
  int floor = std::numeric_limits<int>::min();
  int must = 0;
  TimeMs must_oldest = kNever;
  bool waits = false;  // a set of stopping jobs only might do: no useful bound
  for (int h : holders_[i]) {
    const Occupant& o = occupants_[static_cast<size_t>(h)];
    switch (RoleOf(o)) {
      case Role::kBlocks:
        return std::nullopt;
      case Role::kWait:
        waits = true;
        break;
      case Role::kVictim:
        floor = std::max(floor, o.priority);
        ++must;
        must_oldest = std::min(must_oldest, o.started_at);
        break;
    }
  }
  Candidate c;
  c.where = i;
  c.version = version_[i];
  if (holders_[i].empty() && state_.Fits(i, need)) {  // free: nobody need go
    c.order = state_.Order(i, need);
    c.exact = true;
    return c;
  }
  int lowest = std::numeric_limits<int>::max();
  TimeMs latest = std::numeric_limits<TimeMs>::min();
  bool any = false;
  for (int v : on_node_[i]) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    const Role role = RoleOf(o);
    if (role == Role::kWait) waits = true;
    if (role != Role::kVictim) continue;
    any = true;
    lowest = std::min(lowest, o.priority);
    latest = std::max(latest, o.started_at);
  }
  if (!any && !waits && must == 0) return std::nullopt;  // nothing here may go
  // Every set for this node contains the holders, and, unless stopping jobs might do, one job more
  // if the holders are none: its cost is no lower than this.
  if (waits || must > 0) {
    c.cost = Cost{must > 0 ? floor : std::numeric_limits<int>::min(), must, must_oldest, 0};
  } else {
    c.cost = Cost{lowest, 1, latest, 0};
  }
  c.order = FitOrder{std::numeric_limits<MilliGpu>::min(), std::numeric_limits<MilliCpu>::min(),
                     std::numeric_limits<Mib>::min(), i};
  return c;
}

std::optional<Pass::Candidate> Pass::NodeExact(NodeIdx i, const JobRequest& /*job*/,
                                               const Need& need, std::vector<int>* set) const {
  std::vector<int> must;
  for (int h : holders_[i]) {
    // Held by a job of equal or higher priority: never entered.
    if (RoleOf(occupants_[static_cast<size_t>(h)]) == Role::kBlocks) {
      return std::nullopt;
    }
    must.push_back(h);
  }
  Candidate c;
  c.where = i;
  c.version = version_[i];
  c.exact = true;
  if (must.empty() && state_.Fits(i, need)) {
    c.order = state_.Order(i, need);
    if (set != nullptr) set->clear();
    return c;
  }
  std::vector<int> may;
  for (int o : on_node_[i]) {
    if (RoleOf(occupants_[static_cast<size_t>(o)]) == Role::kBlocks) continue;
    if (std::find(must.begin(), must.end(), o) == must.end()) may.push_back(o);
  }
  std::vector<int> everyone = must;
  everyone.insert(everyone.end(), may.begin(), may.end());
  if (everyone.empty() || !Without(i, everyone).Fits(need)) return std::nullopt;
  std::vector<int> local = LocalVictims(i, need, must, may);
  c.cost = CostOf(local);
  c.order = Without(i, local).Order(need);
  if (set != nullptr) *set = std::move(local);
  return c;
}

template <class Fits>
void Pass::Prune(std::vector<int>& set, const std::vector<int>& keep, Fits fits) const {
  // Most expensive to lose first: evictions before waits, then high priority, then the oldest.
  auto dearest_first = [&](int a, int b) {
    const Occupant& x = occupants_[static_cast<size_t>(a)];
    const Occupant& y = occupants_[static_cast<size_t>(b)];
    if ((x.kind == Kind::kStopping) != (y.kind == Kind::kStopping)) {
      return y.kind == Kind::kStopping;
    }
    if (x.priority != y.priority) return x.priority > y.priority;
    if (x.started_at != y.started_at) return x.started_at < y.started_at;
    return x.id < y.id;
  };
  std::vector<int> order;
  for (int v : set) {
    if (std::find(keep.begin(), keep.end(), v) == keep.end()) order.push_back(v);
  }
  std::sort(order.begin(), order.end(), dearest_first);
  for (int v : order) {
    std::vector<int> without = set;
    without.erase(std::find(without.begin(), without.end(), v));
    if (fits(without)) set = std::move(without);
  }
}

// The cheapest set that frees node i for one node's share. Holders of its domain must go. Then,
// allowing victims up to one priority at a time (lowest first): stopping jobs first (they cost
// nothing), then as few victims as possible (those that free the most of what the job asks for
// first, dropping whatever proved unneeded), and among sets that small, the one whose oldest victim
// started last (tried on ever longer lists of the most recently started victims).
std::vector<int> Pass::LocalVictims(NodeIdx i, const Need& need, const std::vector<int>& must,
                                    const std::vector<int>& may) const {
  auto gives = [&](int v) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    MilliGpu gpus = 0;
    if (need.wants_gpu() && state_.TypeId(o.per_node->gpu_type) == need.type) {
      for (size_t k = 0; k < o.nodes.size(); ++k) {
        if (o.nodes[k] != i) continue;
        for (const GpuGrant& g : (*o.placement)[k].gpus) gpus += g.milli;
      }
    }
    return std::tuple(gpus, o.per_node->cpus, o.per_node->memory, o.started_at, o.id);
  };
  auto fits = [&](const std::vector<int>& set) { return Without(i, set).Fits(need); };
  auto count_victims = [&](const std::vector<int>& set) {
    return std::count_if(set.begin(), set.end(), [&](int v) {
      return occupants_[static_cast<size_t>(v)].kind != Kind::kStopping;
    });
  };
  int floor = std::numeric_limits<int>::min();
  for (int v : must) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    if (o.kind != Kind::kStopping) floor = std::max(floor, o.priority);
  }
  std::vector<int> caps = {floor};
  for (int v : may) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    if (o.kind != Kind::kStopping && o.priority > floor) caps.push_back(o.priority);
  }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  for (int cap : caps) {
    std::vector<int> waits;
    std::vector<int> victims;
    for (int v : may) {
      const Occupant& o = occupants_[static_cast<size_t>(v)];
      if (o.kind == Kind::kStopping) {
        waits.push_back(v);
      } else if (o.priority <= cap) {
        victims.push_back(v);
      }
    }
    std::vector<int> all = must;
    all.insert(all.end(), waits.begin(), waits.end());
    all.insert(all.end(), victims.begin(), victims.end());
    if (!fits(all)) continue;
    std::sort(waits.begin(), waits.end(), [&](int a, int b) {
      return occupants_[static_cast<size_t>(a)].id < occupants_[static_cast<size_t>(b)].id;
    });
    // The set `pool` allows: waits, then the biggest victims, until it fits; then pruned.
    auto greedy = [&](std::vector<int> pool) -> std::optional<std::vector<int>> {
      std::sort(pool.begin(), pool.end(), [&](int a, int b) { return gives(a) > gives(b); });
      std::vector<int> set = must;
      for (const std::vector<int>* group : {&waits, &pool}) {
        for (int v : *group) {
          if (fits(set)) break;
          set.push_back(v);
        }
      }
      if (!fits(set)) return std::nullopt;
      Prune(set, must, fits);
      return set;
    };
    std::vector<int> fewest = *greedy(victims);
    std::sort(victims.begin(), victims.end(), [&](int a, int b) {
      const Occupant& x = occupants_[static_cast<size_t>(a)];
      const Occupant& y = occupants_[static_cast<size_t>(b)];
      return std::pair(x.started_at, x.id) > std::pair(y.started_at, y.id);
    });
    for (size_t n = 0; n < victims.size(); ++n) {
      std::optional<std::vector<int>> recent = greedy(
          std::vector<int>(victims.begin(), victims.begin() + static_cast<std::ptrdiff_t>(n)));
      if (recent && count_victims(*recent) <= count_victims(fewest)) return *recent;
    }
    return fewest;
  }
  return {};  // not reached: the last cap allows everything, which the caller found to fit
}

std::optional<Pass::Choice> Pass::ChooseVictims(CandidateQueue& queue, const JobRequest& job,
                                                const Need& need) {
  const int pool = PoolOf(state_, job);
  const size_t needed = static_cast<size_t>(job.num_nodes);
  // A gang with a required topology level evicts within one domain of it: the first whose
  // `needed` cheapest nodes come out of the queue.
  const int required = topology_.Applies(job) ? Topology::RequiredOf(job) : -1;
  int chosen_domain = -1;
  auto candidate = [&](NodeIdx i) {
    return state_.schedulable(i) && InScope(i, job, pool) && !Blocked(i, job) &&
           (required < 0 || topology_.DomainOf(required, i) == chosen_domain);
  };
  // The `needed` cheapest nodes, each with what evicting there alone would cost.
  for (; queue.synced < touched_.size(); ++queue.synced) {  // nodes changed since the last job
    const NodeIdx i = touched_[queue.synced];
    if (queue.latest[i] == version_[i]) continue;
    queue.latest[i] = version_[i];
    if (!state_.schedulable(i) || !InScope(i, job, pool)) continue;
    if (std::optional<Candidate> bound = NodeBound(i, job, need)) queue.Push(*bound);
  }
  std::vector<Candidate> chosen;
  std::vector<Candidate> elsewhere;            // exact candidates popped (a required level's)
  std::unordered_map<int, size_t> per_domain;  // of those, how many in each of its domains
  while (!queue.heap.empty() && chosen.size() < needed) {
    const Candidate c = queue.Pop();
    const NodeIdx i = c.where;
    if (c.version != queue.latest[i]) continue;  // superseded by a newer entry
    if (Blocked(i, job)) continue;               // reservations only grow within a pass
    if (!c.exact) {
      if (std::optional<Candidate> exact = NodeExact(i, job, need, nullptr)) queue.Push(*exact);
    } else if (required < 0) {
      chosen.push_back(c);
    } else {
      elsewhere.push_back(c);
      const int dom = topology_.DomainOf(required, i);
      if (dom < 0 || ++per_domain[dom] < needed) continue;
      chosen_domain = dom;
      for (const Candidate& e : elsewhere) {
        if (topology_.DomainOf(required, e.where) == dom) chosen.push_back(e);
      }
    }
  }
  for (const Candidate& c : required < 0 ? chosen : elsewhere) {
    queue.Push(c);  // still candidates for the next job
  }
  if (chosen.size() < needed) return std::nullopt;

  std::vector<int> set;
  std::vector<NodeIdx> free_nodes;  // fit without anyone leaving
  for (const Candidate& c : chosen) {
    std::vector<int> local;
    NodeExact(c.where, job, need, &local);
    if (local.empty()) free_nodes.push_back(c.where);
    for (int v : local) {
      if (std::find(set.begin(), set.end(), v) == set.end()) set.push_back(v);
    }
  }
  if (set.empty()) return std::nullopt;  // enough free nodes: placement would have found them

  // The nodes a set could make fit: the free ones, and those where its jobs hold something.
  auto reach = [&](const std::vector<int>& s) {
    std::vector<NodeIdx> nodes = free_nodes;
    for (int v : s) {
      const Occupant& o = occupants_[static_cast<size_t>(v)];
      for (NodeIdx i : o.nodes) {
        if (i != kNoNode) nodes.push_back(i);
      }
      if (o.exclusive->empty()) continue;
      const Domains& d = DomainsOf(*o.exclusive);
      for (NodeIdx i : o.nodes) {
        if (i == kNoNode || d.of_node[i] < 0) continue;
        const auto& members = d.members[static_cast<size_t>(d.of_node[i])];
        nodes.insert(nodes.end(), members.begin(), members.end());
      }
    }
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    return nodes;
  };
  // The nodes that fit with the jobs of `s` gone, best fit first.
  auto fitting = [&](const std::vector<int>& s) {
    for (int v : s) marked_[static_cast<size_t>(v)] = 1;
    std::vector<std::pair<FitOrder, Scratch>> out;
    for (NodeIdx i : reach(s)) {
      Scratch after;
      if (candidate(i) && FitsWithout(i, need, &after)) out.emplace_back(after.Order(need), after);
    }
    for (int v : s) marked_[static_cast<size_t>(v)] = 0;
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  };
  // A gang's victims were chosen node by node; one evicted for one node may have freed another.
  if (needed > 1) {
    Prune(set, {}, [&](const std::vector<int>& s) { return fitting(s).size() >= needed; });
  }
  std::vector<std::pair<FitOrder, Scratch>> nodes = fitting(set);
  if (nodes.size() < needed) return std::nullopt;  // cannot happen: the set was built to fit
  Choice choice;
  for (int v : set) {
    (occupants_[static_cast<size_t>(v)].kind == Kind::kStopping ? choice.waits : choice.victims)
        .push_back(v);
  }
  for (size_t k = 0; k < needed; ++k) choice.nodes.push_back(nodes[k].first.node);
  if (topology_.Applies(job)) topology_.RankOrder(choice.nodes);
  for (NodeIdx i : choice.nodes) {
    for (size_t k = 0; k < needed; ++k) {
      if (nodes[k].first.node == i) choice.after.push_back(std::move(nodes[k].second));
    }
  }
  return choice;
}

uint64_t Pass::DomainVersion(const Domains& d, size_t dom) const {
  uint64_t sum = 0;  // versions only grow: the sum changes when any member does
  for (NodeIdx m : d.members[dom]) sum += version_[m];
  return sum;
}

std::optional<Pass::Candidate> Pass::DomainExact(const Domains& d, size_t dom,
                                                 const JobRequest& job, const Need& need,
                                                 std::vector<int>* set) const {
  const int pool = PoolOf(state_, job);
  const std::vector<NodeIdx>& members = d.members[dom];
  if (std::any_of(members.begin(), members.end(), [&](NodeIdx m) { return Blocked(m, job); })) {
    return std::nullopt;
  }
  // Everything in the domain must go, and may only if it has lower priority.
  std::vector<int> present;
  for (NodeIdx m : members) {
    for (const std::vector<int>* list : {&on_node_[m], &holders_[m]}) {
      for (int o : *list) {
        if (marked_[static_cast<size_t>(o)]) continue;
        marked_[static_cast<size_t>(o)] = 1;
        present.push_back(o);
      }
    }
  }
  bool ok = !present.empty();  // an empty domain that did not fit will not fit now
  for (int o : present) {
    ok = ok && RoleOf(occupants_[static_cast<size_t>(o)]) != Role::kBlocks;
  }
  size_t fits = 0;
  for (NodeIdx m : members) {
    if (!ok) break;
    if (state_.schedulable(m) && InScope(m, job, pool) && FitsWithout(m, need, nullptr)) ++fits;
  }
  for (int o : present) marked_[static_cast<size_t>(o)] = 0;
  if (!ok || fits < static_cast<size_t>(job.num_nodes)) return std::nullopt;
  Candidate c;
  c.cost = CostOf(present);
  // Ties: the smallest domain, then the first by value (positions are in value order).
  c.order = FitOrder{static_cast<MilliGpu>(members.size()), static_cast<MilliCpu>(dom), 0,
                     static_cast<NodeIdx>(dom)};
  c.where = static_cast<uint32_t>(dom);
  c.version = DomainVersion(d, dom);
  c.exact = true;
  if (set != nullptr) *set = std::move(present);
  return c;
}

std::optional<Pass::Choice> Pass::ChooseDomain(CandidateQueue& queue, const JobRequest& job,
                                               const Need& need) {
  const int pool = PoolOf(state_, job);
  const size_t needed = static_cast<size_t>(job.num_nodes);
  const Domains& d = DomainsOf(job.exclusive);
  for (; queue.synced < touched_.size(); ++queue.synced) {  // domains changed since the last job
    const NodeIdx i = touched_[queue.synced];
    const int dom = d.of_node[i];
    if (dom < 0) continue;
    const uint64_t version = DomainVersion(d, static_cast<size_t>(dom));
    if (queue.latest[static_cast<size_t>(dom)] == version) continue;
    queue.latest[static_cast<size_t>(dom)] = version;
    if (std::optional<Candidate> c = DomainExact(d, static_cast<size_t>(dom), job, need, nullptr)) {
      queue.Push(*c);
    }
  }
  std::optional<Candidate> best;
  while (!queue.heap.empty()) {
    const Candidate c = queue.Pop();
    if (c.version != queue.latest[c.where]) continue;  // superseded by a newer entry
    if (std::any_of(d.members[c.where].begin(), d.members[c.where].end(),
                    [&](NodeIdx m) { return Blocked(m, job); })) {
      continue;  // reservations only grow within a pass
    }
    best = c;
    queue.Push(c);
    break;
  }
  if (!best) return std::nullopt;
  std::vector<int> set;
  DomainExact(d, best->where, job, need, &set);
  for (int o : set) marked_[static_cast<size_t>(o)] = 1;
  std::vector<std::pair<FitOrder, Scratch>> nodes;
  for (NodeIdx m : d.members[best->where]) {
    Scratch after;
    if (state_.schedulable(m) && InScope(m, job, pool) && FitsWithout(m, need, &after)) {
      nodes.emplace_back(after.Order(need), std::move(after));
    }
  }
  for (int o : set) marked_[static_cast<size_t>(o)] = 0;
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Choice choice;
  for (int v : set) {
    (occupants_[static_cast<size_t>(v)].kind == Kind::kStopping ? choice.waits : choice.victims)
        .push_back(v);
  }
  for (size_t k = 0; k < needed; ++k) {
    choice.nodes.push_back(nodes[k].first.node);
    choice.after.push_back(std::move(nodes[k].second));
  }
  return choice;
}

Pass::Outcome Pass::Execute(const JobRequest& job, const Need& need, Choice choice,
                            std::string* reason) {
  std::vector<JobId> victims;
  std::vector<JobId> waits;
  for (int v : choice.victims) {
    occupants_[static_cast<size_t>(v)].kind = Kind::kVictim;
    TouchOccupant(occupants_[static_cast<size_t>(v)]);
    victims.push_back(occupants_[static_cast<size_t>(v)].id);
  }
  for (int v : choice.victims) UpdateBorrowed(occupants_[static_cast<size_t>(v)]);
  ++evictions_;
  for (int v : choice.waits) {
    occupants_[static_cast<size_t>(v)].kind = Kind::kVictim;  // held for this job from now on
    TouchOccupant(occupants_[static_cast<size_t>(v)]);
    waits.push_back(occupants_[static_cast<size_t>(v)].id);
  }
  std::vector<AttemptRef> launch_after;
  for (int v : choice.victims) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    launch_after.push_back({o.id, o.attempt});
  }
  for (int v : choice.waits) {
    const Occupant& o = occupants_[static_cast<size_t>(v)];
    launch_after.push_back({o.id, o.attempt});
  }
  std::sort(launch_after.begin(), launch_after.end());
  std::sort(victims.begin(), victims.end());
  std::sort(waits.begin(), waits.end());

  // The victims' resources stay taken for the rest of the pass; what the job also takes from free
  // resources is taken now.
  Placement placement;
  std::vector<std::string> names;
  for (size_t rank = 0; rank < choice.nodes.size(); ++rank) {
    const NodeIdx i = choice.nodes[rank];
    Scratch& after = choice.after[rank];
    std::vector<GpuGrant> gpus = after.Pick(need);
    after.Take(need, gpus);
    index_.Remove(i);
    state_.LowerTo(i, after);
    index_.Insert(i);
    Touch(i);
    names.push_back(state_.name(i));
    placement.push_back({state_.name(i), static_cast<int>(rank), std::move(gpus)});
  }

  const Placement* where = nullptr;
  Outcome outcome;
  if (!victims.empty()) {
    PreemptDecision& d = preempted_.emplace_back();
    d.preemptor = job.id;
    d.reclaim = claim_.reclaim;
    d.team = shares_.TeamName(claim_.team);
    d.victims = victims;
    d.waits_for = waits;
    d.launch_after = std::move(launch_after);
    d.placement = std::move(placement);
    where = &d.placement;
    *reason = (claim_.reclaim ? "reclaiming team " + TeamLabel(d.team) +
                                    "'s quota from other teams' borrowed " + Jobs(victims)
                              : "preempting lower-priority " + Jobs(victims)) +
              (waits.empty() ? "" : " and waiting for stopping " + Jobs(waits)) + "; starts on " +
              ListNames(names) +
              (victims.size() + waits.size() == 1 ? " once it stops" : " once they stop");
    outcome = Outcome::kPreempted;
  } else {
    HoldDecision& d = held_.emplace_back();
    d.job = job.id;
    d.reclaim = claim_.reclaim;
    d.waits_for = waits;
    d.placement = std::move(placement);
    where = &d.placement;
    *reason = std::string(claim_.reclaim ? "waiting for stopping "
                                         : "waiting for stopping lower-priority ") +
              Jobs(waits) + "; " + ListNames(names) + (names.size() == 1 ? " is" : " are") +
              " held for it";
    outcome = Outcome::kHeld;
  }
  Hold(job, where, choice.nodes);
  return outcome;
}

}  // namespace berth::sched::internal
