// WaitingReasons (waiting_reasons.h): the sentence `berth show` prints for a job a pass did not
// place.
#include "sched/waiting_reasons.h"

#include <algorithm>
#include <tuple>

#include "common/quantity.h"
#include "sched/describe.h"
#include "sched/matching.h"

namespace berth::sched::internal {

std::string WaitingReasons::WhyNot(const JobRequest& job, const Need& need) const {
  std::string reason;
  std::vector<NodeIdx> eligible = pass_.EligibleNodes(job, &reason);
  if (eligible.empty()) return reason;
  if (!pass_.reserved_.empty() || !pass_.windows_.empty()) {
    // Enough nodes fit, but some are reserved: by an operator, or for a job that has waited too
    // long.
    std::vector<NodeIdx> blocked;
    std::vector<NodeIdx> in_windows;
    size_t fits = 0;
    for (NodeIdx i : eligible) {
      if (!pass_.state_.Fits(i, need)) continue;
      ++fits;
      if (pass_.windows_.Blocks(i, job)) {
        in_windows.push_back(i);
      } else if (pass_.Blocked(i, job)) {
        blocked.push_back(i);
      }
    }
    if (fits >= static_cast<size_t>(job.num_nodes)) {
      if (!in_windows.empty()) return pass_.windows_.Reason(job, in_windows);
      if (!blocked.empty()) return ReservedReason(job, blocked);
    }
  }
  return ResourceReason(job, need, eligible);
}

std::string WaitingReasons::ResourceReason(const JobRequest& job, const Need& need,
                                           const std::vector<NodeIdx>& eligible) const {
  const ResourceRequest& r = job.per_node;
  const size_t needed = static_cast<size_t>(job.num_nodes);
  const std::string where =
      job.num_nodes == 1 ? "on 1 node" : "on each of " + CountNodes(job.num_nodes);
  auto head = [&](const std::string& what) {
    return "waiting for resources: needs " + what + " " + where + "; ";
  };
  // Up to four names: ListNames() shows three, then "..." when there are more.
  auto some_names = [](std::vector<std::string>& names, const std::string& name) {
    if (names.size() < 4) names.push_back(name);
  };

  // One resource on its own: fails when fewer than num_nodes nodes have `amount` of it free. The
  // reason names the node with the most of it, which is the most useful hint for a single-node job.
  // `resource` and `unit` give the numbers of Blocking: the amounts divided by `unit`.
  auto scarce = [&](const std::string& resource, double unit, const std::string& what,
                    int64_t amount, auto have_of, auto show,
                    const std::string& none) -> std::optional<std::string> {
    size_t enough = 0;
    std::vector<std::string> names;
    int64_t best = -1;
    NodeIdx best_node = kNoNode;
    for (NodeIdx i : eligible) {
      const int64_t have = have_of(i);
      if (have >= amount) {
        ++enough;
        some_names(names, pass_.state_.name(i));
      }
      if (have > best) {
        best = have;
        best_node = i;
      }
    }
    if (enough >= needed) return std::nullopt;
    pass_.blocking_ = Blocking{resource,
                               static_cast<double>(amount) / unit,
                               job.num_nodes,
                               static_cast<int>(enough),
                               static_cast<double>(std::max<int64_t>(best, 0)) / unit,
                               best_node == kNoNode ? "" : pass_.state_.name(best_node)};
    if (enough > 0) {
      return head(what) + "only " + CountNodes(static_cast<int>(enough)) +
             (enough == 1 ? " has" : " have") + " that free (" + ListNames(names) + ")";
    }
    if (best <= 0) return head(what) + none;
    return head(what) + "most free on one node: " + show(best) + " (" +
           pass_.state_.name(best_node) + ")";
  };

  if (r.wants_gpu()) {
    const std::string gpus = FormatGpus(r.gpu_type, r.gpu_milli);
    const int t = need.type;
    const bool has_type = std::any_of(eligible.begin(), eligible.end(),
                                      [&](NodeIdx i) { return pass_.state_.devices_of(t, i) > 0; });
    if (!has_type) {
      return head(gpus) + "no schedulable node" + DescribeScope(job) + " has " + r.gpu_type +
             " GPUs";
    }
    std::optional<std::string> why;
    if (r.fractional_gpu()) {
      why = scarce(
          r.gpu_type, kMilliPerGpu, gpus, r.gpu_milli,
          [&](NodeIdx i) { return pass_.state_.largest_free(t, i); },
          [&](int64_t have) { return FormatMilli(have) + " of one " + r.gpu_type; },
          "every " + r.gpu_type + " is fully taken");
    } else {
      why = scarce(
          r.gpu_type, 1, gpus, r.gpu_devices(),
          [&](NodeIdx i) { return int64_t{pass_.state_.whole_free(t, i)}; },
          [&](int64_t have) { return std::to_string(have) + " " + r.gpu_type; },
          "no whole " + r.gpu_type + " free on any node");
    }
    if (why) return *why;
  }
  if (r.cpus > 0) {
    std::optional<std::string> why = scarce(
        "cpus", kMilliPerCpu, DescribeCpus(r.cpus), r.cpus,
        [&](NodeIdx i) { return pass_.state_.cpus_free(i); },
        [](int64_t have) { return DescribeCpus(have); }, "no CPUs free on any node");
    if (why) return *why;
  }
  if (r.memory > 0) {
    std::optional<std::string> why = scarce(
        "memory", 1, DescribeMemory(r.memory), r.memory,
        [&](NodeIdx i) { return pass_.state_.memory_free(i); },
        [](int64_t have) { return FormatMib(have); }, "no memory free on any node");
    if (why) return *why;
  }
  // Each resource is free somewhere, but not together on enough nodes.
  size_t enough = 0;
  std::vector<std::string> names;
  for (NodeIdx i : eligible) {
    if (!pass_.state_.Fits(i, need)) continue;
    ++enough;
    some_names(names, pass_.state_.name(i));
  }
  if (enough == 0) return head(DescribeRequest(r)) + "no node has all of it free at once";
  return head(DescribeRequest(r)) + "only " + CountNodes(static_cast<int>(enough)) +
         (enough == 1 ? " has" : " have") + " all of it free at once (" + ListNames(names) + ")";
}

std::string WaitingReasons::ExclusiveReason(const JobRequest& job, const Need& need,
                                            Pass::Domains& d) const {
  std::string reason;
  std::vector<NodeIdx> eligible = pass_.EligibleNodes(job, &reason);
  if (eligible.empty()) return reason;
  const std::string& key = job.exclusive;
  std::vector<uint8_t> is_eligible(pass_.state_.size(), 0);
  for (NodeIdx i : eligible) is_eligible[i] = 1;

  std::vector<std::string> busy;
  size_t busy_count = 0;
  std::vector<NodeIdx> in_free_domains;
  std::vector<int> free_domains;  // in value order
  for (size_t dom = 0; dom < d.values.size(); ++dom) {
    bool usable = false;  // it has a schedulable node in the job's scope (free or not)
    bool any_eligible = false;
    bool blocked = false;  // holding it would keep a starving job off its reserved node
    for (NodeIdx m : d.members[dom]) {
      usable =
          usable || (pass_.state_.schedulable(m) && InPoolAndSelector(pass_.state_.view(m), job));
      any_eligible = any_eligible || is_eligible[m];
      blocked = blocked || pass_.Blocked(m, job);
    }
    if (!usable) continue;
    if (d.grants[dom] > 0 || !any_eligible || blocked) {
      if (busy.size() < 4) busy.push_back(d.values[dom]);
      ++busy_count;
      continue;
    }
    free_domains.push_back(static_cast<int>(dom));
    for (NodeIdx m : d.members[dom]) {
      if (is_eligible[m]) in_free_domains.push_back(m);
    }
  }
  if (busy_count == 0 && in_free_domains.empty()) {
    return "waiting: no schedulable node" + DescribeScope(job) + " has the label '" + key +
           "' that exclusive placement needs";
  }
  if (in_free_domains.empty()) {
    return "waiting for a free '" + key + "' domain: every one is in use (" + ListNames(busy) + ")";
  }
  size_t most_fits = 0;
  int most_fits_domain = -1;
  for (int dom : free_domains) {
    size_t fits = 0;
    for (NodeIdx m : d.members[static_cast<size_t>(dom)]) {
      if (is_eligible[m] && pass_.state_.Fits(m, need)) ++fits;
    }
    if (fits > most_fits) {
      most_fits = fits;
      most_fits_domain = dom;
    }
  }
  if (most_fits == 0) return ResourceReason(job, need, in_free_domains);
  return "waiting for resources: needs " + DescribeRequest(job.per_node) + " on each of " +
         CountNodes(job.num_nodes) + " in one free '" + key + "' domain; at most " +
         std::to_string(most_fits) + " fit in one (" +
         d.values[static_cast<size_t>(most_fits_domain)] + ")";
}

std::string WaitingReasons::ReservedReason(const JobRequest& job,
                                           const std::vector<NodeIdx>& blocked) const {
  (void)job;
  const Pass::Reservation& r =
      pass_.reservations_[static_cast<size_t>(pass_.reserved_[blocked.front()])];
  std::vector<std::string> names;
  for (NodeIdx i : blocked) {
    if (names.size() == 4) break;
    names.push_back(pass_.state_.name(i));
  }
  std::string out = "waiting: " + ListNames(names) + (blocked.size() == 1 ? " is" : " are") +
                    " reserved for job " + std::to_string(r.job) +
                    ", which has waited longer than " +
                    FormatDuration(pass_.config_.starvation_bound) + "; ";
  if (r.until == kNever || r.until <= pass_.snapshot_.now) {
    return out + "no other job may start there until " +
           (blocked.size() == 1 ? "it frees" : "they free");
  }
  return out + "only a job whose time_limit ends within " +
         FormatDuration(r.until - pass_.snapshot_.now) + " may start there";
}

std::string WaitingReasons::HeldBy(int level, int domain) const {
  // (when it is expected back, job): by the time limits of the jobs running there; kNever last.
  std::vector<std::pair<TimeMs, JobId>> holders;
  auto in_domain = [&](const Placement& placement) {
    return std::any_of(placement.begin(), placement.end(), [&](const NodeGrant& g) {
      const NodeIdx i = pass_.state_.Find(g.node);
      return i != kNoNode && pass_.topology_.DomainOf(level, i) == domain;
    });
  };
  // The running jobs' nodes, when the pass has found them (Pass::RunningNodes): no lookup by name.
  const std::vector<NodeIdx>& nodes = pass_.running_nodes_;
  size_t at = 0;
  for (const auto& r : pass_.snapshot_.running) {
    bool here = false;
    if (!nodes.empty()) {
      for (size_t k = 0; k < r->placement.size(); ++k) {
        const NodeIdx i = nodes[at + k];
        here = here || (i != kNoNode && pass_.topology_.DomainOf(level, i) == domain);
      }
      at += r->placement.size();
    } else {
      here = in_domain(r->placement);
    }
    if (!here) continue;
    holders.emplace_back(r->time_limit ? r->started_at + *r->time_limit : kNever, r->id);
  }
  for (const PlaceDecision& d : pass_.placed_) {
    if (in_domain(d.placement)) holders.emplace_back(kNever, d.job);
  }
  if (holders.empty()) return "";
  // A job holds the domain once (an attempt stopping and one placed: the sooner back counts).
  auto by_job = [](const auto& a, const auto& b) {
    return std::tie(a.second, a.first) < std::tie(b.second, b.first);
  };
  std::sort(holders.begin(), holders.end(), by_job);
  holders.erase(std::unique(holders.begin(), holders.end(),
                            [](const auto& a, const auto& b) { return a.second == b.second; }),
                holders.end());
  std::sort(holders.begin(), holders.end());
  std::string out = holders.size() == 1 ? ", held by job " : ", held by jobs ";
  for (size_t k = 0; k < holders.size() && k < kHoldersNamed; ++k) {
    out += (k == 0 ? "" : ", ") + std::to_string(holders[k].second);
  }
  if (holders.size() > kHoldersNamed) {
    out += " and " + std::to_string(holders.size() - kHoldersNamed) + " more";
  }
  const auto& [end, first] = holders.front();
  if (end != kNever) {
    out += " (" + std::to_string(first) + " ends first, in " +
           FormatDuration(std::max<TimeMs>(end - pass_.snapshot_.now, 0)) + ")";
  }
  return out;
}

}  // namespace berth::sched::internal
