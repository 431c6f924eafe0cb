// ReadModel: the dashboard's totals and the /metrics gauges.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/json_util.h"
#include "common/log.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "net/tls.h"
#include "server/core/read_model.h"

namespace berth {
namespace {

// What a scrape reads under the core's lock, copied into small tables; the page is written from
// them after the lock is released.
struct NodeGpus {
  std::string node;
  std::string type;
  bool down = false;
  MilliGpu used = 0;
  MilliGpu total = 0;
};

struct GaugeTables {
  std::vector<std::pair<std::string, std::string>> groups;  // (pool, team) of each count group
  std::vector<JobCounts::Slots> counts;                     // by group
  std::vector<NodeGpus> node_gpus;                          // a row per node and GPU type
  std::map<std::string, int64_t> nodes{{"UP", 0}, {"DRAINING", 0}, {"DOWN", 0}};
  std::map<std::string, int64_t> isolation;  // nodes not down, by layout
  // Node health (docs/operators.md "Node health"), of nodes not down.
  int64_t unhealthy_nodes = 0;                           // drained by their probes
  std::vector<std::pair<std::string, int>> faulty_gpus;  // (node, index)
  struct Probe {
    std::string node, name;
    int64_t failures = 0, timeouts = 0;
  };
  std::vector<Probe> probes;
};

void WriteJobGauges(metrics::ExpositionWriter& out, const GaugeTables& t) {
  const auto& groups = t.groups;
  const auto& counts = t.counts;
  out.Family("berth_jobs", "gauge",
             "Active jobs by status (STOPPING: ended, processes still being stopped), pool and "
             "team.");
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int slot = 0; slot < JobCounts::kSlots; ++slot) {
      const int64_t n = counts[g][static_cast<size_t>(slot)];
      if (n == 0) continue;
      const std::string status = slot == JobCounts::kStoppingSlot
                                     ? "STOPPING"
                                     : std::string(JobStatusName(JobStatus(slot)));
      out.Sample("berth_jobs",
                 {{"status", status}, {"pool", groups[g].first}, {"team", groups[g].second}},
                 static_cast<double>(n));
    }
  }
}

// Pending jobs by why they wait, as of the last pass (its compact list, counted without the core's
// lock); `on_dependencies` wait for other jobs (in no pass); the rest were submitted since: "new".
void WritePendingGauges(metrics::ExpositionWriter& out, const sched::Waiting* pass,
                        int64_t on_dependencies, int64_t pending) {
  out.Family("berth_pending_jobs", "gauge",
             "Pending jobs by the class of their waiting reason (as of the last scheduling pass; "
             "reason=\"new\": submitted since), user and team.");
  int64_t classified = 0;
  if (pass) {
    // Counted by (reason class, user index): the handful of sentences are classified once.
    std::map<std::string_view, int> class_ids;
    std::vector<int> class_of;
    for (const std::string& r : pass->reasons()) {
      class_of.push_back(
          class_ids.try_emplace(ReadModel::ReasonClass(r), static_cast<int>(class_ids.size()))
              .first->second);
    }
    std::map<std::pair<int, int32_t>, std::pair<const sched::Waiting::Entry*, int64_t>> by;
    for (const sched::Waiting::Entry& e : pass->entries()) {
      auto& [example, n] = by[{class_of[e.reason], e.user}];
      example = &e;
      ++n;
      ++classified;
    }
    std::vector<std::string_view> class_names(class_ids.size());
    for (const auto& [name, id] : class_ids) class_names[static_cast<size_t>(id)] = name;
    for (const auto& [key, value] : by) {
      const auto& [example, n] = value;
      out.Sample("berth_pending_jobs",
                 {{"reason", std::string(class_names[static_cast<size_t>(key.first)])},
                  {"user", pass->UserOf(*example)},
                  {"team", pass->TeamOf(*example)}},
                 static_cast<double>(n));
    }
  }
  if (on_dependencies > 0) {
    out.Sample("berth_pending_jobs", {{"reason", "dependency"}, {"user", ""}, {"team", ""}},
               static_cast<double>(on_dependencies));
    classified += on_dependencies;
  }
  // Always written, 0 included: with nothing pending the family would have no series at all, and
  // `sum(berth_pending_jobs)` would be empty rather than 0 (alerts on it never fire or resolve).
  out.Sample("berth_pending_jobs", {{"reason", "new"}, {"user", ""}, {"team", ""}},
             static_cast<double>(std::max<int64_t>(0, pending - classified)));
}

void WriteGpuGauges(metrics::ExpositionWriter& out, const std::vector<NodeGpus>& node_gpus) {
  std::map<std::pair<std::string, std::string>, MilliGpu> gpus;  // (type, state)
  for (const NodeGpus& n : node_gpus) {
    if (n.down) {
      gpus[{n.type, "down"}] += n.total;
    } else {
      gpus[{n.type, "used"}] += n.used;
      gpus[{n.type, "free"}] += n.total - n.used;
    }
  }
  out.Family("berth_gpus", "gauge",
             "GPUs by type and state: free, used (fractional shares count their fraction), or down "
             "(on nodes that are down).");
  for (const auto& [key, milli] : gpus) {
    out.Sample("berth_gpus", {{"type", key.first}, {"state", key.second}},
               static_cast<double>(milli) / kMilliPerGpu);
  }
  out.Family("berth_node_gpus", "gauge", "GPUs of each node by type and state.");
  for (const NodeGpus& n : node_gpus) {
    if (n.down) {
      out.Sample("berth_node_gpus", {{"node", n.node}, {"type", n.type}, {"state", "down"}},
                 static_cast<double>(n.total) / kMilliPerGpu);
      continue;
    }
    out.Sample("berth_node_gpus", {{"node", n.node}, {"type", n.type}, {"state", "free"}},
               static_cast<double>(n.total - n.used) / kMilliPerGpu);
    out.Sample("berth_node_gpus", {{"node", n.node}, {"type", n.type}, {"state", "used"}},
               static_cast<double>(n.used) / kMilliPerGpu);
  }
}

