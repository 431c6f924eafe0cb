// Schedule(): one pass from a snapshot to decisions. Each test is a small story; the arithmetic of
// what is free is spelled out between steps.
#include "sched/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "sched/pass.h"
#include "sched_testing.h"

namespace berth::sched {
namespace {

using testing::Apply;
using testing::CheckedPass;
using testing::CheckInvariants;
using ::testing::ElementsAre;
using testing::Finish;
using testing::FormatDecisions;
using testing::FormatPlacement;
using testing::Hold;
using ::testing::IsEmpty;
using testing::kGib;
using testing::MakeJob;
using testing::MakeNode;

// For stories about placement alone, where a higher-priority job would otherwise evict a lower one
// (preemption_test.cpp has those stories).
Config NoPreemption() {
  Config config;
  config.preemption = false;
  return config;
}

RunningJob Holding(JobId id, const std::string& node, std::vector<int> devices,
                   const std::string& type = "V100") {
  RunningJob job;
  job.id = id;
  job.per_node.gpu_type = type;
  job.per_node.gpu_milli = static_cast<MilliGpu>(devices.size()) * kMilliPerGpu;
  NodeGrant grant{node, 0, {}};
  for (int d : devices) grant.gpus.push_back({d, kMilliPerGpu});
  job.placement.push_back(grant);
  return job;
}

// The seed scenario (SkyPilot's job queue docs). Node n1 has 4 V100s; job 1 holds all four. Jobs
// 2 (V100:1), 3 (V100:1), 4 (V100:4) and 5 (V100:2) are submitted in that order.
TEST(ScheduleTest, SeedScenarioOneNodeFourV100) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Holding(1, "n1", {0, 1, 2, 3})), "");
  s.pending = {MakeJob(2, "V100:1"), MakeJob(3, "V100:1"), MakeJob(4, "V100:4"),
               MakeJob(5, "V100:2")};

  // While job 1 runs nothing is free, so everything waits.
  PassResult busy = CheckedPass(s);
  EXPECT_THAT(busy.placements, IsEmpty());
  EXPECT_EQ(busy.waiting.at(2),
            "waiting for resources: needs V100:1 on 1 node; no whole V100 free on any node");

  // Job 1 ends: 4 free. Job 2 takes device 0 (3 left), job 3 device 1 (2 left); job 4 needs 4 and
  // waits; job 5 backfills onto devices 2 and 3 (0 left).
  ASSERT_TRUE(Finish(s, 1));
  PassResult pass = CheckedPass(s);
  EXPECT_THAT(FormatDecisions(pass),
              ElementsAre("place 2 on n1 gpus=0", "place 3 on n1 gpus=1", "place 5 on n1 gpus=2,3",
                          "wait 4: waiting for resources: needs V100:4 on 1 node; most free on one "
                          "node: 2 V100 (n1)"));

  // Jobs 2, 3 and 5 start; once all three are done the four devices are free again for job 4.
  Apply(s, pass);
  EXPECT_THAT(CheckedPass(s).placements, IsEmpty());
  Finish(s, 2);
  Finish(s, 3);
  EXPECT_THAT(CheckedPass(s).placements, IsEmpty());  // 2 free of the 4 job 4 needs
  Finish(s, 5);
  EXPECT_THAT(FormatDecisions(CheckedPass(s)), ElementsAre("place 4 on n1 gpus=0,1,2,3"));
}

// Node n1 has 2 V100s and 4 CPUs. Three V100:1 jobs and two 3-CPU jobs arrive in one pass. The pass
// must count what it has already handed out: only two GPU jobs and one 3-CPU job fit.
TEST(ScheduleTest, NoOversubscriptionWithinAPass) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 4, 16, "V100", 2)};
  for (JobId id : {1, 2, 3}) {
    s.pending.push_back(MakeJob(id, "V100:1"));
    s.pending.back().per_node.cpus = 0;
  }
  for (JobId id : {4, 5}) {
    s.pending.push_back(MakeJob(id));
    s.pending.back().per_node.cpus = 3000;
  }
  PassResult pass = CheckedPass(s);
  EXPECT_THAT(FormatDecisions(pass),
              ElementsAre("place 1 on n1 gpus=0", "place 2 on n1 gpus=1", "place 4 on n1",
                          "wait 3: waiting for resources: needs V100:1 on 1 node; no whole V100 "
                          "free on any node",
                          "wait 5: waiting for resources: needs 3 CPUs on 1 node; most free on one "
                          "node: 1 CPU (n1)"));
}

