// PickReservedNodes (sched/scheduler.h): which whole nodes a reservation of N GPUs takes.
#include <gtest/gtest.h>

#include "sched/scheduler.h"

namespace berth::sched {
namespace {

NodeView Node(const std::string& name, const std::string& type, int gpus,
              std::map<std::string, std::string> labels = {}, const std::string& pool = "") {
  NodeView n;
  n.name = name;
  n.pool = pool;
  n.labels = std::move(labels);
  for (int k = 0; k < gpus; ++k) n.gpus.push_back(Device{.index = k, .type = type});
  return n;
}

TEST(PickReservedNodes, FewestNodesMostGpusFirst) {
  std::vector<NodeView> nodes = {Node("a", "H100", 4), Node("b", "H100", 8), Node("c", "H100", 8),
                                 Node("d", "A100", 8)};
  std::string why;
  EXPECT_EQ(PickReservedNodes(nodes, "H100", 16, "", {}, {}, &why),
            (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(PickReservedNodes(nodes, "H100", 4, "", {}, {}, &why), (std::vector<std::string>{"b"}));
  // Excluded nodes (reserved by another window then) are not taken.
  EXPECT_EQ(PickReservedNodes(nodes, "H100", 12, "", {}, {"b"}, &why),
            (std::vector<std::string>{"a", "c"}));
}

TEST(PickReservedNodes, SaysWhyWhenTheClusterCannot) {
  std::vector<NodeView> nodes = {Node("a", "H100", 8, {}, "p"), Node("b", "H100", 8)};
  std::string why;
  EXPECT_TRUE(PickReservedNodes(nodes, "H100", 16, "p", {}, {}, &why).empty());
  EXPECT_EQ(why,
            "only 8 H100 GPUs on nodes free of other reservations then in pool 'p' (16 asked)");
  EXPECT_TRUE(PickReservedNodes(nodes, "T4", 1, "", {}, {}, &why).empty());
}

TEST(PickReservedNodes, KeepsToOneTopologyDomainThatFits) {
  // Racks r1 (3 nodes of 8) and r2 (2 nodes of 8): 16 GPUs fit in either; r2, the smaller, is
  // taken whole, leaving r1 for larger asks. 24 fit only in r1.
  std::vector<NodeView> nodes = {
      Node("a1", "H100", 8, {{"rack", "r1"}}), Node("a2", "H100", 8, {{"rack", "r1"}}),
      Node("a3", "H100", 8, {{"rack", "r1"}}), Node("b1", "H100", 8, {{"rack", "r2"}}),
      Node("b2", "H100", 8, {{"rack", "r2"}})};
  std::string why;
  EXPECT_EQ(PickReservedNodes(nodes, "H100", 16, "", {"rack"}, {}, &why),
            (std::vector<std::string>{"b1", "b2"}));
  EXPECT_EQ(PickReservedNodes(nodes, "H100", 24, "", {"rack"}, {}, &why),
            (std::vector<std::string>{"a1", "a2", "a3"}));
  // No rack holds 32: nodes from anywhere.
  EXPECT_EQ(PickReservedNodes(nodes, "H100", 32, "", {"rack"}, {}, &why).size(), 4u);
}

}  // namespace
}  // namespace berth::sched
