// Reservations against starvation (docs/design.md "Scheduling", No starvation): a pending job that
// has waited longer than Config::starvation_bound and still cannot start gets the nodes it waits
// for reserved — the ones that free soonest, judged by the time limits of the jobs on them. Jobs
// considered after it in the pass (all of lower or equal priority) are not placed there, unless
// their own time_limit ends before those nodes are expected to free (EASY backfill). A node whose
// jobs have no time limit frees at an unknown time, so nothing backfills onto it.
//
// Jobs that have waited less than the bound reserve nothing: a job that does not fit never holds
// back one that does.
#include <algorithm>
#include <unordered_map>

#include "common/clock.h"
#include "sched/describe.h"
#include "sched/matching.h"
#include "sched/pass.h"

namespace berth::sched::internal {

bool Pass::Starving(const JobRequest& job) const {
  return snapshot_.now - job.submitted_at > config_.starvation_bound;
}

bool Pass::Blocked(NodeIdx i, const JobRequest& job) const {
  if (windows_.Blocks(i, job)) {
    ++blocks_;
    return true;
  }
  if (reserved_.empty() || reserved_[i] < 0) return false;
  const Reservation& r = reservations_[static_cast<size_t>(reserved_[i])];
  // A job sure to be gone before the reserved nodes free delays nobody.
  const bool blocked =
      !(job.time_limit && r.until != kNever && snapshot_.now + *job.time_limit <= r.until);
  blocks_ += blocked ? 1 : 0;
  return blocked;
}

TimeMs Pass::EndOf(const Occupant& o) const {
  // A victim's resources go to its preemptor, whose share of them is not told apart: unknown.
  return o.kind == Kind::kVictim ? kNever : o.end;
}

std::optional<TimeMs> Pass::FreeTime(NodeIdx i, const Need& need) const {
  struct Event {
    TimeMs end;
    int occupant;
    bool holder;
  };
  std::vector<Event> events;
  int holders = 0;
  for (int o : on_node_[i]) events.push_back({EndOf(occupants_[static_cast<size_t>(o)]), o, false});
  for (int h : holders_[i]) {
    events.push_back({EndOf(occupants_[static_cast<size_t>(h)]), h, true});
    ++holders;
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::pair(a.end, a.occupant) < std::pair(b.end, b.occupant);
  });
  Scratch s = state_.ScratchOf(i);
  if (holders == 0 && s.Fits(need)) return snapshot_.now;
  for (const Event& e : events) {
    if (e.holder) {
      --holders;
    } else {
      ReleaseOn(s, occupants_[static_cast<size_t>(e.occupant)], i);
    }
    if (holders == 0 && s.Fits(need)) return std::max(e.end, snapshot_.now);
  }
  return std::nullopt;
}

std::string Pass::Reserve(const JobRequest& job, const Need& need) {
  const int pool = PoolOf(state_, job);
  if (!need.valid || need.unknown_type || pool == -2) return "";
  EnsureOccupancy();
  const size_t needed = static_cast<size_t>(job.num_nodes);
  auto taken = [&](NodeIdx i) { return !reserved_.empty() && reserved_[i] >= 0; };
  std::vector<NodeIdx> chosen;
  TimeMs until = snapshot_.now;
  std::string where;
  if (job.exclusive.empty()) {
    // The nodes that free soonest (ties: by name).
    std::vector<std::pair<TimeMs, NodeIdx>> times;
    for (NodeIdx i = 0; i < state_.size(); ++i) {
      if (!state_.schedulable(i) || !InScope(i, job, pool) || taken(i) || windows_.Blocks(i, job)) {
        continue;
      }
      if (std::optional<TimeMs> t = FreeTime(i, need)) times.emplace_back(*t, i);
    }
    if (times.size() < needed) return "";
    std::sort(times.begin(), times.end());
    // A gang with a required topology level: the domain of it whose `needed` soonest nodes free
    // soonest.
    const int required = topology_.Applies(job) ? Topology::RequiredOf(job) : -1;
    if (required >= 0) {
      std::unordered_map<int, size_t> per_domain;
      int domain = -1;
      for (const auto& [t, i] : times) {
        const int dom = topology_.DomainOf(required, i);
        if (dom >= 0 && ++per_domain[dom] == needed) {
          domain = dom;
          break;
        }
      }
      if (domain < 0) return "";
      std::erase_if(
          times, [&](const auto& t) { return topology_.DomainOf(required, t.second) != domain; });
    }
    std::vector<std::string> names;
    for (size_t k = 0; k < needed; ++k) {
      chosen.push_back(times[k].second);
      until = std::max(until, times[k].first);
      names.push_back(state_.name(times[k].second));
    }
    where = ListNames(names);
  } else {
    // The domain that empties soonest (ties: the smallest, then by value); all of it, since
    // anything placed anywhere in it would keep the job out.
    const Domains& d = DomainsOf(job.exclusive);
    std::optional<std::tuple<TimeMs, size_t, size_t>> best;
    std::vector<int> present;
    for (size_t dom = 0; dom < d.values.size(); ++dom) {
      const std::vector<NodeIdx>& members = d.members[dom];
      if (std::any_of(members.begin(), members.end(), taken) ||
          std::any_of(members.begin(), members.end(),
                      [&](NodeIdx m) { return windows_.Blocks(m, job); })) {
        continue;
      }
      present.clear();
      TimeMs empty_at = snapshot_.now;
      for (NodeIdx m : members) {
        for (const std::vector<int>* list : {&on_node_[m], &holders_[m]}) {
          for (int o : *list) {
            if (marked_[static_cast<size_t>(o)]) continue;
            marked_[static_cast<size_t>(o)] = 1;
            present.push_back(o);
            empty_at = std::max(empty_at, EndOf(occupants_[static_cast<size_t>(o)]));
          }
        }
      }
      size_t fits = 0;
      for (NodeIdx m : members) {
        if (state_.schedulable(m) && InScope(m, job, pool) && FitsWithout(m, need, nullptr)) ++fits;
      }
      for (int o : present) marked_[static_cast<size_t>(o)] = 0;
      if (fits < needed) continue;
      std::tuple here(empty_at, members.size(), dom);
      if (!best || here < *best) best = here;
    }
    if (!best) return "";
    const size_t dom = std::get<2>(*best);
    until = std::get<0>(*best);
    chosen = d.members[dom];
    where = "'" + job.exclusive + "' domain " + d.values[dom];
  }

  if (reserved_.empty()) reserved_.assign(state_.size(), -1);
  const int r = static_cast<int>(reservations_.size());
  reservations_.push_back({job.id, until});
  for (NodeIdx i : chosen) reserved_[i] = r;
  if (until == kNever) {
    return "; holds a reservation on " + where +
           " (when it frees is unknown: a job there has no time limit)";
  }
  if (until <= snapshot_.now) return "; holds a reservation on " + where + " (expected free now)";
  return "; holds a reservation on " + where + " (expected free in " +
         FormatDuration(until - snapshot_.now) + ")";
}

}  // namespace berth::sched::internal
