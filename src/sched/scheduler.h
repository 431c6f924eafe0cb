// Scheduler: one pure function from a cluster snapshot to decisions (STYLE.md "pure core, thin shell").
//
// Rules (DESIGN.md "Scheduling"): pending jobs are considered in order of priority (high first), then id
// (submission order). A job is placed only where every resource it asks for is free on every node it gets
// (no oversubscription); a job that does not fit is skipped and later jobs that fit are placed (backfill).
// Placement is best fit: among the nodes that can hold the job, the one left with the fewest free units of
// what the job asks for; ties broken by fewer free CPUs, less free memory, then node name. Within a node,
// whole-device requests take the lowest-indexed fully free devices; a fractional request (< 1 GPU) takes
// the device with the least free share that still fits (lowest index on ties), so shares pack together.
// A gang (num_nodes > 1) gets num_nodes distinct nodes in one decision, or nothing.
// Cost: a pass is O(pending + shapes x nodes): once a request shape (per-node resources, node count, pool,
// selector, exclusivity) fails in a pass, later jobs of the same shape are not tried again in that pass.
//
// Schedule() and CheckFeasible() are pure and thread-safe (they touch only their arguments).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/cluster.h"

namespace berth::sched {

struct Config {
  // Reserved for the starvation/preemption rules of later issues; not yet used by Schedule().
  DurationMs starvation_bound = 10 * 60 * 1000;
};

struct PlaceDecision {
  JobId job = 0;
  Placement placement;  // num_nodes entries, rank 0..n-1
};

struct PassResult {
  std::vector<PlaceDecision> placements;  // in the order they were decided
  std::map<JobId, std::string> waiting;   // every pending job not placed -> why it waits (for `berth show`)
};

// Decides which pending jobs start now and where. Does not modify anything; the caller applies the result.
PassResult Schedule(const Snapshot& snapshot, const Config& config);

// Whether `job` could ever run on this cluster if it were empty: some set of num_nodes distinct nodes
// (schedulable or not) matching its pool and selector has enough total CPUs, memory and devices of the type.
// Returns Infeasible with a message saying why ("no node has 8 V100 GPUs (largest: 4 on n1)",
// "unknown GPU type A100 (cluster has: V100, T4)", "no node in pool 'research'", ...), or Ok.
Status CheckFeasible(const std::vector<NodeView>& nodes, const JobRequest& job);

}  // namespace berth::sched
