// KeptCandidates: for the topology-aware gangs of one pass (sched/topology.h), which nodes fit each
// kind of need and how many of them lie in each domain, kept across the pass and brought up to date
// from the nodes that changed, so that placing a gang costs O(domains of its required level) rather
// than a visit to every node that fits (on an empty cluster, all of them, for every gang). It
// chooses exactly what Topology::Choose chooses from the same nodes
// (tests/unit/sched/topology_test.cpp runs passes both ways and compares them).
//
// Per preferred level, its domains' members (a node without the level's value is a domain of its
// own, as in Topology::Choose). Per kind of need and preferred level, an Entry: per node whether it
// fits, per preferred domain how many fit, and, per required level a gang asked for, per required
// domain the total and a histogram of its preferred domains' counts. The fewest-domains plan reads
// the histogram from the top (whole domains largest first, then the smallest that holds the rest)
// without sorting anything; only the chosen required domain's preferred domains are walked, to
// name the ones taken (lowest value first among equal counts, as Choose's sort orders them).
//
// Bounded: at most kMaxEntries entries (the least recently used goes). Internal to sched/. Not
// thread-safe: a pass owns it.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sched/node_state.h"
#include "sched/topology.h"

namespace berth::sched::internal {

class KeptCandidates {
 public:
  // What decides whether a node fits a job that names no pool or selector: its Need.
  struct Key {
    MilliCpu cpus = 0;
    Mib memory = 0;
    int type = kNoType;
    MilliGpu milli = 0;
    int devices = 0;
    bool fractional = false;
    int preferred = 0;  // the job's preferred level: entries count per domain of it
    auto operator<=>(const Key&) const = default;
  };
  static constexpr size_t kMaxEntries = 8;

  // Keeps a reference to `topology`, which must outlive it; `nodes` is the cluster's size.
  KeptCandidates(const Topology& topology, size_t nodes) : topology_(topology), nodes_(nodes) {}

  static Key KeyOf(const Need& need, int preferred);

  // Topology::Choose for `job`, where the nodes that fit are those for which fits(i) holds.
  // `changed` lists every node changed in this pass so far, in order (only what was appended since
  // the last call is read); `epoch` must change whenever fits() may have changed for a node not
  // listed there (a domain closed by an exclusive job).
  std::vector<NodeIdx> Choose(const Key& key, const std::function<bool(NodeIdx)>& fits,
                              const std::vector<NodeIdx>& changed, uint64_t epoch, size_t count,
                              const JobRequest& job, const std::function<FitOrder(NodeIdx)>& order,
                              Shortfall* shortfall);

 private:
  // One level's domains, every node in one (a node without the level's value alone in its own,
  // numbered after the real ones), members listed by domain.
  struct Level {
    std::vector<int> of;     // per node
    std::vector<int> start;  // domain d's members: nodes[start[d] .. start[d + 1])
    std::vector<NodeIdx> nodes;
  };
  // The domains of a preferred level inside those of a required one (-1: the whole cluster as
  // one), with where each required domain's histogram lies in Sums::hist.
  struct Nesting {
    std::vector<int> parent;    // per preferred domain: its required domain, -1 outside all
    std::vector<int> start;     // required domain r's preferred domains: children[start[r] ..]
    std::vector<int> children;  // in value order
    std::vector<int> offset;    // r's histogram: hist[offset[r] .. offset[r + 1]), index = count
  };
  struct Sums {
    int required = -1;
    const Nesting* nesting = nullptr;
    std::vector<int> total;  // per required domain: nodes that fit
    std::vector<int> hist;   // per required domain, per count: preferred domains with that count
  };
  struct Entry {
    Key key;
    uint64_t epoch = 0;
    size_t synced = 0;  // entries of `changed` seen
    uint64_t used = 0;  // when last asked (least recently used goes first)
    std::vector<uint8_t> fits;
    std::vector<int> count;  // per preferred domain
    int fitting = 0;         // nodes that fit, in all
    std::vector<Sums> sums;  // per required level asked for
  };
  // One required domain's plan: how many preferred domains it spans, and which counts it takes
  // (value, nodes taken from one domain of that count), whole ones first.
  using Takes = std::vector<std::pair<int, int>>;

  const Level& LevelOf(int level);
  const Nesting& NestingOf(int preferred, int required);
  Entry& EntryFor(const Key& key, const std::function<bool(NodeIdx)>& fits,
                  const std::vector<NodeIdx>& changed, uint64_t epoch);
  Sums& SumsFor(Entry& entry, int required);
  void Set(Entry& entry, NodeIdx i, bool fits);
  // The plan within one required domain for `count` nodes, its span count returned (0: none).
  static size_t Plan(const int* hist, int width, size_t count, Takes* takes);

  const Topology& topology_;
  const size_t nodes_;
  std::map<int, Level> levels_;
  std::map<std::pair<int, int>, Nesting> nestings_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace berth::sched::internal
