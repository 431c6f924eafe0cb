// CheckFeasible: "never" as opposed to Schedule()'s "not now" (docs/design.md, habit 3). Asks the
// same questions as a pass, but of node totals, ignoring what runs now and whether a node is
// schedulable, so that a draining node still makes a job feasible.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "common/quantity.h"
#include "sched/describe.h"
#include "sched/matching.h"
#include "sched/scheduler.h"

namespace berth::sched {
namespace {

// The devices of `type` `node` has, or could have once re-sliced (NodeView::reslice_capacity).
int PossibleDevices(const NodeView& node, const std::string& type) {
  const int now = DevicesOfType(node, type);
  auto it = node.reslice_capacity.find(type);
  return it == node.reslice_capacity.end() ? now : std::max(now, it->second);
}

// Whether `node` could hold one node's share of `request` if nothing ran on it.
bool FitsWhenEmpty(const NodeView& node, const ResourceRequest& request) {
  return request.cpus <= node.cpus_total && request.memory <= node.memory_total &&
         PossibleDevices(node, request.gpu_type) >= request.gpu_devices();
}

}  // namespace

Status CheckFeasible(const std::vector<NodeView>& nodes, const JobRequest& job,
                     const std::vector<std::string>& topology_levels) {
  if (nodes.empty()) return Status::Infeasible("no nodes have joined the cluster");
  if (std::string problem = RequestProblem(job); !problem.empty()) {
    return Status::Invalid("invalid request: " + problem);
  }
  const ResourceRequest& r = job.per_node;
  const std::string scope = DescribeScope(job);
  const size_t needed = static_cast<size_t>(job.num_nodes);

  // By name, so that "largest: 4 on n1" names the same node every time.
  std::vector<const NodeView*> sorted;
  for (const NodeView& n : nodes) sorted.push_back(&n);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const NodeView* a, const NodeView* b) { return a->name < b->name; });

  if (r.wants_gpu()) {
    std::set<std::string> types;
    for (const NodeView* n : sorted) {
      for (const Device& d : n->gpus) types.insert(d.type);
      for (const auto& [type, most] : n->reslice_capacity) types.insert(type);
    }
    if (types.count(r.gpu_type) == 0) {
      std::string known;
      for (const std::string& t : types) known += (known.empty() ? "" : ", ") + t;
      return Status::Infeasible(
          "unknown GPU type '" + r.gpu_type + "' (" +
          (types.empty() ? "this cluster has no GPUs" : "this cluster has: " + known) + ")");
    }
  }

  std::vector<const NodeView*> in_pool;
  std::vector<const NodeView*> in_scope;
  for (const NodeView* n : sorted) {
    if (!job.pool.empty() && n->pool != job.pool) continue;
    in_pool.push_back(n);
    if (InPoolAndSelector(*n, job)) in_scope.push_back(n);
  }
  if (in_pool.empty()) return Status::Infeasible("no node in pool '" + job.pool + "'");
  if (in_scope.empty()) {
    return Status::Infeasible("no node" + (job.pool.empty() ? "" : " in pool '" + job.pool + "'") +
                              DescribeNarrowing(job));
  }
  if (!job.exclusive.empty() &&
      std::none_of(in_scope.begin(), in_scope.end(),
                   [&](const NodeView* n) { return n->labels.count(job.exclusive) > 0; })) {
    return Status::Infeasible("no node" + scope + " has the label '" + job.exclusive +
                              "' that exclusive placement needs");
  }
  if (r.wants_gpu() && std::none_of(in_scope.begin(), in_scope.end(), [&](const NodeView* n) {
        return PossibleDevices(*n, r.gpu_type) > 0;
      })) {
    return Status::Infeasible("no node" + scope + " has " + r.gpu_type + " GPUs");
  }

  // One resource at a time, so that the message names the one that is short. `need` reads after "no
  // node has" ("8 V100 GPUs"), `gang_need` after "needs 2 nodes with" ("V100:4").
  auto short_of = [&](const std::string& need, const std::string& gang_need, int64_t amount,
                      const std::function<int64_t(const NodeView&)>& have_of,
                      const std::function<std::string(int64_t)>& show) -> std::optional<Status> {
    std::vector<std::string> enough;
    int64_t largest = -1;
    const NodeView* largest_node = nullptr;
    for (const NodeView* n : in_scope) {
      const int64_t have = have_of(*n);
      if (have >= amount) enough.push_back(n->name);
      if (have > largest) {
        largest = have;
        largest_node = n;
      }
    }
    if (enough.size() >= needed) return std::nullopt;
    if (enough.empty()) {
      return Status::Infeasible("no node" + scope + " has " + need + " (largest: " + show(largest) +
                                " on " + largest_node->name + ")");
    }
    return Status::Infeasible("needs " + CountNodes(job.num_nodes) + scope + " with " + gang_need +
                              "; only " + std::to_string(enough.size()) + " such node" +
                              (enough.size() == 1 ? "" : "s") + " (" + ListNames(enough) + ")");
  };

  std::optional<Status> shortage;
  if (r.wants_gpu()) {
    const int devices = r.gpu_devices();
    const std::string gpus = FormatGpus(r.gpu_type, r.gpu_milli);
    shortage = short_of(
        r.fractional_gpu()
            ? gpus
            : std::to_string(devices) + " " + r.gpu_type + (devices == 1 ? " GPU" : " GPUs"),
        gpus, devices, [&](const NodeView& n) { return PossibleDevices(n, r.gpu_type); },
        [](int64_t have) { return std::to_string(have); });
    if (shortage) return *shortage;
  }
  shortage = short_of(
      DescribeCpus(r.cpus), DescribeCpus(r.cpus), r.cpus,
      [](const NodeView& n) { return n.cpus_total; },
      [](int64_t have) { return FormatMilli(have); });
  if (shortage) return *shortage;
  shortage = short_of(
      DescribeMemory(r.memory), DescribeMemory(r.memory), r.memory,
      [](const NodeView& n) { return n.memory_total; },
      [](int64_t have) { return FormatMib(have); });
  if (shortage) return *shortage;

  // Each resource suffices somewhere, but perhaps not together on enough nodes.
  std::vector<const NodeView*> fit;
  for (const NodeView* n : in_scope) {
    if (FitsWhenEmpty(*n, r)) fit.push_back(n);
  }
  if (fit.empty()) {
    return Status::Infeasible("no single node" + scope + " has all of " + DescribeRequest(r));
  }
  if (fit.size() < needed) {
    std::vector<std::string> names;
    for (const NodeView* n : fit) names.push_back(n->name);
    return Status::Infeasible("needs " + CountNodes(job.num_nodes) + scope + " with " +
                              DescribeRequest(r) + "; only " + std::to_string(fit.size()) +
                              " such node" + (fit.size() == 1 ? "" : "s") + " (" +
                              ListNames(names) + ")");
  }

  if (!job.exclusive.empty()) {
    std::map<std::string, size_t> per_domain;
    for (const NodeView* n : fit) {
      auto label = n->labels.find(job.exclusive);
      if (label != n->labels.end()) ++per_domain[label->second];
    }
    size_t largest = 0;
    std::string largest_value;
    for (const auto& [value, count] : per_domain) {
      if (count > largest) {
        largest = count;
        largest_value = value;
      }
    }
    if (largest < needed) {
      return Status::Infeasible(
          "no '" + job.exclusive + "' domain has " + CountNodes(job.num_nodes) + " that " +
          (needed == 1 ? "fits" : "fit") + " (largest: " + std::to_string(largest) +
          (largest == 0 ? "" : " in " + largest_value) + ")");
    }
  }
  const int required = job.topology.required;
  if (job.exclusive.empty() && required >= 0 &&
      static_cast<size_t>(required) < topology_levels.size()) {
    // Domains by their values at the required level and every coarser one (sched/topology.h).
    std::map<std::vector<std::string>, size_t> per_domain;
    for (const NodeView* n : fit) {
      std::vector<std::string> path;
      for (int k = 0; k <= required; ++k) {
        auto label = n->labels.find(topology_levels[static_cast<size_t>(k)]);
        path.push_back(label == n->labels.end() ? "" : label->second);
      }
      if (!path.back().empty()) ++per_domain[path];
    }
    size_t largest = 0;
    std::string largest_value;
    for (const auto& [path, count] : per_domain) {
      if (count > largest) {
        largest = count;
        largest_value = path.back();
      }
    }
    if (largest < needed) {
      const std::string& level = topology_levels[static_cast<size_t>(required)];
      return Status::Infeasible("no '" + level + "' has " + CountNodes(job.num_nodes) +
                                " that fit (largest: " + std::to_string(largest) +
                                (largest == 0 ? "" : " in " + level + " " + largest_value) + ")");
    }
  }
  return Status::Ok();
}

std::vector<std::string> NodesThatCouldHold(const std::vector<NodeView>& nodes,
                                            const JobRequest& job) {
  std::vector<std::string> out;
  for (const NodeView& n : nodes) {
    if (InPoolAndSelector(n, job) && FitsWhenEmpty(n, job.per_node)) out.push_back(n.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace berth::sched
