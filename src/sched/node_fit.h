// Node fit: whether one node can hold one node's share of a job, which devices that share would
// get, and how tight the fit is. The building block of Schedule() (against what is free now) and of
// the waiting reasons; CheckFeasible() asks the same questions of node totals.
//
// All functions are pure and thread-safe; TakeResources() mutates only the NodeView it is given.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/resources.h"
#include "sched/cluster.h"

namespace berth::sched {

// How tight a fit is; smaller is better (best fit keeps large holes for large jobs). Compared in
// member order: free milli-GPUs left (of the requested type, or of every type when the job wants
// none, so that CPU jobs stay off GPU nodes), then free CPUs left, free memory left, and the node
// name so that ties are deterministic. `node` views the NodeView's name and lives as long as it.
struct FitKey {
  MilliGpu gpus_left = 0;
  MilliCpu cpus_left = 0;
  Mib memory_left = 0;
  std::string_view node;
  auto operator<=>(const FitKey&) const = default;
};

struct NodeFit {
  std::vector<GpuGrant> gpus;  // the devices this node would give, in index order
  FitKey key;
};

// What is malformed about `job` ("num_nodes must be at least 1"), or "" when nothing is. The spec
// parser rejects such jobs at submit; the scheduler checks again so that a bad row can never crash
// a pass.
std::string RequestProblem(const JobRequest& job);

// Whether `node` is in the job's pool ("" = any pool) and carries every label of its node_selector.
// Says nothing about schedulability or resources.
bool InPoolAndSelector(const NodeView& node, const JobRequest& job);

// Whether `request` fits in what `node` has free now: CPUs and memory within the free amounts;
// whole GPUs as the lowest-indexed fully free devices of the type; a fractional GPU as the device
// of the type with the least free share that still holds it (lowest index on ties), so that shares
// pack onto already-used devices and keep whole devices whole. Returns nullopt when it does not
// fit.
std::optional<NodeFit> FitOnNode(const NodeView& node, const ResourceRequest& request);

// Subtracts `request`'s CPUs and memory and the granted device shares from `node`'s free amounts.
// The grant must come from FitOnNode() on this node's current state (aborts on a device index it
// lacks).
void TakeResources(NodeView& node, const ResourceRequest& request,
                   const std::vector<GpuGrant>& gpus);

// Device counting helpers, all restricted to devices of `type`.
int DevicesOfType(const NodeView& node, const std::string& type);
int WholeFreeDevices(const NodeView& node, const std::string& type);  // devices with nothing taken
MilliGpu LargestDeviceFree(const NodeView& node, const std::string& type);
MilliGpu FreeOfType(const NodeView& node, const std::string& type);
MilliGpu FreeOfAllTypes(const NodeView& node);

}  // namespace berth::sched
