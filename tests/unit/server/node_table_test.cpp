// NodeTable (server/core/node_table.h): the scheduler's cached view of each node, the capacity
// views of the feasibility check, and a node put back after a failed commit.
#include "server/core/node_table.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

NodeRuntime& AddUpNode(NodeTable& table, const std::string& name) {
  NodeRuntime& node = table.Add(name);
  node.row.name = name;
  node.row.state = NodeState::kUp;
  node.row.cpus = 8'000;
  node.row.memory = 16'384;
  node.row.gpus = {{0, "A100"}, {1, "A100"}};
  node.session = "s1";
  return node;
}

TEST(NodeTableTest, AViewIsWhatIsFreeAndIsRebuiltOnlyWhenStale) {
  NodeTable table;
  NodeRuntime& node = AddUpNode(table, "n1");
  node.cpus_used = 3'000;
  node.memory_used = 1'024;
  node.gpu_used[1] = 500;
  const sched::NodeView& v = NodeTable::ViewOf(node);
  EXPECT_TRUE(v.schedulable);
  EXPECT_EQ(v.cpus_free, 5'000);
  EXPECT_EQ(v.memory_free, 15'360);
  ASSERT_EQ(v.gpus.size(), 2u);
  EXPECT_EQ(v.gpus[0].free, 1'000);
  EXPECT_EQ(v.gpus[1].free, 500);

  node.cpus_used = 8'000;  // changed without marking the view stale: the cached view stays
  EXPECT_EQ(NodeTable::ViewOf(node).cpus_free, 5'000);
  // A pass holds on to the view it copied under the lock: a rebuild makes a new one and leaves
  // that one as it was.
  const std::shared_ptr<const sched::NodeView> seen_by_a_pass = node.view;
  node.view_stale = true;
  EXPECT_EQ(NodeTable::ViewOf(node).cpus_free, 0);
  EXPECT_NE(node.view, seen_by_a_pass);
  EXPECT_EQ(seen_by_a_pass->cpus_free, 5'000);
}

TEST(NodeTableTest, ANodeWithoutASessionDrainingOrFaultyTakesNothingAndAFaultyGpuHasNothingFree) {
  NodeTable table;
  NodeRuntime& node = AddUpNode(table, "n1");
  node.health.faults.push_back({.probe = "xid", .gpu = 0, .reason = "xid 79"});
  const sched::NodeView& v = NodeTable::ViewOf(node);
  EXPECT_TRUE(v.schedulable);  // a GPU's fault leaves the node, and its other GPU, to others
  EXPECT_EQ(v.gpus[0].free, 0);
  EXPECT_EQ(v.gpus[1].free, 1'000);
  for (auto change :
       {+[](NodeRuntime& n) { n.session.clear(); }, +[](NodeRuntime& n) { n.row.draining = true; },
        +[](NodeRuntime& n) { n.row.state = NodeState::kDown; },
        +[](NodeRuntime& n) { n.health.faults.push_back({.probe = "disk"}); }}) {
    NodeRuntime copy = node;
    change(copy);
    copy.view_stale = true;
    EXPECT_FALSE(NodeTable::ViewOf(copy).schedulable);
  }
}

// The capacity views are read at every submission: rebuilt only after a node joined, changed its
// capacity, state or drain (CapacityChanged), or was put back.
TEST(NodeTableTest, CapacityViewsAreRebuiltOnlyAfterAChange) {
  NodeTable table;
  AddUpNode(table, "n1");
  ASSERT_EQ(table.CapacityViews().size(), 1u);
  AddUpNode(table, "n2");  // joining is a change
  ASSERT_EQ(table.CapacityViews().size(), 2u);
  NodeRuntime& n2 = table.find("n2")->second;
  n2.row.cpus = 64'000;
  n2.view_stale = true;
  EXPECT_EQ(table.CapacityViews()[1].cpus_total, 8'000);  // not told: the cached views stay
  table.CapacityChanged();
  EXPECT_EQ(table.CapacityViews()[1].cpus_total, 64'000);
}

TEST(NodeTableTest, RestorePutsANodeBackOrRemovesOneThatDidNotExist) {
  NodeTable table;
  NodeRuntime& node = AddUpNode(table, "n1");
  const NodeRuntime saved = node;
  ASSERT_EQ(table.CapacityViews()[0].cpus_total, 8'000);
  node.row.cpus = 1'000;
  node.sched_gen = 7;
  table.Restore("n1", saved);
  const NodeRuntime& back = table.find("n1")->second;
  EXPECT_EQ(back.row.cpus, 8'000);
  EXPECT_EQ(back.sched_gen, 0u);
  EXPECT_TRUE(back.view_stale);  // its cached view may describe the change: rebuilt
  EXPECT_EQ(table.CapacityViews()[0].cpus_total, 8'000);

  AddUpNode(table, "n2");
  table.Restore("n2", std::nullopt);  // it joined in the failed plan
  EXPECT_EQ(table.count("n2"), 0u);
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.CapacityViews().size(), 1u);
}

// What jobs hold of a node changes only through Allocate, in a txn: a take bumps the node's
// generation, a give-back does not, and the txn's undo puts the node back as it was.
TEST(NodeTableTest, AllocateTakesAndGivesBackInATxnAndAnUndoPutsTheNodeBack) {
  NodeTable table;
  AddUpNode(table, "n1");
  AddUpNode(table, "n2");
  const Placement placement = {NodeGrant{.node = "n1", .rank = 0, .gpus = {{1, 500}}},
                               NodeGrant{.node = "n2", .rank = 1, .gpus = {}},
                               NodeGrant{.node = "gone", .rank = 2, .gpus = {}}};
  const ResourceRequest per_node{.cpus = 2'000, .memory = 1'024};
  Txn take;
  table.Allocate(take, placement, per_node, +1);
  NodeRuntime& n1 = table.find("n1")->second;
  EXPECT_EQ(n1.cpus_used, 2'000);
  EXPECT_EQ(n1.memory_used, 1'024);
  EXPECT_EQ(n1.gpu_used[1], 500);
  EXPECT_EQ(n1.sched_gen, 1u);
  EXPECT_TRUE(n1.view_stale);
  EXPECT_EQ(table.find("n2")->second.cpus_used, 2'000);

  Txn give;
  table.Allocate(give, placement, per_node, -1);
  EXPECT_EQ(n1.cpus_used, 0);
  EXPECT_EQ(n1.gpu_used[1], 0);
  EXPECT_EQ(n1.sched_gen, 1u) << "freed resources do not bump the generation";
  give.journal.Undo();
  EXPECT_EQ(n1.cpus_used, 2'000) << "the give-back undone";
  take.journal.Undo();
  EXPECT_EQ(table.find("n1")->second.cpus_used, 0);
  EXPECT_EQ(table.find("n1")->second.sched_gen, 0u);
  EXPECT_EQ(table.find("n2")->second.memory_used, 0);
}

}  // namespace
}  // namespace berth
