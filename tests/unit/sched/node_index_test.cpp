// NodeIndex::Scan against a brute-force order: it visits exactly the nodes with enough of the slot,
// CPUs and memory free, in FitOrder order, and no node that is short of CPUs or memory.
#include "sched/node_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "sched_testing.h"

namespace berth::sched {
namespace {

using internal::NodeIdx;
using internal::NodeIndex;
using internal::NodeState;
using testing::MakeNode;

std::string Name(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "n%04d", i);
  return buf;
}

// Every node of `pool` (all pools when < 0) that has at least the floors free, in FitOrder order.
std::vector<NodeIdx> Expected(const NodeState& state, int slot, int pool, MilliGpu min_free,
                              MilliCpu min_cpus, Mib min_memory) {
  std::vector<std::tuple<MilliGpu, MilliCpu, Mib, NodeIdx>> keys;
  for (NodeIdx i = 0; i < state.size(); ++i) {
    if (pool >= 0 && state.pool(i) != pool) continue;
    if (slot != state.all_slot() && state.devices_of(slot, i) == 0) continue;
    if (state.slot_free(slot, i) < min_free || state.cpus_free(i) < min_cpus ||
        state.memory_free(i) < min_memory) {
      continue;
    }
    keys.emplace_back(state.slot_free(slot, i), state.cpus_free(i), state.memory_free(i), i);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<NodeIdx> out;
  for (const auto& k : keys) out.push_back(std::get<3>(k));
  return out;
}

std::vector<NodeIdx> Visited(const NodeIndex& index, int slot, int pool, MilliGpu min_free,
                             MilliCpu min_cpus, Mib min_memory) {
  std::vector<NodeIdx> out;
  index.Scan(slot, pool, min_free, min_cpus, min_memory, [&](NodeIdx i) {
    out.push_back(i);
    return true;
  });
  return out;
}

TEST(NodeIndexTest, ScanVisitsOnlyNodesWithEnoughFreeInFitOrder) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < 200; ++round) {
    std::vector<NodeView> nodes;
    for (int n = 0, count = pick(1, 60); n < count; ++n) {
      // Few distinct amounts, so that runs of equal keys (full nodes above all) are common.
      nodes.push_back(MakeNode(Name(n), 8, 64, "V100", pick(0, 4)));
      nodes.back().cpus_free = pick(0, 4) * 2 * kMilliPerCpu;
      nodes.back().memory_free = pick(0, 4) * 16 * testing::kGib;
      for (auto& d : nodes.back().gpus) d.free = pick(0, 2) * 500;
      nodes.back().pool = pick(0, 2) == 0 ? "p" : "";
    }
    NodeState state(nodes);
    NodeIndex index(state);
    for (int slot : {0, state.all_slot()}) {
      if (slot >= state.num_types() && slot != state.all_slot()) continue;
      index.Build(slot, [](NodeIdx) { return true; });
      for (int pool = -1; pool < state.num_pools(); ++pool) {
        const MilliGpu min_free = pick(0, 2) * 500;
        const MilliCpu min_cpus = pick(0, 4) * 2 * kMilliPerCpu;
        const Mib min_memory = pick(0, 4) * 16 * testing::kGib;
        EXPECT_EQ(Visited(index, slot, pool, min_free, min_cpus, min_memory),
                  Expected(state, slot, pool, min_free, min_cpus, min_memory))
            << "round " << round << " slot " << slot << " pool " << pool;
      }
    }
  }
}

// 1,000 nodes of which all but the last 10 have no CPU free: a scan for one CPU visits the 10, and
// still stops when asked to.
TEST(NodeIndexTest, ScanSkipsFullNodesWithoutVisitingThem) {
  std::vector<NodeView> nodes;
  for (int n = 0; n < 1000; ++n) {
    nodes.push_back(MakeNode(Name(n), 128, 1024, "H100", 8));
    if (n < 990) nodes.back().cpus_free = 0;
  }
  NodeState state(nodes);
  NodeIndex index(state);
  index.Build(state.all_slot(), [](NodeIdx) { return true; });
  std::vector<NodeIdx> visited = Visited(index, state.all_slot(), -1, 0, kMilliPerCpu, 0);
  ASSERT_EQ(visited.size(), 10u);
  EXPECT_EQ(visited.front(), 990u);
  int calls = 0;
  index.Scan(state.all_slot(), 0, 0, kMilliPerCpu, 0, [&](NodeIdx) { return ++calls < 3; });
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace berth::sched
