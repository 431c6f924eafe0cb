// The server's side of node health (docs/operators.md "Node health"): the agents' probe results
// become a node kept from new jobs (a node-level fault), GPUs no job is given (a GPU's fault), and
// attempts ended because a GPU they hold went bad. The agent decides what is faulty and when it is
// healthy again (agent/health_book.h); the server keeps its last word, in memory only: an agent
// sends it again when it registers.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "common/log.h"
#include "server/core/core.h"

namespace berth {

NodeStatus Core::StatusOf(const NodeRuntime& node) {
  return NodeStatus{node.row,       node.cpus_used,          node.memory_used, node.gpu_used,
                    node.isolation, node.job_memory_default, node.health};
}

void Core::EndForNodeFault(Txn& txn, ActiveJob& job, const std::string& why, TimeMs now) {
  if (job.spec->on_node_fault == RecoveryAction::kRequeue) {
    ReturnToQueue(txn, job, why + "; requeued", now);
  } else {
    EndJob(txn, job, JobStatus::kFailed, why, std::nullopt, now);
  }
}

void Core::ApplyHealth(Txn& txn, NodeRuntime& runtime, proto::NodeHealth health, TimeMs now) {
  if (health == runtime.health) return;
  const std::set<int> faulty = health.FaultyGpus();
  const std::set<int> before = runtime.health.FaultyGpus();
  const bool was_drained = runtime.health.NodeFaulty();
  NodeRuntime& node = nodes_.Edit(txn, runtime);
  const std::string& name = node.row.name;
  if (faulty != before || was_drained != health.NodeFaulty()) {
    ++node.sched_gen;
    nodes_.CapacityChanged();
    txn.out.kick = true;
    if (health.NodeFaulty() && !was_drained) {
      LogWarn("node {} drained by its health probes: {}", name, health.NodeReason());
    } else if (!health.NodeFaulty() && was_drained) {
      LogInfo("node {} is healthy again", name);
    }
  }
  node.health = std::move(health);
  // Attempts holding a GPU found faulty now end: a job on a GPU that fell off the bus cannot go on,
  // and one on a GPU with uncorrected errors computes garbage. Only newly faulty GPUs are looked
  // for: no job is placed on a GPU that was faulty already (and a report whose commit failed is
  // undone, health included, so its GPUs are new again next time).
  std::set<int> newly;
  std::set_difference(faulty.begin(), faulty.end(), before.begin(), before.end(),
                      std::inserter(newly, newly.end()));
  if (newly.empty()) return;
  for (int64_t id : JobsOn(name)) {
    auto found = jobs_.find(id);
    if (found == jobs_.end()) continue;
    ActiveJob& job = found->second;
    if (job.terminating || !IsActive(job.row.status)) continue;
    int bad = -1;
    for (const auto& grant : job.row.placement) {
      if (grant.node != name) continue;
      for (const auto& gpu : grant.gpus) {
        if (newly.count(gpu.index)) bad = gpu.index;
      }
    }
    if (bad < 0) continue;
    EndForNodeFault(txn, job,
                    fmt::format("health: {} on node {}", node.health.GpuReason(bad), name), now);
  }
}

Result<proto::HealthAnswer> Core::ReportHealth(const proto::HealthRequest& request) {
  HandlerLock lock(this);
  auto runtime = Authenticate(request.node, request.session);
  if (!runtime.ok()) return runtime.status();
  const TimeMs now = clock_.Now();
  Txn txn;
  ApplyHealth(txn, **runtime, request.health, now);
  if (!txn.batch.empty()) txn.out.reap = true;
  BERTH_RETURN_IF_ERROR(Execute(txn));
  return proto::HealthAnswer{clock_.Now()};
}

}  // namespace berth
