// MIG re-slicing, the server's side (docs/gpus.md "Re-slicing"). After each pass, the slices that
// pending jobs ask for and no free slice offers go to the pure planner (sched/reslice.h) with the
// GPUs in MIG mode of nodes that allow changes. A change it picks is committed as an audit row;
// then its GPU's slices are fenced (NodeTable::ViewOf gives them to no job) and the node's agent is
// told (proto::MigLayoutMessage). The agent applies it and registers again, with the new slices or
// with its error: MigChangesReported() compares what it reports with the layout ordered and audits
// the outcome. A change not reported within CoreOptions::mig_change_timeout_ms counts as failed. A
// GPU keeps its layout (or, after a failure, waits) CoreOptions::mig_hold_ms before another.
//
// Thread-safety: each function says which lock it needs (server/core/core_state.h).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/resources.h"
#include "sched/scheduler.h"
#include "server/core/core_state.h"
#include "server/core/txn.h"

namespace berth {

// A slice type's profile as nvidia-smi names it: ("A100-1g.10gb-me", "A100") -> "1g.10gb+me"
// (agent/mig.h MigTypeName wrote its "+" as "-").
std::string MigProfileOf(const std::string& type, const std::string& gpu_type);

// The GPUs in MIG mode among `devices` (a node's): GPU index -> its type and its slices' profiles,
// in device order.
std::map<int, std::pair<std::string, std::vector<std::string>>> MigLayouts(
    const std::vector<GpuDevice>& devices);

// After a pass over `snapshot`: orders at most one change (see above).
void PlanMigChanges(CoreState& s, const sched::Snapshot& snapshot) EXCLUDES(core_lock);

// `node` registered again (its devices are the new ones): each change under way on it is done or
// failed; audited in `txn`.
void MigChangesReported(Txn& txn, NodeRuntime& node, TimeMs now) REQUIRES(core_lock);

}  // namespace berth
