// Topology levels (sched/topology.h) over random clusters: a required level is never broken, by a
// placement, a preemption or a reservation; a preferred level is met whenever one of its domains
// holds the whole gang; ranks come in topology order. The golden rules are in
// tests/scenarios/topology_levels.scn and gpu_topology.scn.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "sched/pass.h"
#include "sched/scheduler.h"
#include "sched_testing.h"

namespace berth::sched {
namespace {

using testing::Apply;
using testing::CheckedPass;
using testing::Finish;
using testing::kGib;
using testing::MakeJob;
using testing::MakeNode;

struct Where {
  std::optional<std::string> rack;
  std::optional<std::string> rack_switch;  // rack/switch: a switch is named within its rack
};

Where WhereIs(const Snapshot& s, const std::string& node) {
  for (const NodeView& n : s.nodes) {
    if (n.name != node) continue;
    Where w;
    auto rack = n.labels.find("rack");
    auto sw = n.labels.find("switch");
    if (rack != n.labels.end()) w.rack = rack->second;
    if (sw != n.labels.end()) {
      w.rack_switch = (rack == n.labels.end() ? "" : rack->second) + "/" + sw->second;
    }
    return w;
  }
  return {};
}

Config Levels() {
  Config config;
  config.topology_levels = {"rack", "switch"};
  return config;
}

// Every node of `placement` under one rack (the job requires it).
std::string OneRack(const Snapshot& s, JobId job, const Placement& placement) {
  std::set<std::optional<std::string>> racks;
  for (const NodeGrant& g : placement) racks.insert(WhereIs(s, g.node).rack);
  if (racks.size() == 1 && *racks.begin()) return "";
  return "job " + std::to_string(job) + " requires one rack but got " +
         testing::FormatPlacement(placement);
}

// Ranks by rack, then switch, then name (nodes outside a domain after those inside).
bool InTopologyOrder(const Snapshot& s, const Placement& placement) {
  auto key = [&](const NodeGrant& g) {
    Where w = WhereIs(s, g.node);
    return std::tuple(!w.rack, w.rack.value_or(""), !w.rack_switch, w.rack_switch.value_or(""),
                      g.node);
  };
  for (size_t k = 1; k < placement.size(); ++k) {
    if (key(placement[k]) < key(placement[k - 1])) return false;
  }
  return true;
}

NodeView RandomNode(std::mt19937& rng, int n) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  char name[8];
  std::snprintf(name, sizeof(name), "n%02d", n);
  NodeView node = MakeNode(name, 8, 32, "V100", 4);
  if (pick(0, 7) != 0) node.labels["rack"] = "r" + std::to_string(pick(0, 2));
  if (pick(0, 7) != 0) node.labels["switch"] = "s" + std::to_string(pick(0, 1));
  node.schedulable = pick(0, 9) != 0;
  return node;
}

TEST(TopologyTest, RandomPassesNeverBreakARequiredLevel) {
  std::mt19937 rng(20261203);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int required_placed = 0;
  int required_preempted = 0;
  for (int round = 0; round < 150; ++round) {
    Snapshot s;
    const int nodes = pick(3, 12);
    for (int n = 0; n < nodes; ++n) s.nodes.push_back(RandomNode(rng, n));
    Config config = Levels();
    config.preemption = pick(0, 1) == 1;
    config.starvation_bound = pick(0, 1) ? 0 : 600'000;  // reservations at once, or never here
    JobId next = 1;
    for (int step = 0; step < 5; ++step) {
      s.now += 60'000;
      for (int j = pick(0, 8); j > 0; --j) {
        JobRequest job = MakeJob(next++, "V100:" + std::to_string(1 << pick(0, 2)), pick(0, 3));
        job.per_node.memory = pick(0, 4) * kGib;
        job.num_nodes = pick(1, 4);
        if (pick(0, 1)) job.topology.required = 0;  // rack
        if (pick(0, 3) == 0) job.time_limit = pick(1, 10) * 60'000;
        job.submitted_at = s.now - pick(0, 1) * 3'600'000;
        s.pending.push_back(job);
      }
      std::map<JobId, const JobRequest*> asked;
      for (const JobRequest& j : s.pending) asked[j.id] = &j;
      PassResult pass = CheckedPass(s, config);
      auto check = [&](JobId job, const Placement& placement, int* count) {
        if (asked.at(job)->topology.required != 0) return;
        ++*count;
        EXPECT_EQ(OneRack(s, job, placement), "") << "round " << round;
        EXPECT_TRUE(InTopologyOrder(s, placement))
            << "round " << round << ": " << testing::FormatPlacement(placement);
      };
      for (const PlaceDecision& d : pass.placements) check(d.job, d.placement, &required_placed);
      for (const PreemptDecision& d : pass.preemptions) {
        check(d.preemptor, d.placement, &required_preempted);
      }
      for (const ReservationView& r : pass.waiting.reservations()) {
        if (asked.at(r.job)->topology.required != 0) continue;
        std::set<std::optional<std::string>> racks;
        for (const std::string& node : r.nodes) racks.insert(WhereIs(s, node).rack);
        EXPECT_EQ(racks.size(), 1u) << "round " << round << ": job " << r.job;
        EXPECT_TRUE(*racks.begin()) << "round " << round << ": job " << r.job;
      }
      Apply(s, pass);
      for (int f = pick(0, 3); f > 0 && !s.running.empty(); --f) {
        Finish(s,
               s.running[static_cast<size_t>(pick(0, static_cast<int>(s.running.size()) - 1))]->id);
      }
    }
  }
  // The random clusters exercised what they are for.
  EXPECT_GT(required_placed, 100);
  EXPECT_GT(required_preempted, 5);
}

TEST(TopologyTest, APreferredLevelIsMetWheneverOneDomainHoldsTheGang) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int one_switch = 0;
  for (int round = 0; round < 300; ++round) {
    Snapshot s;
    const int nodes = pick(3, 14);
    for (int n = 0; n < nodes; ++n) {
      s.nodes.push_back(RandomNode(rng, n));
      for (Device& d : s.nodes.back().gpus) d.free = pick(0, 2) ? kMilliPerGpu : 0;
    }
    JobRequest job = MakeJob(1, "V100:" + std::to_string(pick(1, 4)));
    job.num_nodes = pick(2, 4);
    if (pick(0, 1)) job.topology.required = 0;
    s.pending.push_back(job);
    // The switches (within the required rack, where one is) whose free nodes hold the whole gang.
    std::map<std::string, int> fitting;
    for (const NodeView& n : s.nodes) {
      int whole = 0;
      for (const Device& d : n.gpus) whole += d.free == kMilliPerGpu;
      Where w = WhereIs(s, n.name);
      if (n.schedulable && whole >= job.per_node.gpu_devices() && w.rack_switch &&
          (job.topology.required < 0 || w.rack)) {
        ++fitting[*w.rack_switch];
      }
    }
    const bool possible = std::any_of(fitting.begin(), fitting.end(),
                                      [&](const auto& f) { return f.second >= job.num_nodes; });
    PassResult pass = CheckedPass(s, Levels());
    if (!possible) continue;
    ASSERT_EQ(pass.placements.size(), 1u) << "round " << round;
    std::set<std::optional<std::string>> switches;
    for (const NodeGrant& g : pass.placements[0].placement) {
      switches.insert(WhereIs(s, g.node).rack_switch);
    }
    EXPECT_EQ(switches.size(), 1u)
        << "round " << round << ": " << testing::FormatPlacement(pass.placements[0].placement);
    ++one_switch;
  }
  EXPECT_GT(one_switch, 50);
}