// Node n1 has 4 V100s. Job 1 (priority 0) was submitted before job 2 (priority 10); both want all
// four. Priority wins over submission order; among equal priorities the older job goes first.
TEST(ScheduleTest, PriorityBeatsSubmissionOrder) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4)};
  s.pending = {MakeJob(3, "V100:4", 10), MakeJob(1, "V100:4", 0), MakeJob(2, "V100:4", 10)};
  PassResult pass = CheckedPass(s);
  ASSERT_EQ(pass.placements.size(), 1u);
  EXPECT_EQ(pass.placements[0].job, 2);  // priority 10, and older than job 3
  EXPECT_EQ(pass.waiting.size(), 2u);
}

// Node n1 has 4 V100s, 2 of them held by job 1. Job 2 (first in line) wants 4 and cannot start;
// job 3 wants 1 and fits. Job 2 must not hold job 3 back (backfill). (Without preemption: with it,
// job 2 would evict job 1.)
TEST(ScheduleTest, BackfillsPastAJobThatDoesNotFit) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Holding(1, "n1", {0, 1})), "");
  s.pending = {MakeJob(2, "V100:4", 5), MakeJob(3, "V100:1")};
  PassResult pass = CheckedPass(s, NoPreemption());
  EXPECT_THAT(FormatDecisions(pass), ElementsAre("place 3 on n1 gpus=2",
                                                 "wait 2: waiting for resources: needs V100:4 on "
                                                 "1 node; most free on one node: 2 V100 (n1)"));
}

// n1 has 4 V100s of which job 1 holds one (3 free); n2 has 4 free. A V100:1 job goes to n1, leaving
// 2 there rather than 3 on n2, so that n2 stays whole for the V100:4 job behind it.
TEST(ScheduleTest, BestFitKeepsWholeNodesForBigJobs) {
  Snapshot s;
  s.nodes = {MakeNode("n2", 8, 32, "V100", 4), MakeNode("n1", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Holding(1, "n1", {0})), "");
  s.pending = {MakeJob(2, "V100:1"), MakeJob(3, "V100:4")};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 2 on n1 gpus=1", "place 3 on n2 gpus=0,1,2,3"));
}

// Three identical empty nodes listed as c, a, b. Ties on GPUs, CPUs and memory fall to the node
// name, so the same snapshot always gives the same answer whatever order the server lists nodes in.
TEST(ScheduleTest, TiesBreakByNodeName) {
  Snapshot s;
  s.nodes = {MakeNode("c", 8, 32, "V100", 4), MakeNode("a", 8, 32, "V100", 4),
             MakeNode("b", 8, 32, "V100", 4)};
  s.pending = {MakeJob(1, "V100:4"), MakeJob(2, "V100:4")};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 1 on a gpus=0,1,2,3", "place 2 on b gpus=0,1,2,3"));
  // After GPUs, fewer CPUs left wins: on two GPU-less nodes, the 4-CPU one is the tighter fit.
  Snapshot cpu;
  cpu.nodes = {MakeNode("big", 16, 32), MakeNode("small", 4, 32)};
  cpu.pending = {MakeJob(1)};
  EXPECT_THAT(FormatDecisions(CheckedPass(cpu)), ElementsAre("place 1 on small"));
}

