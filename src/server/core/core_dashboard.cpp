// What the dashboard asks of the core: cluster totals and the active queue, sorted and filtered
// by the server outside the lock (docs/dashboard.md).
#include <map>

#include "server/core/core.h"

namespace berth {

Core::Totals Core::ClusterTotals() {
  Totals out;
  out.nodes = {{"UP", 0}, {"DRAINING", 0}, {"DOWN", 0}};
  HandlerLock lock(this);
  const JobCounts::Slots jobs = counts_.Totals();
  for (const auto& [name, node] : nodes_) {
    const bool down = node.row.state == NodeState::kDown;
    ++out.nodes[std::string(NodeStateName(
        ShownNodeState(node.row.state, node.row.draining || node.health.NodeFaulty())))];
    out.cpus += node.row.cpus;
    out.memory += node.row.memory;
    out.cpus_used += node.cpus_used;
    out.memory_used += node.memory_used;
    for (const GpuDevice& d : node.row.gpus) {
      Totals::Gpus& g = out.gpus[d.type];
      g.total += kMilliPerGpu;
      auto used = node.gpu_used.find(d.index);
      if (used != node.gpu_used.end()) g.used += used->second;
      if (down) g.down += kMilliPerGpu;
    }
  }
  for (int slot = 0; slot < JobCounts::kSlots; ++slot) {
    if (jobs[static_cast<size_t>(slot)] == 0) continue;
    const std::string status =
        slot == JobCounts::kStoppingSlot ? "STOPPING" : std::string(JobStatusName(JobStatus(slot)));
    out.jobs[status] = jobs[static_cast<size_t>(slot)];
  }
  return out;
}

std::vector<Core::QueueEntry> Core::ActiveEntries(const listing::RowFilter& filter) {
  std::vector<QueueEntry> out;
  HandlerLock lock(this);
  out.reserve(jobs_.size());
  std::map<std::string, bool> in_team;  // a user's membership, looked up once per user
  auto member = [&](const std::string& user) NO_THREAD_SAFETY_ANALYSIS {
    auto [t, fresh] = in_team.try_emplace(user, false);
    if (fresh) t->second = shares_.TeamOf(user) == filter.team_name();
    return t->second;
  };
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    const JobRow& row = it->second.row;
    if (IsTerminal(row.status)) continue;  // still stopping: ended for its user
    if (!filter.Passes(row.user, row.status, row.group, member)) continue;
    out.push_back(QueueEntry{row.id, row.group, row.user, row.status, row.priority});
  }
  return out;
}

}  // namespace berth
