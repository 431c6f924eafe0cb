// Topology: the cluster's topology levels across nodes (Config::topology_levels, coarse to fine:
// block, rack, switch) as domains, and where a gang goes in them (docs/topology.md).
//
// A node's value at a level is its label of that name; its domain at a level is its values at that
// level and every coarser one (switch s1 in rack r1 is not switch s1 in rack r2). A node without
// the level's label is outside every domain of that level. A gang may ask for a `required` level
// (all its nodes in one domain of it) and a `preferred` one (as few domains of it as possible);
// a multi-node gang that names neither prefers the finest level. Among the domains of the required
// level it takes the one where it spans the fewest preferred domains, then the one with the fewest
// nodes that fit (best fit: bigger domains stay free for bigger gangs); inside it, whole preferred
// domains largest first, and for the rest the smallest preferred domain that holds it. Its ranks
// are then numbered in topology order (by value at each level, coarse to fine), so neighbours in
// rank share a switch and a ring crosses the fewest.
//
// Domains are computed on first use and kept for the pass (labels do not change within one).
// Internal to sched/. Not thread-safe: a pass owns its Topology.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sched/node_state.h"

namespace berth::sched::internal {

// Why no domain of a gang's required level holds it now: in words ("at most 3 fit under one now
// (rack r2)"), and that closest domain (the first where the most fit; -1 when none has any).
struct Shortfall {
  std::string why;
  int domain = -1;
};

class Topology {
 public:
  // Keeps references to both, which must outlive it.
  Topology(const NodeState& state, const std::vector<std::string>& levels)
      : state_(state), levels_(levels) {}

  int levels() const { return static_cast<int>(levels_.size()); }
  const std::string& level_name(int level) const { return levels_[static_cast<size_t>(level)]; }
  // Whether a job's placement follows the topology: levels exist and it is a gang, or requires a
  // level (a node outside every domain of it will not do). Exclusive jobs keep to their own
  // label's domains.
  bool Applies(const JobRequest& job) const {
    return !levels_.empty() && (job.num_nodes > 1 || job.topology.required >= 0) &&
           job.exclusive.empty();
  }
  // The level a job prefers (its own, else the finest), and the one it requires (-1: none).
  int PreferredOf(const JobRequest& job) const;
  static int RequiredOf(const JobRequest& job) { return job.topology.required; }

  // Node i's domain at `level` (numbered in value order), or -1 outside every domain of it.
  int DomainOf(int level, NodeIdx i) const;
  const std::string& ValueOf(int level, int domain) const;  // its value at that level
  int domains(int level) const;                             // how many domains `level` has

  // `count` nodes of `fitting` (the nodes that fit the job now) placed by the rules above, in rank
  // order; `order` says how tightly a node fits (best fit within a domain). Empty when no domain
  // of the required level holds `count` of them, with *shortfall saying why. O(fitting + d log d)
  // for the d domains with a candidate.
  std::vector<NodeIdx> Choose(const std::vector<NodeIdx>& fitting, size_t count,
                              const JobRequest& job, const std::function<FitOrder(NodeIdx)>& order,
                              Shortfall* shortfall) const;
  // Fills *shortfall for a gang requiring `required` when at most `most` fit under one domain of
  // it, the first such being `domain`.
  void Short(int required, int most, int domain, Shortfall* shortfall) const;
  // Puts `nodes` in rank order: by domain at each level, coarse to fine, then by name.
  void RankOrder(std::vector<NodeIdx>& nodes) const;

  // Packing: a one-node job is placed on the first of its kPackAmong tightest fits (`best_first`)
  // that lies in a domain of the coarsest level already partly used (or in none), so that wholly
  // free domains stay whole for the gangs that need one; on the tightest fit when all of them lie
  // in wholly free domains. Took() tells it a node now holds something.
  static constexpr size_t kPackAmong = 16;
  NodeIdx Pack(const std::vector<NodeIdx>& best_first) const;
  void Took(NodeIdx i);

 private:
  void Build() const;

  const NodeState& state_;
  const std::vector<std::string>& levels_;
  mutable bool built_ = false;
  mutable std::vector<std::vector<int>> domain_;          // [level][node]
  mutable std::vector<std::vector<std::string>> values_;  // [level][domain]
  mutable std::vector<int> counts_;  // Choose()'s scratch: per domain, zero between calls
  // Packing (built on first use): per node whether it holds anything, per domain of the coarsest
  // level how many of its nodes do.
  mutable bool packing_ = false;
  mutable std::vector<uint8_t> busy_node_;
  mutable std::vector<int> busy_;
};

}  // namespace berth::sched::internal