// A CPU-only job on a cluster with a GPU node (g1, 64 CPUs) and a CPU node (c1, 8 CPUs): it goes to
// c1 even though g1 would have more CPUs left over, because GPU nodes are for GPU jobs.
TEST(ScheduleTest, CpuJobsStayOffGpuNodes) {
  Snapshot s;
  s.nodes = {MakeNode("g1", 64, 256, "A100", 8), MakeNode("c1", 8, 32)};
  s.pending = {MakeJob(1)};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)), ElementsAre("place 1 on c1"));
}

// n1 has 2 T4s. Two T4:0.5 jobs share device 0; a third goes to device 1, because device 0 is full.
TEST(ScheduleTest, FractionalGpusShareADevice) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "T4", 2)};
  s.pending = {MakeJob(1, "T4:0.5"), MakeJob(2, "T4:0.5"), MakeJob(3, "T4:0.5")};
  PassResult pass = CheckedPass(s);
  EXPECT_THAT(FormatDecisions(pass),
              ElementsAre("place 1 on n1 gpus=0:0.5", "place 2 on n1 gpus=0:0.5",
                          "place 3 on n1 gpus=1:0.5"));
  // Device 0 is now full and device 1 half used: 1.5 GPUs are in use, so a whole T4 cannot fit.
  Apply(s, pass);
  s.pending = {MakeJob(4, "T4:1")};
  EXPECT_EQ(CheckedPass(s).waiting.at(4),
            "waiting for resources: needs T4:1 on 1 node; no whole T4 free on any node");
}

// n1 has 3 T4s with 0.25, 0.75 and 1 free. A T4:0.25 share goes to device 0 (the most used device
// it fits on), and a T4:0.5 to device 1, keeping device 2 whole.
TEST(ScheduleTest, FractionalGpusPackOntoTheMostUsedDevice) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "T4", 3)};
  s.nodes[0].gpus[0].free = 250;
  s.nodes[0].gpus[1].free = 750;
  s.pending = {MakeJob(1, "T4:0.25"), MakeJob(2, "T4:0.5")};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 1 on n1 gpus=0:0.25", "place 2 on n1 gpus=1:0.5"));
}

// Whole-GPU requests skip partly used devices and take the lowest indices of the wholly free ones.
TEST(ScheduleTest, WholeGpusTakeLowestFullyFreeDevices) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4)};
  s.nodes[0].gpus[1].free = 500;  // someone holds half of device 1
  s.pending = {MakeJob(1, "V100:2")};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)), ElementsAre("place 1 on n1 gpus=0,2"));
}

// n1 has 8 CPUs and 32G. A 16-CPU job and a 64G job wait, each reason naming its scarce resource;
// a 6-CPU 16G job fits, and then a 4-CPU job does not (8 - 6 = 2 CPUs left).
TEST(ScheduleTest, CpuAndMemoryLimits) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32)};
  s.pending = {MakeJob(1), MakeJob(2), MakeJob(3), MakeJob(4)};
  s.pending[0].per_node.cpus = 16000;
  s.pending[1].per_node.memory = 64 * kGib;
  s.pending[2].per_node.cpus = 6000;
  s.pending[2].per_node.memory = 16 * kGib;
  s.pending[3].per_node.cpus = 4000;
  PassResult pass = CheckedPass(s);
  EXPECT_THAT(FormatDecisions(pass),
              ElementsAre("place 3 on n1",
                          "wait 1: waiting for resources: needs 16 CPUs on 1 node; most free on "
                          "one node: 8 CPUs (n1)",
                          "wait 2: waiting for resources: needs 64G memory on 1 node; most free on "
                          "one node: 32G (n1)",
                          "wait 4: waiting for resources: needs 4 CPUs on 1 node; most free on one "
                          "node: 2 CPUs (n1)"));
}

// A node with 2 free V100s and too few CPUs, and one with CPUs but no free V100: each resource is
// free somewhere, but not together.
TEST(ScheduleTest, ReasonWhenResourcesAreFreeOnlyApart) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 1, 32, "V100", 2), MakeNode("n2", 8, 32, "V100", 2)};
  ASSERT_EQ(Hold(s, Holding(1, "n2", {0, 1})), "");
  s.pending = {MakeJob(2, "V100:1")};
  s.pending[0].per_node.cpus = 4000;
  EXPECT_EQ(CheckedPass(s).waiting.at(2),
            "waiting for resources: needs V100:1, 4 CPUs on 1 node; no node has all of it free at "
            "once");
}

