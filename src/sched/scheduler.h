// Scheduler: one pure function from a cluster snapshot to decisions (STYLE.md "pure core, thin
// shell").
//
// Rules (DESIGN.md "Scheduling"): pending jobs are considered in order of priority (high first),
// then id (submission order). A job is placed only where every resource it asks for is free on
// every node it gets (no oversubscription); a job that does not fit is skipped and later jobs that
// fit are placed (backfill). A job goes only to schedulable nodes in its pool ("" = any) that carry
// every label of its node_selector. Placement is best fit: among the nodes that can hold the job,
// the one left with the fewest free milli-GPUs of the requested type (for a job without GPUs: the
// fewest free GPUs of any type, so CPU jobs stay off GPU nodes); ties broken by fewer free CPUs
// left, less free memory left, then node name. Within a node, whole-device requests take the
// lowest-indexed fully free devices; a fractional request (< 1 GPU) takes the device with the least
// free share that still fits (lowest index on ties), so shares pack together. A gang (num_nodes >
// 1) gets num_nodes distinct nodes in one decision, or nothing; rank 0 is the best fit.
// Exclusive jobs (`exclusive` = a label key) get nodes sharing one value of that label, in a domain
// where no job runs; while they hold it, no other job is placed in that domain. (Preemption and
// reservations for starving jobs come later; Config is reserved for them.)
//
// Waiting reasons are deterministic, human sentences for `berth show`, naming the scarce resource:
// "waiting for resources: needs V100:4 on 1 node; most free on one node: 2 V100 (n1)",
// "waiting: no schedulable node in pool 'research' (all 2 are draining or down)".
//
// Cost: a pass is O(pending log shapes + (shapes + placements) x nodes): once a request shape
// (per-node resources, node count, pool, selector, exclusivity) fails in a pass, later jobs of the
// same shape get its reason without being tried (free resources only shrink within a pass), and
// placements are bounded by what the cluster can hold.
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
  // A pending job that has waited longer than this (now - submitted_at) gets a reservation: lower- or
  // equal-priority jobs stop being placed on the nodes it waits for, unless their time_limit ends before
  // those nodes are expected to free (EASY backfill).
  DurationMs starvation_bound = 10 * 60 * 1000;
  bool preemption = true;  // pending jobs may evict running jobs of strictly lower priority
};

// A pending job that starts by evicting running jobs. The victims are whole jobs (every rank of a gang).
// The caller stops the victims and holds `placement` for the preemptor: no other job may take those
// resources in between, and the preemptor launches once the victims' processes are gone.
struct PreemptDecision {
  JobId preemptor = 0;
  std::vector<JobId> victims;
  Placement placement;  // where the preemptor goes (on resources the victims free)
};

struct PlaceDecision {
  JobId job = 0;
  Placement placement;  // num_nodes entries, rank 0..n-1
};

struct PassResult {
  std::vector<PlaceDecision> placements;  // in the order they were decided
  std::vector<PreemptDecision> preemptions;
  // Every pending job not placed -> why it waits (for `berth show`).
  std::map<JobId, std::string> waiting;
};

// Decides which pending jobs start now and where. Does not modify anything; the caller applies the
// result. A malformed request (num_nodes < 1, 1.5 GPUs) is not placed; its reason says why.
PassResult Schedule(const Snapshot& snapshot, const Config& config);

// Whether `job` could ever run on this cluster if it were empty: some set of num_nodes distinct
// nodes (schedulable or not) matching its pool and selector has enough total CPUs, memory and
// devices of the type (for exclusive jobs: all within one value of the label). Returns Ok, or
// Infeasible with a message saying why: "unknown GPU type 'A100' (this cluster has: T4, V100)",
// "no node has 8 V100 GPUs (largest: 4 on n1)", "needs 2 nodes with V100:4; only 1 such node (n1)",
// "no node in pool 'research'", "no node matches node_selector gpu_gen=hopper", "no 'rack' domain
// has 2 nodes that fit (largest: 1 in r1)", "no nodes have joined the cluster". A malformed request
// gives InvalidArgument ("invalid request: num_nodes must be at least 1").
Status CheckFeasible(const std::vector<NodeView>& nodes, const JobRequest& job);

}  // namespace berth::sched