void WriteNodeGauges(metrics::ExpositionWriter& out, const GaugeTables& t) {
  const auto& nodes = t.nodes;
  const auto& isolation = t.isolation;
  out.Family("berth_nodes", "gauge", "Nodes by state.");
  for (const auto& [state, n] : nodes) {
    out.Sample("berth_nodes", {{"state", state}}, static_cast<double>(n));
  }
  out.Family("berth_node_isolation", "gauge",
             "Nodes that are not down by how they contain jobs (docs/security.md \"Isolation\"): "
             "v2, v1, none, or unknown (an agent that does not say).");
  for (const auto& [layout, n] : isolation) {
    out.Sample("berth_node_isolation", {{"isolation", layout}}, static_cast<double>(n));
  }
  out.Family("berth_nodes_unhealthy", "gauge",
             "Nodes that are not down and that their health probes drained.");
  out.Sample("berth_nodes_unhealthy", {}, static_cast<double>(t.unhealthy_nodes));
  out.Family("berth_gpus_unhealthy", "gauge",
             "GPUs that their node's health probes fenced (given to no job), by node and index.");
  for (const auto& [node, index] : t.faulty_gpus) {
    out.Sample("berth_gpus_unhealthy", {{"node", node}, {"gpu", std::to_string(index)}}, 1);
  }
  out.Family("berth_health_probe_failures_total", "counter",
             "Failed runs of each health probe (timeouts included) since its agent started.");
  for (const auto& p : t.probes) {
    out.Sample("berth_health_probe_failures_total", {{"node", p.node}, {"probe", p.name}},
               static_cast<double>(p.failures));
  }
  out.Family("berth_health_probe_timeouts_total", "counter",
             "Runs of each health probe killed at their timeout since its agent started.");
  for (const auto& p : t.probes) {
    out.Sample("berth_health_probe_timeouts_total", {{"node", p.node}, {"probe", p.name}},
               static_cast<double>(p.timeouts));
  }
}

}  // namespace

std::string_view ReadModel::ReasonClass(std::string_view reason) {
  auto starts = [&](std::string_view prefix) { return reason.substr(0, prefix.size()) == prefix; };
  auto has = [&](std::string_view part) { return reason.find(part) != std::string_view::npos; };
  if (starts("preempting")) return "preempting";
  if (starts("reclaiming")) return "reclaiming";
  if (starts("invalid request")) return "invalid";
  if (has("max-running-gpus")) return "user_cap";
  if (has("is at its max_running")) return "group_cap";
  if (has("may borrow")) return "team_borrow_limit";
  if (has("holds a reservation") || has("reserved for job")) return "reservation";
  if (starts("waiting: no schedulable node") || starts("waiting: no node")) return "no_node";
  if (starts("waiting for resources") || starts("waiting for a free")) return "resources";
  return "other";
}

void ReadModel::WriteGauges(metrics::ExpositionWriter& out) {
  GaugeTables t;
  {
    HandlerLock lock(s_);
    t.groups = s_.counts.groups();
    t.counts = s_.counts.counts();
    t.node_gpus.reserve(s_.nodes.size());
    for (const auto& [name, node] : s_.nodes) {
      const bool down = node.row.state == NodeState::kDown;
      ++t.nodes[std::string(NodeStateName(
          ShownNodeState(node.row.state, node.row.draining || node.health.NodeFaulty())))];
      // The layout only ("none: REASON" -> "none"): a label of few values.
      if (!down) {
        if (node.health.NodeFaulty()) ++t.unhealthy_nodes;
        for (int gpu : node.health.FaultyGpus()) t.faulty_gpus.emplace_back(name, gpu);
        for (const auto& p : node.health.probes) {
          t.probes.push_back({name, p.name, p.failures, p.timeouts});
        }
        ++t.isolation[node.isolation.empty() ? "unknown"
                                             : node.isolation.substr(0, node.isolation.find(':'))];
      }
      const size_t first = t.node_gpus.size();
      for (const GpuDevice& d : node.row.gpus) {
        auto used = node.gpu_used.find(d.index);
        const MilliGpu held = used == node.gpu_used.end() ? 0 : used->second;
        NodeGpus* row = nullptr;
        for (size_t k = first; k < t.node_gpus.size(); ++k) {
          if (t.node_gpus[k].type == d.type) row = &t.node_gpus[k];
        }
        if (row == nullptr) row = &t.node_gpus.emplace_back(NodeGpus{name, d.type, down, 0, 0});
        row->used += held;
        row->total += kMilliPerGpu;
      }
    }
  }
  auto [pass, on_dependencies] = s_.waiting.ForGauges();
  int64_t pending = 0;
  for (const auto& c : t.counts) pending += c[static_cast<size_t>(JobStatus::kPending)];
  WriteJobGauges(out, t);
  WritePendingGauges(out, pass.get(), on_dependencies, pending);
  WriteGpuGauges(out, t.node_gpus);
  WriteNodeGauges(out, t);
}

}  // namespace berth
