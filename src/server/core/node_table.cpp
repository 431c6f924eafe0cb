// NodeTable: the nodes, their cached scheduler views and the capacity views (node_table.h).
#include "server/core/node_table.h"

#include <algorithm>
#include <set>

#include "sched/reslice.h"
#include "server/core/mig_changes.h"

namespace berth {
namespace {

// A topology group number as the scheduler keeps it (sched::Device: one byte, 0 = none known).
uint8_t LinkGroup(int group) { return group > 0 && group < 256 ? static_cast<uint8_t>(group) : 0; }

}  // namespace

NodeRuntime& NodeTable::Add(const std::string& name) {
  capacity_stale_ = true;
  return nodes_[name];
}

void NodeTable::Restore(const std::string& name, std::optional<NodeRuntime> before) {
  capacity_stale_ = true;
  if (!before) {
    nodes_.erase(name);
    return;
  }
  NodeRuntime& node = nodes_[name];
  node = std::move(*before);
  node.view_stale = true;
}

const sched::NodeView& NodeTable::ViewOf(NodeRuntime& node) {
  if (!node.view_stale && node.view) return *node.view;
  auto made = std::make_shared<sched::NodeView>();
  sched::NodeView& v = *made;
  v.name = node.row.name;
  v.schedulable = node.row.state == NodeState::kUp && !node.row.draining && !node.session.empty() &&
                  !node.health.NodeFaulty() && node.maintenance_ended == 0;
  v.pool = node.row.pool;
  v.labels = node.row.labels;
  v.container_mounts = node.container_mounts;
  v.cpus_total = node.row.cpus;
  v.cpus_free = std::max<MilliCpu>(0, node.row.cpus - node.cpus_used);
  v.memory_total = node.row.memory;
  v.memory_free = std::max<Mib>(0, node.row.memory - node.memory_used);
  v.gpus.clear();
  // A GPU its node's probes found faulty is given to nobody until they find it well again.
  const std::set<int> faulty = node.health.FaultyGpus();
  for (const auto& d : node.row.gpus) {
    auto used = node.gpu_used.find(d.index);
    MilliGpu held = used == node.gpu_used.end() ? 0 : used->second;
    // (and a GPU whose MIG layout is being changed, until its agent reports the new slices)
    const bool fenced =
        faulty.count(d.gpu()) > 0 || (d.slice() && node.mig_changing.count(d.gpu()));
    v.gpus.push_back({d.index, d.type, fenced ? 0 : std::max<MilliGpu>(0, kMilliPerGpu - held),
                      LinkGroup(d.nvlink), LinkGroup(d.pcie), LinkGroup(d.numa + 1)});
  }
  // What its GPUs in MIG mode could offer once re-sliced (for admission's "never").
  v.reslice_capacity.clear();
  if (node.mig_reconfigure) {
    for (const auto& [gpu, layout] : MigLayouts(node.row.gpus)) {
      const auto& [gpu_type, profiles] = layout;
      for (const auto& [profile, most] : sched::PossibleProfiles(sched::MemorySliceGb(profiles))) {
        v.reslice_capacity[gpu_type + "-" + profile] += most;
      }
    }
  }
  node.view = std::move(made);
  node.view_stale = false;
  return v;
}

const std::vector<sched::NodeView>& NodeTable::CapacityViews() {
  if (capacity_stale_) {
    capacity_views_.clear();
    for (auto& [name, node] : nodes_) capacity_views_.push_back(ViewOf(node));
    capacity_stale_ = false;
  }
  return capacity_views_;
}

bool NodeTable::Forget(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return false;
  const NodeRuntime& node = it->second;
  bool holds = node.cpus_used != 0 || node.memory_used != 0;
  for (const auto& [index, milli] : node.gpu_used) holds = holds || milli != 0;
  if (node.row.state != NodeState::kDown || holds || !node.session.empty()) return false;
  nodes_.erase(it);
  capacity_stale_ = true;
  return true;
}

NodeRuntime& NodeTable::Edit(Txn& txn, NodeRuntime& node) {
  txn.journal.SaveAs(*this, node.row.name, [&] { return Snapshot(node); });
  node.view_stale = true;
  return node;
}

void NodeTable::Allocate(Txn& txn, const Placement& placement, const ResourceRequest& per_node,
                         int sign) {
  for (const auto& grant : placement) {
    auto it = nodes_.find(grant.node);
    if (it == nodes_.end()) continue;
    NodeRuntime& node = Edit(txn, it->second);
    node.cpus_used += sign * per_node.cpus;
    node.memory_used += sign * per_node.memory;
    for (const auto& g : grant.gpus) node.gpu_used[g.index] += sign * g.milli;
    if (sign > 0) ++node.sched_gen;
  }
}

}  // namespace berth
