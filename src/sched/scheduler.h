// Scheduler: one pure function from a cluster snapshot to decisions (docs/design.md habit 1, "pure
// core, thin shell").
//
// Rules (docs/design.md "Scheduling"): pending jobs are considered in order of priority (high
// first), then by fair share (docs/fair-share.md), then id (submission order). Within one priority:
// jobs that fit in their team's nominal quota first, then the teams with the least usage per
// weight, then within a team the users with the least usage, each user's jobs oldest first. Usage
// is the decayed, weighted GPU-seconds the server passes in (TeamView/UserView::usage), plus
// Config::admission_charge for every weighted GPU held now, charged as each job is admitted in the
// pass, so that one user's burst is interleaved with others' jobs. A job that would take its user
// over max_running_gpus, or its team over quota plus borrow limit for its GPU type, waits.
//
// A job is placed only where every resource it asks for is free on
// every node it gets (no oversubscription); a job that does not fit is skipped and later jobs that
// fit are placed (backfill). A job goes only to schedulable nodes in its pool ("" = any) that carry
// every label of its node_selector (its key berth.node names the node itself) and allow each of its
// container mounts. Placement is best fit: among the nodes that can hold the job,
// the one left with the fewest free milli-GPUs of the requested type (for a job without GPUs: the
// fewest free GPUs of any type, so CPU jobs stay off GPU nodes); ties broken by fewer free CPUs
// left, less free memory left, then node name. Within a node, whole-device requests take the
// lowest-indexed fully free devices; a fractional request (< 1 GPU) takes the device with the least
// free share that still fits (lowest index on ties), so shares pack together. A gang (num_nodes >
// 1) gets num_nodes distinct nodes in one decision, or nothing; rank 0 is the best fit.
//
// Exclusive jobs (`exclusive` = a label key) get nodes sharing one value of that label (a domain),
// in a domain where no job runs (the smallest such domain that fits, then by value); while they
// hold it, no other job is placed in that domain.
//
// Preemption (Config::preemption): a job that cannot be placed may evict running jobs of strictly
// lower priority when that lets it start. Victims are whole jobs, chosen to lose the least: lowest
// priority first, then fewest victims, then the most recently started; never one more than needed.
// An exclusive job may take a domain only if everything running there has lower priority (all of it
// is evicted); another job enters a domain held exclusively only by evicting the holder, which must
// have lower priority. Jobs already stopping are never victims; a job waits for lower-priority
// stopping jobs (their resources held for it) rather than evicting more. The victims' resources
// belong to the preemptor for the rest of the pass.
//
// Teams and preemption: running work of a team beyond its nominal quota is *borrowed* (per GPU
// type: the team's jobs oldest first fill the quota; the rest, and jobs of a type or resource
// without a quota, are borrowed). A job preempts by priority only its own team's jobs or borrowed
// ones; work within another team's quota is never preempted by priority. Reclaim: a job that fits
// in its team's quota and cannot start may evict other teams' borrowed jobs of any priority (the
// same victim rules), at most Config::reclaim_limit decisions per team per Config::reclaim_window.
// A job evicted as borrowed cannot reclaim its way back while the rest of its team runs (the jobs
// that filled the quota before it still hold it), so two teams never reclaim back and forth.
//
// Starvation (Config::starvation_bound): a job that has waited longer than the bound and still
// cannot start reserves the nodes that free soonest (judging by running jobs' time limits); later
// jobs of the pass may use them only if their time_limit ends before then (EASY backfill).
//
// Waiting reasons are deterministic, human sentences for `berth show`, naming the scarce resource:
// "waiting for resources: needs V100:4 on 1 node; most free on one node: 2 V100 (n1)",
// "waiting: no schedulable node in pool 'research' (all 2 are draining or down)",
// "preempting lower-priority jobs 3, 4; starts on n1 once they stop".
//
// Cost (pass.h): a pass is not O(pending x nodes): a request shape that failed is not tried again
// in the pass, and after a few scans nodes are found through an index ordered by free resources, so
// a placement costs O(log nodes). See bench/sched_bench.cpp.
//
// Schedule() and CheckFeasible() are pure and thread-safe (they touch only their arguments).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/cluster.h"
#include "sched/waiting.h"

