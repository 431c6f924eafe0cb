// Matching: which nodes a request may use at all, and how tight a fit is — the small vocabulary
// shared by the pass (node_state.h does the fitting itself, on its compact node table) and by
// CheckFeasible(), which asks the same questions of node totals.
//
// All functions are pure and thread-safe.
#pragma once

#include <compare>
#include <string>
#include <string_view>

#include "common/resources.h"
#include "sched/cluster.h"

namespace berth::sched {

// How tight a fit is; smaller is better (best fit keeps large holes for large jobs). Compared in
// member order: free milli-GPUs left (of the requested type, or of every type when the job wants
// none, so that CPU jobs stay off GPU nodes), then free CPUs left, free memory left, and the node
// name so that ties are deterministic. `node` views the node's name and lives as long as it.
struct FitKey {
  MilliGpu gpus_left = 0;
  MilliCpu cpus_left = 0;
  Mib memory_left = 0;
  std::string_view node;
  auto operator<=>(const FitKey&) const = default;
};

// What is malformed about `job` ("num_nodes must be at least 1"), or "" when nothing is. The spec
// parser rejects such jobs at submit; the scheduler checks again so that a bad row can never crash
// a pass.
std::string RequestProblem(const JobRequest& job);

// Whether `node` is in the job's pool ("" = any pool), carries every label of its node_selector and
// allows each of its container mounts.
// Says nothing about schedulability or resources.
bool InPoolAndSelector(const NodeView& node, const JobRequest& job);

// How many devices of `type` the node has.
int DevicesOfType(const NodeView& node, const std::string& type);

}  // namespace berth::sched