// Topology-aware gangs read candidate counts kept across a pass (sched/kept_candidates.h) rather
// than finding every node that fits per gang: random clusters (racks and switches, some nodes
// without one or both, draining nodes, partly used GPUs) with gangs of every topology request,
// one-node jobs, exclusive jobs (closing domains mid-pass), preemption and reservations decide the
// same, reasons included, both ways.
TEST(TopologyTest, KeptCountsDecideLikeRecounting) {
  std::mt19937 rng(31);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  internal::Tuning recount;
  recount.keep_topology_counts = false;
  int gangs_placed = 0;
  for (int round = 0; round < 200; ++round) {
    Snapshot s;
    const int nodes = pick(4, 30);
    for (int n = 0; n < nodes; ++n) {
      s.nodes.push_back(RandomNode(rng, n));
      s.nodes.back().labels["rack"] = "r" + std::to_string(pick(0, 3));
      if (pick(0, 9) == 0) s.nodes.back().labels.erase("rack");
      for (Device& d : s.nodes.back().gpus) d.free = pick(0, 3) ? kMilliPerGpu : 0;
    }
    Config config = Levels();
    config.preemption = pick(0, 1) == 1;
    config.starvation_bound = pick(0, 1) ? 0 : 600'000;
    JobId next = 1;
    for (int step = 0; step < 4; ++step) {
      s.now += 60'000;
      for (int j = pick(0, 14); j > 0; --j) {
        JobRequest job = MakeJob(next++, "V100:" + std::to_string(pick(1, 4)), pick(0, 3));
        job.num_nodes = pick(0, 3) == 0 ? 1 : pick(2, 6);
        job.topology.required = pick(-1, 1);
        job.topology.preferred = pick(-1, 1);
        if (job.topology.preferred >= 0 && job.topology.preferred < job.topology.required) {
          job.topology.preferred = -1;
        }
        if (pick(0, 9) == 0) job.exclusive = "rack";
        if (job.exclusive.empty() && pick(0, 9) == 0) job.node_selector["switch"] = "s0";
        if (pick(0, 3) == 0) job.time_limit = pick(1, 10) * 60'000;
        job.submitted_at = s.now - pick(0, 1) * 3'600'000;
        s.pending.push_back(job);
      }
      PassResult kept = internal::Schedule(s, config, internal::Tuning{});
      PassResult recounted = internal::Schedule(s, config, recount);
      ASSERT_EQ(testing::FormatDecisions(kept), testing::FormatDecisions(recounted))
          << "round " << round << " step " << step;
      for (const PlaceDecision& d : kept.placements) gangs_placed += d.placement.size() > 1;
      Apply(s, kept);
      for (int f = pick(0, 4); f > 0 && !s.running.empty(); --f) {
        Finish(s,
               s.running[static_cast<size_t>(pick(0, static_cast<int>(s.running.size()) - 1))]->id);
      }
    }
  }
  EXPECT_GT(gangs_placed, 300);  // the rounds did place gangs
}

}  // namespace
}  // namespace berth::sched