// Nodes: a1 in pool "research" with label gpu_gen=hopper, b1 in the default pool. A research job
// lands on a1 even though b1 fits too; a job selecting gpu_gen=hopper lands on a1 as well; a job
// selecting gpu_gen=blackwell and one for pool "prod" wait with reasons.
TEST(ScheduleTest, PoolAndSelectorFilterNodes) {
  Snapshot s;
  s.nodes = {MakeNode("a1", 8, 32, "H100", 8), MakeNode("b1", 8, 32, "H100", 8)};
  s.nodes[0].pool = "research";
  s.nodes[0].labels["gpu_gen"] = "hopper";
  s.pending = {MakeJob(1, "H100:1"), MakeJob(2, "H100:1"), MakeJob(3, "H100:1"),
               MakeJob(4, "H100:1")};
  s.pending[0].pool = "research";
  s.pending[1].node_selector["gpu_gen"] = "hopper";
  s.pending[2].node_selector["gpu_gen"] = "blackwell";
  s.pending[3].pool = "prod";
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 1 on a1 gpus=0", "place 2 on a1 gpus=1",
                          "wait 3: waiting: no node matches node_selector gpu_gen=blackwell",
                          "wait 4: waiting: no node in pool 'prod'"));
}

// berth.node places a job on the node of that name (b1, though a1 comes first), whatever labels
// say; a name no node has waits saying so.
TEST(ScheduleTest, NodeNameSelectorPlacesOnThatNode) {
  Snapshot s;
  s.nodes = {MakeNode("a1", 8, 32, "H100", 8), MakeNode("b1", 8, 32, "H100", 8)};
  s.nodes[0].labels[kNodeNameSelector] = "b1";
  s.pending = {MakeJob(1, "H100:1"), MakeJob(2, "H100:1")};
  s.pending[0].node_selector[kNodeNameSelector] = "b1";
  s.pending[1].node_selector[kNodeNameSelector] = "c1";
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 1 on b1 gpus=0",
                          "wait 2: waiting: no node matches node_selector berth.node=c1"));
}

// A container job mounting host paths goes to a node that lets containers mount them (b1: /data),
// not the first that fits (a1: /scratch only); two jobs alike but for their mounts are not taken
// for one shape; a mount no node allows waits saying so.
TEST(ScheduleTest, ContainerMountsPickNodesThatAllowThem) {
  Snapshot s;
  s.nodes = {MakeNode("a1", 8, 32, "H100", 8), MakeNode("b1", 8, 32, "H100", 8)};
  s.nodes[0].container_mounts = {"/scratch"};
  s.nodes[1].container_mounts = {"/data", "/models"};
  s.pending = {MakeJob(1, "H100:1"), MakeJob(2, "H100:1"), MakeJob(3, "H100:1"),
               MakeJob(4, "H100:1")};
  s.pending[0].container_mounts = {"/data/imagenet"};
  s.pending[1].container_mounts = {"/scratch"};
  s.pending[2].container_mounts = {"/data", "/models/llama"};
  s.pending[3].container_mounts = {"/database"};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 1 on b1 gpus=0", "place 2 on a1 gpus=0", "place 3 on b1 gpus=1",
                          "wait 4: waiting: no node allows container.mounts /database"));
}

// n1 and n2 each have 4 V100s; job 1 holds one on n1. A 2-node V100:4 gang cannot start (n1 has
// only 3 free), and it must not take n2 alone: a V100:4 job behind it gets n2.
TEST(ScheduleTest, GangIsAllOrNothing) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("n2", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Holding(1, "n1", {3})), "");
  s.pending = {MakeJob(2, "V100:4"), MakeJob(3, "V100:4")};
  s.pending[0].num_nodes = 2;
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 3 on n2 gpus=0,1,2,3",
                          "wait 2: waiting for resources: needs V100:4 on each of 2 nodes; only 1 "
                          "node has that free (n2)"));
}

