// Test helpers for the scheduler: builders for nodes and jobs, a tiny "server" that applies a
// pass's decisions to a snapshot the way the real one would, the text form of decisions that the
// unit tests and the golden scenarios compare, and an invariant checker for every pass.
//
// Shared by scheduler_test.cpp, feasibility_test.cpp and the scenario runner. Pure; not
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/quantity.h"
#include "sched/cluster.h"
#include "sched/scheduler.h"

namespace berth::sched::testing {

constexpr Mib kGib = kMibPerGib;

// A node with whole `cpus`, `memory_gib` GiB and `gpus` devices of `gpu_type` (indices 0..gpus-1),
// everything free.
NodeView MakeNode(const std::string& name, int cpus, int memory_gib,
                  const std::string& gpu_type = "", int gpus = 0);
// Appends `count` free devices of `type`, numbered after the node's last device.
void AddGpus(NodeView& node, const std::string& type, int count);

// A one-node job asking for `gpus` ("V100:4", "T4:0.5", "" for none) and the default half CPU.
JobRequest MakeJob(JobId id, const std::string& gpus = "", int priority = 0);
// Sets a request's GPUs from "V100:4" / "T4:0.5" / "". Aborts the test binary on bad text.
void SetGpus(ResourceRequest& request, const std::string& gpus);

NodeView& FindNode(Snapshot& snapshot, const std::string& name);

// What the server does with a pass: each placed job leaves `pending`, joins `running` with its
// placement, and its resources are taken from the nodes' free amounts.
void Apply(Snapshot& snapshot, const PassResult& result);
// Puts a running job's resources back and forgets it. Returns false when no such job runs.
bool Finish(Snapshot& snapshot, JobId id);
// Takes a running job's resources from the nodes (for jobs a test declares as already running).
// Returns "" or what would be oversubscribed.
std::string Hold(Snapshot& snapshot, const RunningJob& job);

// "n1 gpus=0,1" / "n1 gpus=0:0.5" / "n3"; gang nodes in rank order joined by " and ".
std::string FormatPlacement(const Placement& placement);
// One line per decision, placements in decision order then waiting jobs by id:
// "place 2 on n1 gpus=0", "wait 4: waiting for resources: ...".
std::vector<std::string> FormatDecisions(const PassResult& result);
// "n1: cpus 7.5/8 free, mem 32G/32G free, V100 [0 0 1 0.5]" (draining nodes say so).
std::string FormatNode(const NodeView& node);

// Checks a pass against the rules that must hold whatever the policy: every pending job is placed
// or waiting (not both); a placement has num_nodes distinct schedulable nodes in the job's pool and
// selector, the GPUs it asked for, and nothing on any node is oversubscribed after all placements;
// exclusive jobs sit in one label domain shared with no other job. Returns one line per violation.
std::vector<std::string> CheckInvariants(const Snapshot& snapshot, const PassResult& result);

}  // namespace berth::sched::testing
