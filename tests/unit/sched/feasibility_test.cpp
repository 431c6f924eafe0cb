// CheckFeasible(): "never" as opposed to "not now". The cluster in most stories below:
//   n1: 8 CPUs, 32G, 4 V100 (pool "", labels rack=r1)
//   n2: 16 CPUs, 64G, 2 T4  (pool "", labels rack=r1, gpu_gen=turing)
//   n3: 8 CPUs, 32G, 4 V100 (pool "research", labels rack=r2), draining
// Usage and schedulability do not matter: a job that fits a busy or draining node is feasible.
#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_testing.h"

namespace berth::sched {
namespace {

using testing::Hold;
using testing::kGib;
using testing::MakeJob;
using testing::MakeNode;

std::vector<NodeView> Cluster() {
  std::vector<NodeView> nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("n2", 16, 64, "T4", 2),
                                 MakeNode("n3", 8, 32, "V100", 4)};
  nodes[0].labels["rack"] = "r1";
  nodes[1].labels["rack"] = "r1";
  nodes[1].labels["gpu_gen"] = "turing";
  nodes[2].labels["rack"] = "r2";
  nodes[2].pool = "research";
  nodes[2].schedulable = false;
  return nodes;
}

// The message of an infeasible verdict, or "ok".
std::string Verdict(const JobRequest& job, const std::vector<NodeView>& nodes = Cluster()) {
  Status s = CheckFeasible(nodes, job);
  if (s.ok()) return "ok";
  EXPECT_EQ(s.code(), Code::kInfeasible) << s.message();
  return s.message();
}

TEST(CheckFeasibleTest, JobsThatFitSomeNodeAreFeasible) {
  EXPECT_EQ(Verdict(MakeJob(1, "V100:4")), "ok");
  EXPECT_EQ(Verdict(MakeJob(1, "T4:0.5")), "ok");
  EXPECT_EQ(Verdict(MakeJob(1)), "ok");
}

// n1 and n3 are completely busy (and n3 drains): still feasible, because they will free up.
TEST(CheckFeasibleTest, IgnoresUsageAndDraining) {
  Snapshot s;
  s.nodes = Cluster();
  RunningJob hog;
  hog.id = 1;
  hog.per_node.cpus = 8000;
  hog.per_node.gpu_type = "V100";
  hog.per_node.gpu_milli = 4000;
  hog.placement = {{"n1", 0, {{0, 1000}, {1, 1000}, {2, 1000}, {3, 1000}}}};
  ASSERT_EQ(Hold(s, hog), "");
  JobRequest job = MakeJob(2, "V100:4");
  job.per_node.cpus = 8000;
  EXPECT_EQ(Verdict(job, s.nodes), "ok");
  job.pool = "research";  // only n3, which is draining
  EXPECT_EQ(Verdict(job, s.nodes), "ok");
}

TEST(CheckFeasibleTest, UnknownGpuTypeListsTheKnownOnes) {
  EXPECT_EQ(Verdict(MakeJob(1, "A100:1")), "unknown GPU type 'A100' (this cluster has: T4, V100)");
  std::vector<NodeView> cpu_only = {MakeNode("c1", 8, 32)};
  EXPECT_EQ(Verdict(MakeJob(1, "A100:1"), cpu_only),
            "unknown GPU type 'A100' (this cluster has no GPUs)");
}

TEST(CheckFeasibleTest, TooManyGpusNamesTheLargestNode) {
  EXPECT_EQ(Verdict(MakeJob(1, "V100:8")), "no node has 8 V100 GPUs (largest: 4 on n1)");
  EXPECT_EQ(Verdict(MakeJob(1, "T4:4")), "no node has 4 T4 GPUs (largest: 2 on n2)");
}

TEST(CheckFeasibleTest, CpusAndMemory) {
  JobRequest cpus = MakeJob(1);
  cpus.per_node.cpus = 64000;
  EXPECT_EQ(Verdict(cpus), "no node has 64 CPUs (largest: 16 on n2)");
  JobRequest memory = MakeJob(1);
  memory.per_node.memory = 512 * kGib;
  EXPECT_EQ(Verdict(memory), "no node has 512G memory (largest: 64G on n2)");
}

// V100:4 fits n1 and 16 CPUs fit n2, but no node has both.
TEST(CheckFeasibleTest, ResourcesThatExistOnlyApart) {
  JobRequest job = MakeJob(1, "V100:4");
  job.per_node.cpus = 16000;
  EXPECT_EQ(Verdict(job), "no single node has all of V100:4, 16 CPUs");
}

// Gangs need num_nodes distinct nodes: two V100 nodes exist (n1, n3 — draining counts), not three.
TEST(CheckFeasibleTest, GangNeedsEnoughDistinctNodes) {
  JobRequest job = MakeJob(1, "V100:4");
  job.num_nodes = 2;
  EXPECT_EQ(Verdict(job), "ok");
  job.num_nodes = 3;
  EXPECT_EQ(Verdict(job), "needs 3 nodes with V100:4; only 2 such nodes (n1, n3)");
  job.num_nodes = 2;
  job.pool = "research";
  EXPECT_EQ(Verdict(job), "needs 2 nodes in pool 'research' with V100:4; only 1 such node (n3)");
}

TEST(CheckFeasibleTest, PoolAndSelector) {
  JobRequest job = MakeJob(1, "V100:1");
  job.pool = "prod";
  EXPECT_EQ(Verdict(job), "no node in pool 'prod'");
  job.pool = "";
  job.node_selector["gpu_gen"] = "hopper";
  EXPECT_EQ(Verdict(job), "no node matches node_selector gpu_gen=hopper");
  job.pool = "research";
  EXPECT_EQ(Verdict(job), "no node in pool 'research' matches node_selector gpu_gen=hopper");
  // The selector matches n2, which has T4s, not V100s.
  job.pool = "";
  job.node_selector["gpu_gen"] = "turing";
  EXPECT_EQ(Verdict(job), "no node matching node_selector gpu_gen=turing has V100 GPUs");
}

// berth.node matches a node's name, never a label of that name: one node, or none.
TEST(CheckFeasibleTest, NodeNameSelectorPicksOneNodeByName) {
  JobRequest job = MakeJob(1, "V100:1");
  job.node_selector[kNodeNameSelector] = "n1";
  EXPECT_EQ(Verdict(job), "ok");
  std::vector<NodeView> nodes = Cluster();
  nodes[1].labels[kNodeNameSelector] = "n1";  // n2 claims the name as a label: no matter
  job.per_node.gpu_type = "T4";
  EXPECT_EQ(Verdict(job, nodes), "no node matching node_selector berth.node=n1 has T4 GPUs");
  job.node_selector[kNodeNameSelector] = "n9";
  EXPECT_EQ(Verdict(job, nodes), "no node matches node_selector berth.node=n9");
  job.node_selector[kNodeNameSelector] = "n2";
  EXPECT_EQ(Verdict(job, nodes), "ok");
}

TEST(CheckFeasibleTest, EmptyCluster) {
  EXPECT_EQ(Verdict(MakeJob(1), {}), "no nodes have joined the cluster");
}

// Exclusive on "rack": r1 = {n1, n2}, r2 = {n3}. Two V100:1 nodes exist (n1 in r1, n3 in r2), but
// no single rack has two of them.
TEST(CheckFeasibleTest, ExclusiveNeedsOneDomainWithEnoughNodes) {
  JobRequest job = MakeJob(1, "V100:1");
  job.exclusive = "rack";
  EXPECT_EQ(Verdict(job), "ok");
  job.num_nodes = 2;
  EXPECT_EQ(Verdict(job), "no 'rack' domain has 2 nodes that fit (largest: 1 in r1)");
  job.per_node = {};  // CPU only: n1 and n2 in r1 both fit
  EXPECT_EQ(Verdict(job), "ok");
  job.exclusive = "switch";
  EXPECT_EQ(Verdict(job), "no node has the label 'switch' that exclusive placement needs");
}

TEST(CheckFeasibleTest, MalformedRequestIsInvalidNotInfeasible) {
  JobRequest job = MakeJob(1, "V100:1.5");
  Status s = CheckFeasible(Cluster(), job);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "invalid request: more than one GPU must be a whole number of GPUs");
}

// Where a job could land, for the submitter's warning about limits a node does not enforce: every
// node of its pool and selector that holds one rank when empty, busy or draining.
TEST(NodesThatCouldHoldTest, NodesOfItsScopeThatFitWhenEmpty) {
  EXPECT_EQ(NodesThatCouldHold(Cluster(), MakeJob(1, "V100:4")),
            (std::vector<std::string>{"n1", "n3"}));
  EXPECT_EQ(NodesThatCouldHold(Cluster(), MakeJob(1, "T4:1")), (std::vector<std::string>{"n2"}));
  JobRequest cpu = MakeJob(1, "");
  cpu.per_node.cpus = 12'000;
  EXPECT_EQ(NodesThatCouldHold(Cluster(), cpu), (std::vector<std::string>{"n2"}));
  JobRequest research = MakeJob(1, "");
  research.pool = "research";
  EXPECT_EQ(NodesThatCouldHold(Cluster(), research), (std::vector<std::string>{"n3"}));
  EXPECT_TRUE(NodesThatCouldHold(Cluster(), MakeJob(1, "A100:1")).empty());
}

}  // namespace
}  // namespace berth::sched