// Three nodes with 4 V100s; n2 has 2 in use. A 2-node V100:2 gang gets two distinct nodes, best fit
// first: rank 0 on n2 (2 free -> 0 left), rank 1 on n1 (4 -> 2 left, tied with n3, n1 by name).
TEST(ScheduleTest, GangGetsDistinctNodesInBestFitOrder) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("n2", 8, 32, "V100", 4),
             MakeNode("n3", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Holding(1, "n2", {0, 1})), "");
  s.pending = {MakeJob(2, "V100:2")};
  s.pending[0].num_nodes = 2;
  PassResult pass = CheckedPass(s);
  ASSERT_EQ(pass.placements.size(), 1u);
  EXPECT_EQ(FormatPlacement(pass.placements[0].placement), "n2 gpus=2,3 and n1 gpus=0,1");
  EXPECT_EQ(pass.placements[0].placement[1].rank, 1);
}

// One node with 4 V100s, all busy, and 1000 queued V100:8 jobs plus 1000 queued V100:4 jobs. Each
// shape is tried once: every job of a shape gets the first one's reason, and a CPU job at the back
// of the queue is still placed, exactly as if the failing jobs were not there.
TEST(ScheduleTest, FailedShapesAreNotRetried) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("c1", 4, 8)};
  ASSERT_EQ(Hold(s, Holding(1, "n1", {0, 1, 2, 3})), "");
  s.pending.push_back(MakeJob(5000));  // a CPU job
  PassResult alone = CheckedPass(s);
  for (JobId id = 10; id < 2010; ++id)
    s.pending.push_back(MakeJob(id, id < 1010 ? "V100:8" : "V100:4"));
  PassResult crowded = CheckedPass(s);

  EXPECT_EQ(crowded.placements.size(), alone.placements.size());
  EXPECT_EQ(FormatPlacement(crowded.placements[0].placement),
            FormatPlacement(alone.placements[0].placement));
  ASSERT_EQ(crowded.waiting.size(), 2000u);
  for (JobId id = 10; id < 1010; ++id) {
    EXPECT_EQ(crowded.waiting.at(id), crowded.waiting.at(10));
  }
  EXPECT_EQ(crowded.waiting.at(10),
            "waiting for resources: needs V100:8 on 1 node; no whole V100 free on any node");
  EXPECT_EQ(crowded.waiting.at(2009), crowded.waiting.at(1010));
}

// n1 is draining and n2 is in another pool. A job for n1's pool waits: nothing new goes to a
// draining node. It is still feasible, because the node will come back.
TEST(ScheduleTest, DrainingNodeTakesNoNewJobsButCountsForFeasibility) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("n2", 8, 32, "V100", 4)};
  s.nodes[0].pool = "research";
  s.nodes[0].schedulable = false;
  s.pending = {MakeJob(1, "V100:1")};
  s.pending[0].pool = "research";
  PassResult pass = CheckedPass(s);
  EXPECT_THAT(pass.placements, IsEmpty());
  EXPECT_EQ(pass.waiting.at(1),
            "waiting: no schedulable node in pool 'research' (its 1 node is draining or down)");
  EXPECT_TRUE(CheckFeasible(s.nodes, s.pending[0]).ok());
}

