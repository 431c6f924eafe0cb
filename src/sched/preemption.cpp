// Preemption (DESIGN.md "Scheduling"): a pending job that cannot be placed may evict running jobs
// of strictly lower priority when that lets it start now. Victims are whole jobs, chosen to lose
// the least: lowest priority first, then fewest victims, then the most recently started; and never
// more than needed (every victim of a decision is one without which the job would not fit).
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

#include "sched/describe.h"
#include "sched/node_fit.h"
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

Pass::Role Pass::RoleOf(const Occupant& o, int priority) const {
  if (o.kind == Kind::kPlaced || o.kind == Kind::kVictim || o.priority >= priority) {
    return Role::kBlocks;
  }
  return o.kind == Kind::kStopping ? Role::kWait : Role::kVictim;
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

Pass::Outcome Pass::TryPreempt(const JobRequest& job, const Need& need, std::string* reason) {
  if (!RequestProblem(job).empty() || need.unknown_type) return Outcome::kNone;
  if (!min_running_priority_) {
    min_running_priority_ = std::numeric_limits<int>::max();
    for (const RunningJob& r : snapshot_.running) {
      min_running_priority_ = std::min(*min_running_priority_, r.priority);
    }
  }
  if (job.priority <= *min_running_priority_) return Outcome::kNone;  // nobody it may evict
  EnsureOccupancy();
  std::optional<Choice> choice =
      job.exclusive.empty() ? ChooseVictims(job, need) : ChooseDomain(job, need);
  if (!choice) return Outcome::kNone;
  return Execute(job, need, std::move(*choice), reason);
}

std::optional<Pass::Choice> Pass::ChooseVictims(const JobRequest& job, const Need& need) {
  const int priority = job.priority;
  const int pool = PoolOf(state_, job);
  const size_t needed = static_cast<size_t>(job.num_nodes);
  auto candidate = [&](NodeIdx i) {
    return state_.schedulable(i) && InScope(i, job, pool) && !Blocked(i, job);
  };
  auto by_id = [&](int a, int b) {
    return occupants_[static_cast<size_t>(a)].id < occupants_[static_cast<size_t>(b)].id;
  };
  // Most expensive to lose first: the order in which a set drops what it does not need.
  auto dearest_first = [&](int a, int b) {
    const Occupant& x = occupants_[static_cast<size_t>(a)];
    const Occupant& y = occupants_[static_cast<size_t>(b)];
    if ((x.kind == Kind::kStopping) != (y.kind == Kind::kStopping)) {
      return y.kind == Kind::kStopping;  // evictions before waits
    }
    if (x.priority != y.priority) return x.priority > y.priority;
    if (x.started_at != y.started_at) return x.started_at < y.started_at;
    return x.id < y.id;
  };
  auto prune = [&](std::vector<int>& set, const std::vector<int>& keep, auto fits) {
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
  };

  // The cheapest set that frees node i for one node's share: holders of its domain must go; then,
  // allowing victims up to one priority at a time (lowest first), take stopping jobs, then the
  // victims that free the most of what the job asks for, and drop whatever proved unneeded.
  auto local = [&](NodeIdx i, const std::vector<int>& must,
                   const std::vector<int>& may) -> std::vector<int> {
    const int type = need.type;
    auto gives = [&](int v) {
      const Occupant& o = occupants_[static_cast<size_t>(v)];
      MilliGpu gpus = 0;
      if (need.wants_gpu() && state_.TypeId(o.per_node->gpu_type) == type) {
        for (size_t k = 0; k < o.nodes.size(); ++k) {
          if (o.nodes[k] != i) continue;
          for (const GpuGrant& g : (*o.placement)[k].gpus) gpus += g.milli;
        }
      }
      return std::tuple(gpus, o.per_node->cpus, o.per_node->memory, o.started_at, o.id);
    };
    auto fits = [&](const std::vector<int>& set) { return Without(i, set).Fits(need); };
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
      std::sort(waits.begin(), waits.end(), by_id);
      std::sort(victims.begin(), victims.end(), [&](int a, int b) { return gives(a) > gives(b); });
      std::vector<int> set = must;
      for (const std::vector<int>* group : {&waits, &victims}) {
        for (int v : *group) {
          if (fits(set)) break;
          set.push_back(v);
        }
      }
      prune(set, must, fits);
      return set;
    }
    return {};  // not reached: the last cap allows everything, which was checked to fit
  };

  struct Option {
    Cost cost;
    FitOrder order;
    std::vector<int> set;
  };
  std::vector<Option> options;
  std::vector<NodeIdx> free_nodes;  // fit without anyone leaving
  std::vector<int> must;
  std::vector<int> may;
  for (NodeIdx i = 0; i < state_.size(); ++i) {
    if (!candidate(i)) continue;
    must.clear();
    bool closed = false;
    for (int h : holders_[i]) {
      if (RoleOf(occupants_[static_cast<size_t>(h)], priority) == Role::kBlocks) {
        closed = true;  // held by a job of equal or higher priority: never entered
        break;
      }
      must.push_back(h);
    }
    if (closed) continue;
    if (must.empty() && state_.Fits(i, need)) {
      free_nodes.push_back(i);
      options.push_back({Cost{}, state_.Order(i, need), {}});
      continue;
    }
    may.clear();
    for (int o : on_node_[i]) {
      if (RoleOf(occupants_[static_cast<size_t>(o)], priority) == Role::kBlocks) continue;
      if (std::find(must.begin(), must.end(), o) == must.end()) may.push_back(o);
    }
    std::vector<int> everyone = must;
    everyone.insert(everyone.end(), may.begin(), may.end());
    if (everyone.empty() || !Without(i, everyone).Fits(need)) continue;
    std::vector<int> set = local(i, must, may);
    options.push_back({CostOf(set), Without(i, set).Order(need), std::move(set)});
  }
  if (options.size() < needed) return std::nullopt;
  auto cheaper = [](const Option& a, const Option& b) {
    if (a.cost < b.cost) return true;
    if (b.cost < a.cost) return false;
    return a.order < b.order;
  };
  std::partial_sort(options.begin(), options.begin() + static_cast<std::ptrdiff_t>(needed),
                    options.end(), cheaper);
  std::vector<int> set;
  for (size_t k = 0; k < needed; ++k) {
    for (int v : options[k].set) {
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
    prune(set, {}, [&](const std::vector<int>& s) { return fitting(s).size() >= needed; });
  }
  std::vector<std::pair<FitOrder, Scratch>> nodes = fitting(set);
  if (nodes.size() < needed) return std::nullopt;  // cannot happen: the set was built to fit
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

std::optional<Pass::Choice> Pass::ChooseDomain(const JobRequest& job, const Need& need) {
  const int pool = PoolOf(state_, job);
  const size_t needed = static_cast<size_t>(job.num_nodes);
  const Domains& d = DomainsOf(job.exclusive);
  struct Best {
    Cost cost;
    size_t size = 0;
    size_t dom = 0;
    std::vector<int> set;
  };
  std::optional<Best> best;
  std::vector<int> present;
  for (size_t dom = 0; dom < d.values.size(); ++dom) {
    const std::vector<NodeIdx>& members = d.members[dom];
    if (std::any_of(members.begin(), members.end(), [&](NodeIdx m) { return Blocked(m, job); })) {
      continue;
    }
    // Everything in the domain must go, and may only if it has lower priority.
    present.clear();
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
      ok = ok && RoleOf(occupants_[static_cast<size_t>(o)], job.priority) != Role::kBlocks;
    }
    size_t fits = 0;
    for (NodeIdx m : members) {
      if (!ok) break;
      if (state_.schedulable(m) && InScope(m, job, pool) && FitsWithout(m, need, nullptr)) ++fits;
    }
    for (int o : present) marked_[static_cast<size_t>(o)] = 0;
    if (!ok || fits < needed) continue;
    Best here{CostOf(present), members.size(), dom, present};
    if (!best || here.cost < best->cost ||
        (!(best->cost < here.cost) &&
         std::pair(here.size, here.dom) < std::pair(best->size, best->dom))) {
      best = std::move(here);
    }
  }
  if (!best) return std::nullopt;
  for (int o : best->set) marked_[static_cast<size_t>(o)] = 1;
  std::vector<std::pair<FitOrder, Scratch>> nodes;
  for (NodeIdx m : d.members[best->dom]) {
    Scratch after;
    if (state_.schedulable(m) && InScope(m, job, pool) && FitsWithout(m, need, &after)) {
      nodes.emplace_back(after.Order(need), std::move(after));
    }
  }
  for (int o : best->set) marked_[static_cast<size_t>(o)] = 0;
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Choice choice;
  for (int v : best->set) {
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
    victims.push_back(occupants_[static_cast<size_t>(v)].id);
  }
  for (int v : choice.waits) {
    occupants_[static_cast<size_t>(v)].kind = Kind::kVictim;  // held for this job from now on
    waits.push_back(occupants_[static_cast<size_t>(v)].id);
  }
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
    names.push_back(state_.name(i));
    placement.push_back({state_.name(i), static_cast<int>(rank), std::move(gpus)});
  }

  const Placement* where = nullptr;
  Outcome outcome;
  if (!victims.empty()) {
    PreemptDecision& d = preempted_.emplace_back();
    d.preemptor = job.id;
    d.victims = victims;
    d.waits_for = waits;
    d.placement = std::move(placement);
    where = &d.placement;
    *reason = "preempting lower-priority " + Jobs(victims) +
              (waits.empty() ? "" : " and waiting for stopping " + Jobs(waits)) + "; starts on " +
              ListNames(names) +
              (victims.size() + waits.size() == 1 ? " once it stops" : " once they stop");
    outcome = Outcome::kPreempted;
  } else {
    HoldDecision& d = held_.emplace_back();
    d.job = job.id;
    d.waits_for = waits;
    d.placement = std::move(placement);
    where = &d.placement;
    *reason = "waiting for stopping lower-priority " + Jobs(waits) + "; " + ListNames(names) +
              (names.size() == 1 ? " is" : " are") + " held for it";
    outcome = Outcome::kHeld;
  }
  Hold(job, where, choice.nodes);
  return outcome;
}

}  // namespace berth::sched::internal
