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

// How Apply() carries out a preemption.
enum class PreemptMode {
  // At once, as if the victims stopped between two passes: the victims (and the stopping jobs the
  // preemptor waits for) give their resources back and return to the queue, and the preemptor
  // starts on its placement.
  kInstant,
  // As the server starts it: the victims become stopping (holding their resources), and the
  // preemptor stays pending; Finish() the victims to let it start in a later pass.
  kStop,
};

// What the server does with a pass: each placed job leaves `pending`, joins `running` with its
// placement (started at snapshot.now), and its resources are taken from the nodes' free amounts;
// preemptions are carried out as `mode` says. Returns the ids of the jobs put back in the queue
// (as requests rebuilt from what they ran with, submitted now).
std::vector<JobId> Apply(Snapshot& snapshot, const PassResult& result,
                         PreemptMode mode = PreemptMode::kInstant);
// Puts a running job's resources back and forgets it. Returns false when no such job runs.
bool Finish(Snapshot& snapshot, JobId id);
// Takes a running job's resources from the nodes (for jobs a test declares as already running).
// Returns "" or what would be oversubscribed.
std::string Hold(Snapshot& snapshot, const RunningJob& job);

// "n1 gpus=0,1" / "n1 gpus=0:0.5" / "n3"; gang nodes in rank order joined by " and ".
std::string FormatPlacement(const Placement& placement);
// One line per decision: placements, preemptions and holds, each in decision order, then waiting
// jobs by id: "place 2 on n1 gpus=0", "preempt 9 victims=1,2 on n1 gpus=0,1" (with " waits_for=5"
// when it also waits for stopping jobs), "hold 9 on n1 gpus=0,1 waits_for=5",
// "wait 4: waiting for resources: ...".
std::vector<std::string> FormatDecisions(const PassResult& result);
// "n1: cpus 7.5/8 free, mem 32G/32G free, V100 [0 0 1 0.5]" (draining nodes say so).
std::string FormatNode(const NodeView& node);

// Checks a pass against the rules that must hold whatever the policy: every pending job is placed
// or waiting (not both; a preemptor waits); a placement has num_nodes distinct schedulable nodes in
// the job's pool and selector and the GPUs it asked for; nothing on any node is oversubscribed
// after all placements while the victims still hold their resources (nobody else got them), nor
// once the victims are gone and the preemptors have taken theirs; exclusive jobs sit in one label
// domain shared with no other job. Preemptions: victims are running, not stopping, of strictly
// lower priority, each evicted once; waits_for are stopping jobs of lower priority; and every
// victim is needed — the preemptor's placement uses its resources, or it holds (or runs in) a
// domain the preemptor enters. Returns one line per violation.
std::vector<std::string> CheckInvariants(const Snapshot& snapshot, const PassResult& result);

// Runs a pass, expects CheckInvariants to find nothing (a gtest failure otherwise), returns it.
PassResult CheckedPass(const Snapshot& snapshot, const Config& config = Config{});

}  // namespace berth::sched::testing
