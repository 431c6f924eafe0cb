#include "sched/scheduler.h"

#include <algorithm>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <utility>

#include "common/quantity.h"
#include "sched/describe.h"
#include "sched/node_fit.h"

namespace berth::sched {
namespace {

// The parts of a job that decide where it can go. Within one pass free resources only shrink and
// exclusive domains only close, so once a shape fails, every later job of that shape would fail in
// the same way: it gets the first one's reason without being tried (the pass stays O(shapes x
// nodes) however long the queue of identical jobs).
struct Shape {
  MilliCpu cpus = 0;
  Mib memory = 0;
  std::string gpu_type;
  MilliGpu gpu_milli = 0;
  int num_nodes = 1;
  std::string pool;
  std::map<std::string, std::string> node_selector;
  std::string exclusive;
  auto operator<=>(const Shape&) const = default;
};

Shape ShapeOf(const JobRequest& job) {
  return Shape{job.per_node.cpus,      job.per_node.memory, job.per_node.gpu_type,
               job.per_node.gpu_milli, job.num_nodes,       job.pool,
               job.node_selector,      job.exclusive};
}

// A node that can hold one node's share of the job now, and how.
struct Candidate {
  size_t node = 0;  // position in Pass::nodes_
  NodeFit fit;
};

// One scheduling pass. Owns a copy of the nodes whose free amounts it lowers as it places jobs, so
// that two jobs of one pass never count the same free unit twice.
class Pass {
 public:
  explicit Pass(const Snapshot& snapshot);

  PassResult Run(const std::vector<JobRequest>& pending);

 private:
  // Places `job` on the current free state (without committing it), or says why not in *reason.
  std::optional<Placement> TryPlace(const JobRequest& job, std::string* reason) const;
  std::optional<Placement> TryPlaceExclusive(const JobRequest& job,
                                             const std::vector<size_t>& eligible,
                                             std::string* reason) const;
  // The nodes a job may use at all: schedulable, in its pool and selector, outside any domain held
  // exclusively. Empty, with *reason set, when there are none.
  std::vector<size_t> Eligible(const JobRequest& job, std::string* reason) const;
  std::vector<Candidate> Fits(const JobRequest& job, const std::vector<size_t>& nodes) const;
  // Takes the job's num_nodes best candidates, best first (rank 0 is the tightest fit).
  Placement BestOf(std::vector<Candidate> fits, int num_nodes) const;
  // Why no set of num_nodes nodes among `eligible` can hold the job now, naming the scarce
  // resource.
  std::string ResourceReason(const JobRequest& job, const std::vector<size_t>& eligible) const;

  void Commit(const JobRequest& job, const Placement& placement);
  void CloseDomain(const std::string& key, const std::string& value);

