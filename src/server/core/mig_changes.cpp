#include "server/core/mig_changes.h"

#include <fmt/format.h>

#include <set>

#include "common/log.h"
#include "common/strings.h"
#include "sched/reslice.h"

namespace berth {

namespace {

constexpr char kBy[] = "scheduler";

std::string Layout(const std::vector<std::string>& profiles) {
  return profiles.empty() ? "(no slices)" : Join(profiles, ",");
}

AuditRow MigAudit(TimeMs now, const std::string& action, const std::string& node,
                  const std::string& detail) {
  return AuditRow{.at = now, .by = kBy, .action = action, .target = node, .detail = detail};
}

// Each change under way on `node` that has outlived `timeout_ms`: failed.
void ExpireChanges(Txn& txn, NodeTable& nodes, NodeRuntime& node, TimeMs now,
                   DurationMs timeout_ms) {
  for (const auto& [gpu, to] : node.mig_changing) {
    auto at = node.mig_changed_at.find(gpu);
    if (at == node.mig_changed_at.end() || now - at->second < timeout_ms) continue;
    NodeRuntime& edited = nodes.Edit(txn, node);
    txn.batch.audit.push_back(
        MigAudit(now, "mig layout failed", node.row.name,
                 fmt::format("GPU {}: its agent did not report the new layout {} within {} s", gpu,
                             Layout(to), timeout_ms / 1000)));
    edited.mig_changed_at[gpu] = now;
    edited.mig_changing.erase(gpu);
    ++edited.sched_gen;
    return;  // (one at a time: the map changed under the loop)
  }
}

}  // namespace

std::string MigProfileOf(const std::string& type, const std::string& gpu_type) {
  if (type.size() <= gpu_type.size() + 1) return "";
  std::string profile = type.substr(gpu_type.size() + 1);
  if (const size_t gb = profile.find("gb-"); gb != std::string::npos) profile[gb + 2] = '+';
  return profile;
}

std::map<int, std::pair<std::string, std::vector<std::string>>> MigLayouts(
    const std::vector<GpuDevice>& devices) {
  std::map<int, std::pair<std::string, std::vector<std::string>>> out;
  for (const GpuDevice& d : devices) {
    if (!d.slice()) continue;
    const std::optional<SliceShare> share = SliceShareOf(d.type);
    if (!share) continue;
    auto& [type, profiles] = out[d.parent];
    type = share->gpu_type;
    profiles.push_back(MigProfileOf(d.type, share->gpu_type));
  }
  return out;
}

void PlanMigChanges(CoreState& s, const sched::Snapshot& snapshot) {
  // What the snapshot's pending jobs ask of slice types, less the slices it has free: the pass
  // placed jobs on free slices only, so this is what it left unmet.
  std::map<std::string, int> wanted;  // slice type -> devices
  for (size_t k = 0; k < sched::PendingCount(snapshot); ++k) {
    const sched::JobRequest& job = sched::PendingRequest(snapshot, k);
    if (!job.per_node.wants_gpu() || !SliceShareOf(job.per_node.gpu_type)) continue;
    wanted[job.per_node.gpu_type] += job.per_node.gpu_devices() * job.num_nodes;
  }
  if (wanted.empty()) return;
  for (const sched::NodeView& node : snapshot.nodes) {
    if (!node.schedulable) continue;
    for (const sched::Device& d : node.gpus) {
      auto it = wanted.find(d.type);
      if (it != wanted.end() && d.free == kMilliPerGpu) --it->second;
    }
  }
  std::vector<sched::ResliceDemand> demand;
  for (const auto& [type, n] : wanted) {
    const std::optional<SliceShare> share = SliceShareOf(type);
    if (n > 0) demand.push_back({share->gpu_type, MigProfileOf(type, share->gpu_type), n});
  }

  CoreLock lock(s);
  const TimeMs now = s.clock.Now();
  Txn txn;
  std::vector<sched::ResliceGpu> gpus;
  for (auto& [name, node] : s.nodes) {
    if (!node.mig_changing.empty()) {
      ExpireChanges(txn, s.nodes, node, now, s.options.mig_change_timeout_ms);
    }
    if (!node.mig_reconfigure) continue;
    const bool usable = node.row.state == NodeState::kUp && !node.row.draining &&
                        !node.session.empty() && !node.health.NodeFaulty();
    const std::set<int> faulty = node.health.FaultyGpus();
    std::set<int> held;
    for (const GpuDevice& d : node.row.gpus) {
      auto used = node.gpu_used.find(d.index);
      if (used != node.gpu_used.end() && used->second > 0) held.insert(d.gpu());
    }
    for (auto& [gpu, layout] : MigLayouts(node.row.gpus)) {
      sched::ResliceGpu g{
          .node = name, .gpu = gpu, .gpu_type = layout.first, .layout = layout.second};
      g.busy = !usable || held.count(gpu) > 0 || faulty.count(gpu) > 0;
      g.allowed = true;
      if (auto changing = node.mig_changing.find(gpu); changing != node.mig_changing.end()) {
        g.changing = true;
        g.layout = changing->second;
      }
      if (auto at = node.mig_changed_at.find(gpu); at != node.mig_changed_at.end()) {
        g.changed_at = at->second;
      }
      gpus.push_back(std::move(g));
    }
  }
  std::optional<sched::ResliceDecision> d =
      demand.empty() ? std::nullopt : sched::PlanReslice(gpus, demand, now, s.options.mig_hold_ms);
  if (d) {
    auto it = s.nodes.find(d->node);
    NodeRuntime& node = s.nodes.Edit(txn, it->second);
    txn.batch.audit.push_back(MigAudit(
        now, "mig layout", d->node,
        fmt::format("GPU {}: {} -> {} {}", d->gpu, Layout(d->from), Layout(d->to), d->reason)));
    node.mig_changing[d->gpu] = d->to;
    node.mig_changed_at[d->gpu] = now;
    ++node.sched_gen;
    s.nodes.CapacityChanged();
    txn.out.sends.emplace_back(d->node, proto::MigLayoutMessage{d->gpu, d->to});
  }
  if (txn.batch.audit.empty()) return;
  if (Status st = s.Execute(txn); !st.ok()) {
    LogWarn("MIG re-slicing: could not record the change ({}); it is decided again", st.message());
    return;
  }
  if (d)
    LogInfo("MIG re-slicing: node {} GPU {} -> {} {}", d->node, d->gpu, Layout(d->to), d->reason);
}

void MigChangesReported(Txn& txn, NodeRuntime& node, TimeMs now) {
  if (node.mig_changing.empty()) return;
  const auto layouts = MigLayouts(node.row.gpus);
  for (const auto& [gpu, to] : node.mig_changing) {
    auto now_layout = layouts.find(gpu);
    const bool done = now_layout != layouts.end() && now_layout->second.second == to;
    if (done) {
      txn.batch.audit.push_back(MigAudit(now, "mig layout done", node.row.name,
                                         fmt::format("GPU {}: {}", gpu, Layout(to))));
    } else {
      txn.batch.audit.push_back(
          MigAudit(now, "mig layout failed", node.row.name,
                   fmt::format("GPU {}: {} not applied: {}", gpu, Layout(to),
                               node.mig_error.empty() ? "the node reports another layout"
                                                      : node.mig_error)));
    }
    node.mig_changed_at[gpu] = now;  // the hold time runs from now, done or failed
  }
  node.mig_changing.clear();
}

}  // namespace berth