// Racks r1 = {n1, n2} and r2 = {n3, n4}; n5 has no rack label. Job 1 runs on n3. An exclusive-rack
// 2-node job takes rack r1 (r2 is in use); a second one waits, and an ordinary job may not enter r1
// while it is held, so it lands on n4 (in r2, which only job 1 holds, not exclusively). (Without
// preemption: with it, job 3 would evict job 1 from r2; exclusive_preemption.scn tells that.)
TEST(ScheduleTest, ExclusiveJobsHoldAWholeDomain) {
  Snapshot s;
  for (const char* name : {"n1", "n2", "n3", "n4", "n5"})
    s.nodes.push_back(MakeNode(name, 8, 32, "V100", 4));
  s.nodes[0].labels["rack"] = "r1";
  s.nodes[1].labels["rack"] = "r1";
  s.nodes[2].labels["rack"] = "r2";
  s.nodes[3].labels["rack"] = "r2";
  s.nodes[4].gpus.clear();  // n5 is a CPU node, so the ordinary GPU job below has to pick a rack
  ASSERT_EQ(Hold(s, Holding(1, "n3", {0})), "");
  s.pending = {MakeJob(2, "V100:1", 5), MakeJob(3, "V100:1", 5), MakeJob(4, "V100:4")};
  for (int i : {0, 1}) {
    s.pending[i].num_nodes = 2;
    s.pending[i].exclusive = "rack";
  }
  PassResult pass = CheckedPass(s, NoPreemption());
  EXPECT_THAT(
      FormatDecisions(pass),
      ElementsAre("place 2 on n1 gpus=0 and n2 gpus=0", "place 4 on n4 gpus=0,1,2,3",
                  "wait 3: waiting for a free 'rack' domain: every one is in use (r1, r2)"));

  // While job 2 runs, r1 stays closed to everyone.
  Apply(s, pass);
  s.pending = {MakeJob(5, "V100:1")};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)), ElementsAre("place 5 on n3 gpus=1"));
}