namespace berth::sched {

struct Config {
  // A pending job that has waited longer than this (now - submitted_at) gets a reservation: lower-
  // or equal-priority jobs stop being placed on the nodes it waits for, unless their time_limit
  // ends before those nodes are expected to free (EASY backfill).
  DurationMs starvation_bound = 10 * 60 * 1000;
  bool preemption = true;  // pending jobs may evict running jobs of strictly lower priority
  // Fair share: every weighted GPU a job holds (or is admitted to in the pass) counts as this many
  // seconds of use in its user's and team's score.
  double admission_charge_s = 3600;
  std::map<std::string, double> gpu_weights;  // GPU type -> weight of one GPU-second; default 1
  // Reclaim rate limit: decisions per team within the window (TeamView::reclaims).
  int reclaim_limit = 3;
  DurationMs reclaim_window = 60'000;
  // The topology levels across nodes, coarse to fine (`berth server --topology-levels
  // block,rack,switch`): each a node label key (sched/topology.h).
  std::vector<std::string> topology_levels;
};

// A pending job that starts by evicting running jobs. The victims are whole jobs (every rank of a
// gang). The caller stops the victims and holds `placement` for the preemptor: no other job may
// take those resources in between, and the preemptor launches once the victims' processes are gone.
// The simplest way to do that: list the victims as RunningJob::stopping in later snapshots (they
// keep their resources until gone) and keep the preemptor pending. Later passes then hold what it
// needs (HoldDecision) instead of evicting anyone else, and place it once the victims are gone.
struct PreemptDecision {
  JobId preemptor = 0;
  // A reclaim: the preemptor takes back its team's quota from other teams' borrowed jobs (else: by
  // priority). The server records it against `team`'s rate limit.
  bool reclaim = false;
  std::string team;
  std::vector<JobId> victims;  // by id
  Placement placement;         // where the preemptor goes (on resources the victims free)
  // Jobs already stopping (not victims: their stop was asked for before) whose resources the
  // placement also uses; the preemptor launches once these are gone too. Usually empty.
  std::vector<JobId> waits_for;
  // The attempts the preemptor's launch waits for: each victim's current attempt and each
  // stopping attempt of `waits_for`, so that the server need not look them up.
  std::vector<AttemptRef> launch_after;
};

// A pending job that cannot start yet, but will as soon as lower-priority jobs that are already
// stopping are gone: in this pass their resources (and what else `placement` uses) are held for it,
// rather than evicting anyone else. The job stays pending (its reason says what it waits for); the
// server need not act, a later pass places it. Reported so that every resource a pass hands out is
// accounted for.
struct HoldDecision {
  JobId job = 0;
  bool reclaim = false;          // it waits for other teams' stopping jobs to take back its quota
  std::vector<JobId> waits_for;  // stopping jobs, by id
  Placement placement;
};

struct PlaceDecision {
  JobId job = 0;
  Placement placement;  // num_nodes entries, rank 0..n-1
};

struct PassResult {
  std::vector<PlaceDecision> placements;     // in the order they were decided
  std::vector<PreemptDecision> preemptions;  // in the order they were decided
  std::vector<HoldDecision> holds;           // in the order they were decided
  // Every pending job not placed, by id: why it waits (for `berth show`) and the numbers behind
  // it. A preemptor is among them ("preempting lower-priority job 3; starts on n1 once it stops").
  Waiting waiting;
};

// Decides which pending jobs start now and where. Does not modify anything; the caller applies the
// result. A malformed request (num_nodes < 1, 1.5 GPUs) is not placed; its reason says why.
PassResult Schedule(const Snapshot& snapshot, const Config& config);

// Whether `job` could ever run on this cluster if it were empty: some set of num_nodes distinct
// nodes (schedulable or not) matching its pool, selector and container mounts has enough total
// CPUs, memory and devices of the type (for exclusive jobs: all within one value of the label).
// Returns Ok, or Infeasible with a message saying why: "unknown GPU type 'A100' (this cluster has:
// T4, V100)", "no node has 8 V100 GPUs (largest: 4 on n1)", "needs 2 nodes with V100:4; only 1 such
// node (n1)", "no node in pool 'research'", "no node matches node_selector gpu_gen=hopper", "no
// 'rack' domain has 2 nodes that fit (largest: 1 in r1)", "no nodes have joined the cluster"; for a
// gang with a required topology level (`topology_levels`: Config's), "no 'rack' has 16 nodes that
// fit (largest: 8 in rack r2)". A malformed request gives InvalidArgument ("invalid request:
// num_nodes must be at least 1").
Status CheckFeasible(const std::vector<NodeView>& nodes, const JobRequest& job,
                     const std::vector<std::string>& topology_levels = {});

// The nodes (schedulable or not) that could hold one rank of `job` if they were empty: in its pool,
// matching its selector and mounts, with enough total CPUs, memory and devices of the type. By
// name. For what the submitter is told about where the job may land (an unenforced limit).
std::vector<std::string> NodesThatCouldHold(const std::vector<NodeView>& nodes,
                                            const JobRequest& job);

// Nodes for a reservation of `count` GPUs of `type` (in `pool`, "" = any) over whole nodes: the
// fewest nodes whose GPUs of the type add up to `count`, none of `excluded`. With topology levels
// (Config::topology_levels), within one domain of the finest level that can hold them (the domain
// with the fewest GPUs of the type that is enough), else the next coarser level, else anywhere.
// Among candidates, nodes with more GPUs of the type first, then by name. Empty with *why set when
// the cluster cannot: "only 8 H100 GPUs on nodes free of other reservations in pool 'p' (16
// asked)".
std::vector<std::string> PickReservedNodes(const std::vector<NodeView>& nodes,
                                           const std::string& type, int count,
                                           const std::string& pool,
                                           const std::vector<std::string>& topology_levels,
                                           const std::vector<std::string>& excluded,
                                           std::string* why);

}  // namespace berth::sched