  std::vector<NodeView> nodes_;            // sorted by name, so scans and ties are deterministic
  std::map<std::string, size_t> by_name_;  // node name -> position in nodes_
  std::vector<bool> occupied_;             // some job runs there or was placed there in this pass
  std::vector<bool> closed_;  // inside a domain held by an exclusive job: no other job may enter
  std::set<std::pair<std::string, std::string>> closed_domains_;  // (label key, value)
};

Pass::Pass(const Snapshot& snapshot) : nodes_(snapshot.nodes) {
  std::stable_sort(nodes_.begin(), nodes_.end(),
                   [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
  for (size_t i = 0; i < nodes_.size(); ++i) by_name_.emplace(nodes_[i].name, i);
  occupied_.assign(nodes_.size(), false);
  closed_.assign(nodes_.size(), false);
  for (const RunningJob& job : snapshot.running) {
    for (const NodeGrant& grant : job.placement) {
      auto it = by_name_.find(grant.node);
      if (it == by_name_.end()) continue;  // the node left; its jobs no longer constrain anyone
      const size_t i = it->second;
      occupied_[i] = true;
      if (job.exclusive.empty()) continue;
      auto label = nodes_[i].labels.find(job.exclusive);
      if (label != nodes_[i].labels.end()) {
        CloseDomain(job.exclusive, label->second);
      } else {
        closed_[i] = true;  // its label was removed while the job ran: still keep others off it
      }
    }
  }
}

PassResult Pass::Run(const std::vector<JobRequest>& pending) {
  std::vector<const JobRequest*> order;
  order.reserve(pending.size());
  for (const JobRequest& job : pending) order.push_back(&job);
  std::sort(order.begin(), order.end(), [](const JobRequest* a, const JobRequest* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->id < b->id;
  });

  PassResult result;
  std::map<Shape, std::string> failed;
  for (const JobRequest* job : order) {
    Shape shape = ShapeOf(*job);
    if (auto it = failed.find(shape); it != failed.end()) {
      result.waiting[job->id] = it->second;
      continue;
    }
    std::string reason;
    std::optional<Placement> placement = TryPlace(*job, &reason);
    if (!placement) {
      result.waiting[job->id] = reason;
      failed.emplace(std::move(shape), std::move(reason));
      continue;
    }
    Commit(*job, *placement);
    result.placements.push_back({job->id, std::move(*placement)});
  }
  return result;
}

std::optional<Placement> Pass::TryPlace(const JobRequest& job, std::string* reason) const {
  if (std::string problem = RequestProblem(job); !problem.empty()) {
    *reason = "invalid request: " + problem;
    return std::nullopt;
  }
  std::vector<size_t> eligible = Eligible(job, reason);
  if (eligible.empty()) return std::nullopt;
  if (!job.exclusive.empty()) return TryPlaceExclusive(job, eligible, reason);
  std::vector<Candidate> fits = Fits(job, eligible);
  if (fits.size() < static_cast<size_t>(job.num_nodes)) {
    *reason = ResourceReason(job, eligible);
    return std::nullopt;
  }
  return BestOf(std::move(fits), job.num_nodes);
}

std::optional<Placement> Pass::TryPlaceExclusive(const JobRequest& job,
                                                 const std::vector<size_t>& eligible,
                                                 std::string* reason) const {
  const std::string& key = job.exclusive;
  struct Domain {
    int size = 0;           // every node with the label value, whatever its state
    bool occupied = false;  // some job runs on one of its nodes
    bool usable = false;    // it has a schedulable node in the job's scope (free or not)
    std::vector<size_t> eligible;
  };
  std::map<std::string, Domain> domains;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    auto label = nodes_[i].labels.find(key);
    if (label == nodes_[i].labels.end()) continue;
    Domain& d = domains[label->second];
    ++d.size;
    d.occupied = d.occupied || occupied_[i];
    d.usable = d.usable || (nodes_[i].schedulable && InPoolAndSelector(nodes_[i], job));
  }
  for (size_t i : eligible) {
    auto label = nodes_[i].labels.find(key);
    if (label != nodes_[i].labels.end()) domains[label->second].eligible.push_back(i);
  }

  std::vector<std::string> busy;
  std::vector<size_t> in_free_domains;
  for (const auto& [value, d] : domains) {
    if (!d.usable) continue;
    if (d.occupied || d.eligible.empty()) {
      busy.push_back(value);
    } else {
      in_free_domains.insert(in_free_domains.end(), d.eligible.begin(), d.eligible.end());
    }
  }
  if (busy.empty() && in_free_domains.empty()) {
    *reason = "waiting: no schedulable node" + DescribeScope(job) + " has the label '" + key +
              "' that exclusive placement needs";
    return std::nullopt;
  }
  if (in_free_domains.empty()) {
    *reason =
        "waiting for a free '" + key + "' domain: every one is in use (" + ListNames(busy) + ")";
    return std::nullopt;
  }

  // Among free domains that can hold the whole job, take the smallest (then the first by value):
  // the domain-level analogue of best fit, which keeps big domains for big jobs.
  const std::string* best_value = nullptr;
  std::vector<Candidate> best_fits;
  int best_size = 0;
  size_t most_fits = 0;
  const std::string* most_fits_value = nullptr;
  for (const auto& [value, d] : domains) {
    if (!d.usable || d.occupied || d.eligible.empty()) continue;
    std::vector<Candidate> fits = Fits(job, d.eligible);
    if (fits.size() > most_fits) {
      most_fits = fits.size();
      most_fits_value = &value;
    }
    if (fits.size() < static_cast<size_t>(job.num_nodes)) continue;
    if (best_value == nullptr || d.size < best_size) {
      best_value = &value;
      best_size = d.size;
      best_fits = std::move(fits);
    }
  }
  if (best_value != nullptr) return BestOf(std::move(best_fits), job.num_nodes);
  if (most_fits == 0) {
    *reason = ResourceReason(job, in_free_domains);
  } else {
    *reason = "waiting for resources: needs " + DescribeRequest(job.per_node) + " on each of " +
              CountNodes(job.num_nodes) + " in one free '" + key + "' domain; at most " +
              std::to_string(most_fits) + " fit in one (" + *most_fits_value + ")";
  }
  return std::nullopt;
}

std::vector<size_t> Pass::Eligible(const JobRequest& job, std::string* reason) const {
  std::vector<size_t> out;
  int in_pool = 0;
  int in_scope = 0;
  int schedulable = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeView& node = nodes_[i];
    if (!job.pool.empty() && node.pool != job.pool) continue;
    ++in_pool;
    if (!InPoolAndSelector(node, job)) continue;
    ++in_scope;
    if (!node.schedulable) continue;
    ++schedulable;
    if (closed_[i]) continue;
    out.push_back(i);
  }
  if (!out.empty()) return out;
  const std::string pool = job.pool.empty() ? "" : " in pool '" + job.pool + "'";
  if (nodes_.empty()) {
    *reason = "waiting: no nodes have joined the cluster";
  } else if (in_pool == 0) {
    *reason = "waiting: no node" + pool;
  } else if (in_scope == 0) {
    *reason =
        "waiting: no node" + pool + " matches node_selector " + DescribeSelector(job.node_selector);
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

std::vector<Candidate> Pass::Fits(const JobRequest& job, const std::vector<size_t>& nodes) const {
  std::vector<Candidate> fits;
  for (size_t i : nodes) {
    if (std::optional<NodeFit> fit = FitOnNode(nodes_[i], job.per_node)) {
      fits.push_back({i, std::move(*fit)});
    }
  }
  return fits;
}

Placement Pass::BestOf(std::vector<Candidate> fits, int num_nodes) const {
  auto end = fits.begin() + num_nodes;
  std::partial_sort(fits.begin(), end, fits.end(),
                    [](const Candidate& a, const Candidate& b) { return a.fit.key < b.fit.key; });
  Placement placement;
  for (int rank = 0; rank < num_nodes; ++rank) {
    Candidate& c = fits[static_cast<size_t>(rank)];
    placement.push_back({nodes_[c.node].name, rank, std::move(c.fit.gpus)});
  }
  return placement;
}

std::string Pass::ResourceReason(const JobRequest& job, const std::vector<size_t>& eligible) const {
  const ResourceRequest& r = job.per_node;
  const size_t needed = static_cast<size_t>(job.num_nodes);
  const std::string where =
      job.num_nodes == 1 ? "on 1 node" : "on each of " + CountNodes(job.num_nodes);
  auto head = [&](const std::string& need) {
    return "waiting for resources: needs " + need + " " + where + "; ";
  };

  // One resource on its own: fails when fewer than num_nodes nodes have `amount` of it free. The
  // reason names the node with the most of it, which is the most useful hint for a single-node job.
  auto scarce = [&](const std::string& need, int64_t amount,
                    const std::function<int64_t(const NodeView&)>& have_of,
                    const std::function<std::string(int64_t)>& show,
                    const std::string& none) -> std::optional<std::string> {
    std::vector<std::string> enough;
    int64_t best = -1;
    const NodeView* best_node = nullptr;
    for (size_t i : eligible) {
      const int64_t have = have_of(nodes_[i]);
      if (have >= amount) enough.push_back(nodes_[i].name);
      if (have > best) {
        best = have;
        best_node = &nodes_[i];
      }
    }
    if (enough.size() >= needed) return std::nullopt;
    if (!enough.empty()) {
      return head(need) + "only " + CountNodes(static_cast<int>(enough.size())) +
             (enough.size() == 1 ? " has" : " have") + " that free (" + ListNames(enough) + ")";
    }
    if (best <= 0) return head(need) + none;
    return head(need) + "most free on one node: " + show(best) + " (" + best_node->name + ")";
  };

  if (r.wants_gpu()) {
    const std::string gpus = FormatGpus(r.gpu_type, r.gpu_milli);
    bool has_type = std::any_of(eligible.begin(), eligible.end(),
                                [&](size_t i) { return DevicesOfType(nodes_[i], r.gpu_type) > 0; });
    if (!has_type) {
      return head(gpus) + "no schedulable node" + DescribeScope(job) + " has " + r.gpu_type +
             " GPUs";
    }
    std::optional<std::string> why;
    if (r.fractional_gpu()) {
      why = scarce(
          gpus, r.gpu_milli, [&](const NodeView& n) { return LargestDeviceFree(n, r.gpu_type); },
          [&](int64_t have) { return FormatMilli(have) + " of one " + r.gpu_type; },
          "every " + r.gpu_type + " is fully taken");
    } else {
      why = scarce(
          gpus, r.gpu_devices(), [&](const NodeView& n) { return WholeFreeDevices(n, r.gpu_type); },
          [&](int64_t have) { return std::to_string(have) + " " + r.gpu_type; },
          "no whole " + r.gpu_type + " free on any node");
    }
    if (why) return *why;
  }
  if (r.cpus > 0) {
    std::optional<std::string> why = scarce(
        DescribeCpus(r.cpus), r.cpus, [](const NodeView& n) { return n.cpus_free; },
        [](int64_t have) { return DescribeCpus(have); }, "no CPUs free on any node");
    if (why) return *why;
  }
  if (r.memory > 0) {
    std::optional<std::string> why = scarce(
        DescribeMemory(r.memory), r.memory, [](const NodeView& n) { return n.memory_free; },
        [](int64_t have) { return FormatMib(have); }, "no memory free on any node");
    if (why) return *why;
  }
  // Each resource is free somewhere, but not together on enough nodes.
  std::vector<std::string> enough;
  for (const Candidate& c : Fits(job, eligible)) enough.push_back(nodes_[c.node].name);
  if (enough.empty()) return head(DescribeRequest(r)) + "no node has all of it free at once";
  return head(DescribeRequest(r)) + "only " + CountNodes(static_cast<int>(enough.size())) +
         (enough.size() == 1 ? " has" : " have") + " all of it free at once (" + ListNames(enough) +
         ")";
}

void Pass::Commit(const JobRequest& job, const Placement& placement) {
  for (const NodeGrant& grant : placement) {
    const size_t i = by_name_.at(grant.node);
    TakeResources(nodes_[i], job.per_node, grant.gpus);
    occupied_[i] = true;
  }
  if (job.exclusive.empty()) return;
  for (const NodeGrant& grant : placement) {
    CloseDomain(job.exclusive, nodes_[by_name_.at(grant.node)].labels.at(job.exclusive));
  }
}

void Pass::CloseDomain(const std::string& key, const std::string& value) {
  if (!closed_domains_.emplace(key, value).second) return;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    auto label = nodes_[i].labels.find(key);
    if (label != nodes_[i].labels.end() && label->second == value) closed_[i] = true;
  }
}

}  // namespace

PassResult Schedule(const Snapshot& snapshot, const Config& config) {
  (void)config;  // starvation_bound is for the reservation rule of a later issue
  Pass pass(snapshot);
  return pass.Run(snapshot.pending);
}

}  // namespace berth::sched