// Many random passes over random clusters: whatever gets placed, the invariants hold (no node
// oversubscribed, gangs on distinct nodes, pools respected, every job placed or waiting). The seed
// is fixed so a failure reproduces.
TEST(ScheduleTest, RandomPassesKeepInvariants) {
  std::mt19937 rng(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::string> gpus = {"",       "V100:1",  "V100:2", "V100:4",
                                         "T4:0.5", "T4:0.25", "T4:1"};
  for (int round = 0; round < 200; ++round) {
    Snapshot s;
    const int nodes = pick(1, 6);
    for (int n = 0; n < nodes; ++n) {
      s.nodes.push_back(MakeNode("n" + std::to_string(n), pick(1, 16), pick(1, 64),
                                 pick(0, 1) ? "V100" : "T4", pick(0, 4)));
      s.nodes.back().pool = pick(0, 3) == 0 ? "p" : "";
      s.nodes.back().schedulable = pick(0, 5) != 0;
      s.nodes.back().labels["rack"] = "r" + std::to_string(pick(0, 2));
    }
    JobId next = 1;
    for (int step = 0; step < 4; ++step) {
      for (int j = pick(0, 12); j > 0; --j) {
        JobRequest job = MakeJob(next++, gpus[static_cast<size_t>(pick(0, 6))], pick(0, 2));
        job.per_node.cpus = pick(0, 4) * 500;
        job.per_node.memory = pick(0, 8) * kGib;
        job.num_nodes = pick(0, 4) == 0 ? 2 : 1;
        job.pool = pick(0, 4) == 0 ? "p" : "";
        job.exclusive = pick(0, 6) == 0 ? "rack" : "";
        s.pending.push_back(job);
      }
      PassResult pass = CheckedPass(s);
      Apply(s, pass);
      for (int f = pick(0, 3); f > 0 && !s.running.empty(); --f) {
        Finish(s,
               s.running[static_cast<size_t>(pick(0, static_cast<int>(s.running.size()) - 1))]->id);
      }
    }
  }
}

std::string Dump(const Snapshot& s, const PassResult& r) {
  std::string out = "\nnow " + std::to_string(s.now) + "\n";
  for (const NodeView& n : s.nodes) {
    out += testing::FormatNode(n) + " pool=" + n.pool + " labels=";
    for (auto& [k, v] : n.labels) out += k + "=" + v + ",";
    out += "\n";
  }
  for (const auto& j_view : s.running) {
    const RunningJob& j = *j_view;
    out += "running " + std::to_string(j.id) + " prio=" + std::to_string(j.priority) +
           " excl=" + j.exclusive + " cpus=" + std::to_string(j.per_node.cpus) +
           " mem=" + std::to_string(j.per_node.memory) + (j.stopping ? " stopping" : "") +
           " started=" + std::to_string(j.started_at) + " on " + FormatPlacement(j.placement) +
           "\n";
  }
  for (const JobRequest& j : s.pending) {
    out += "pending " + std::to_string(j.id) + " prio=" + std::to_string(j.priority) +
           " gpus=" + j.per_node.gpu_type + ":" + std::to_string(j.per_node.gpu_milli) +
           " cpus=" + std::to_string(j.per_node.cpus) +
           " mem=" + std::to_string(j.per_node.memory) + " nodes=" + std::to_string(j.num_nodes) +
           " pool=" + j.pool + " excl=" + j.exclusive +
           " sel=" + (j.node_selector.empty() ? "" : "gen=a") + "\n";
  }
  for (const std::string& line : FormatDecisions(r)) out += line + "\n";
  return out;
}

// The node index changes how a pass finds nodes, never what it decides. Random clusters (pools,
// labels, two GPU types, draining nodes, fractional shares, gangs, exclusive jobs, priorities,
// time limits, starving and stopping jobs) go through passes in which every search scans all nodes,
// and passes in which every search uses the index: the decisions and reasons must be the same.
TEST(ScheduleTest, IndexAndScanDecideAlike) {
  std::mt19937 rng(99);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::string> gpus = {"",        "V100:1", "V100:2", "V100:4", "T4:0.5",
                                         "T4:0.25", "T4:1",   "T4:2",   "A100:1"};
  internal::Tuning scan;
  scan.index_after_searches = std::numeric_limits<int>::max();
  internal::Tuning index;
  index.index_after_searches = 0;
  internal::Tuning fresh_queues;
  fresh_queues.reuse_preemption_queues = false;
  internal::Tuning exact_queues;
  exact_queues.reuse_preemption_queues = false;
  exact_queues.bound_preemption_queues = false;
  int decisions = 0;
  for (int round = 0; round < 150; ++round) {
    Snapshot s;
    for (int n = pick(1, 24); n > 0; --n) {
      s.nodes.push_back(MakeNode("n" + std::to_string(pick(0, 99)) + "_" + std::to_string(n),
                                 pick(1, 16), pick(1, 64), pick(0, 1) ? "V100" : "T4", pick(0, 4)));
      if (pick(0, 3) == 0) testing::AddGpus(s.nodes.back(), "A100", pick(1, 2));
      s.nodes.back().pool = pick(0, 3) == 0 ? "p" : "";
      s.nodes.back().schedulable = pick(0, 6) != 0;
      s.nodes.back().labels["rack"] = "r" + std::to_string(pick(0, 3));
      if (pick(0, 1)) s.nodes.back().labels["gen"] = pick(0, 1) ? "a" : "b";
    }
    Config config;
    config.preemption = pick(0, 3) != 0;
    config.starvation_bound = 50;
    JobId next = 1;
    for (int step = 0; step < 5; ++step) {
      s.now += pick(0, 100);
      for (int j = pick(0, 30); j > 0; --j) {
        JobRequest job = MakeJob(next++, gpus[static_cast<size_t>(pick(0, 8))], pick(0, 3));
        job.per_node.cpus = pick(0, 4) * 500;
        job.per_node.memory = pick(0, 8) * kGib;
        job.num_nodes = pick(0, 4) == 0 ? pick(2, 3) : 1;
        job.pool = pick(0, 5) == 0 ? "p" : "";
        if (pick(0, 6) == 0) job.node_selector["gen"] = "a";
        job.exclusive = pick(0, 6) == 0 ? "rack" : "";
        job.submitted_at = s.now - pick(0, 120);
        if (pick(0, 1)) job.time_limit = pick(1, 200);
        s.pending.push_back(job);
      }
      PassResult scanned = internal::Schedule(s, config, scan);
      PassResult indexed = internal::Schedule(s, config, index);
      ASSERT_EQ(FormatDecisions(scanned), FormatDecisions(indexed)) << "round " << round;
      PassResult fresh = internal::Schedule(s, config, fresh_queues);
      ASSERT_EQ(FormatDecisions(scanned), FormatDecisions(fresh)) << "round " << round;
      PassResult exact = internal::Schedule(s, config, exact_queues);
      ASSERT_EQ(FormatDecisions(scanned), FormatDecisions(exact)) << "round " << round;
      EXPECT_THAT(CheckInvariants(s, scanned), IsEmpty()) << "round " << round << Dump(s, scanned);
      decisions += static_cast<int>(scanned.placements.size() + scanned.preemptions.size());
      Apply(s, scanned, pick(0, 1) ? testing::PreemptMode::kInstant : testing::PreemptMode::kStop);
      for (int f = pick(0, 4); f > 0 && !s.running.empty(); --f) {
        Finish(s,
               s.running[static_cast<size_t>(pick(0, static_cast<int>(s.running.size()) - 1))]->id);
      }
    }
  }
  EXPECT_GT(decisions, 1000);  // the rounds did decide things
}

}  // namespace
}  // namespace berth::sched

namespace berth::sched {
namespace {

// Preemption candidates are kept in queues that serve every job of a shape and priority in a pass,
// updated as nodes change (preemption.cpp). A cluster of 40 full nodes (8 GPUs, jobs of 1-8 GPUs,
// priority 0) and 400 jobs of priorities 0-3 that evict their way in: the decisions must be those
// of a fresh queue per job, and of queues that evaluate every node exactly.
TEST(ScheduleTest, PreemptionQueuesDecideLikeFullScans) {
  std::mt19937 rng(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  internal::Tuning fresh;
  fresh.reuse_preemption_queues = false;
  internal::Tuning exact = fresh;
  exact.bound_preemption_queues = false;
  for (int round = 0; round < 30; ++round) {
    Snapshot s;
    JobId next = 1;
    for (int n = 0; n < 40; ++n) {
      s.nodes.push_back(
          MakeNode("n" + std::to_string(100 + n), 64, 512, n % 3 ? "H100" : "A100", 8));
      s.nodes.back().labels["rack"] = "r" + std::to_string(n / 4);
      for (int used = 0; used < 8;) {
        int size = 1 << pick(0, 3);
        while (used + size > 8) size /= 2;
        RunningJob r;
        r.id = next++;
        r.per_node.gpu_type = s.nodes.back().gpus[0].type;
        r.per_node.gpu_milli = size * kMilliPerGpu;
        r.started_at = pick(0, 100000);
        r.stopping = pick(0, 30) == 0;
        NodeGrant g{s.nodes.back().name, 0, {}};
        for (int d = used; d < used + size; ++d) g.gpus.push_back({d, kMilliPerGpu});
        r.placement.push_back(g);
        ASSERT_EQ(Hold(s, r), "");
        used += size;
      }
    }
    for (int j = 0; j < 400; ++j) {
      JobRequest job = MakeJob(
          1000 + j, std::string(pick(0, 2) ? "H100:" : "A100:") + std::to_string(1 << pick(0, 3)),
          pick(0, 3));
      if (pick(0, 9) == 0) job.num_nodes = pick(2, 3);
      if (pick(0, 19) == 0) job.exclusive = "rack";
      s.pending.push_back(job);
    }
    const PassResult reused = internal::Schedule(s, Config{}, internal::Tuning{});
    EXPECT_GT(reused.preemptions.size(), 30u);
    EXPECT_THAT(CheckInvariants(s, reused), IsEmpty());
    EXPECT_EQ(FormatDecisions(reused), FormatDecisions(internal::Schedule(s, Config{}, fresh)))
        << "round " << round;
    EXPECT_EQ(FormatDecisions(reused), FormatDecisions(internal::Schedule(s, Config{}, exact)))
        << "round " << round;
  }
}

}  // namespace
}  // namespace berth::sched
