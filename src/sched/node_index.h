// Node index: the nodes of a pass ordered by how much they have free, so that the best fit for a
// request is found by starting at the first node with enough free GPUs of its type and walking up,
// instead of scanning every node (docs/design.md "Scheduling", Cost: nodes are indexed by free
// resources).
//
// One ordered set per slot (a GPU type, or "all types" for jobs that want no GPU) and pool, ordered
// by FitOrder: free milli-GPUs of the slot, free CPUs, free memory, position. Because a request's
// FitOrder on a node is that node's key minus the request, walking a slot in order from the first
// node with at least the requested milli-GPUs visits the nodes that can fit in best-fit order, and
// the first ones that do fit are the ones a full scan would pick.
//
// Slots are built on first use. The owner must Remove() a node before changing its free amounts and
// Insert() it afterwards (the sets are ordered by those amounts). Not thread-safe.
#pragma once

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "sched/node_state.h"

namespace berth::sched::internal {

class NodeIndex {
 public:
  explicit NodeIndex(const NodeState& state) : state_(&state) {}

  bool built(int slot) const { return static_cast<size_t>(slot) < built_.size() && built_[slot]; }
  // Builds `slot` from every node with devices of its type (every node for the all-types slot) for
  // which `member(i)` holds.
  template <class Member>
  void Build(int slot, Member member);
  // Takes node i out of every built slot. Call before changing its free amounts, and Insert() it
  // before removing another.
  void Remove(NodeIdx i);
  // Puts node i back into every built slot it belongs to. Call after changing its free amounts.
  void Insert(NodeIdx i);
  // Takes node i out for good (its exclusive domain closed).
  void Exclude(NodeIdx i);

  // Visits the nodes of `slot` in `pool` (every pool when pool < 0) whose slot free is at least
  // `min_free`, in FitOrder order, until `visit(i)` returns false. Nodes with fewer than `min_cpus`
  // CPUs or `min_memory` memory free are skipped by seeking past them, not visited: best fit fills
  // node after node, so that the full ones come first in a slot (jobs that want no GPU on GPU
  // nodes), and walking past each of them made a placement cost O(full nodes).
  template <class Visit>
  void Scan(int slot, int pool, MilliGpu min_free, MilliCpu min_cpus, Mib min_memory,
            Visit visit) const;

 private:
  // The least key (slot free, CPUs free, memory free) of a node a search may visit from there on.
  struct Floor {
    MilliGpu free;
    MilliCpu cpus;
    Mib memory;
  };
  struct Less {
    const NodeState* state;
    int slot;
    using is_transparent = void;
    bool operator()(NodeIdx a, NodeIdx b) const {
      const MilliGpu fa = state->slot_free(slot, a), fb = state->slot_free(slot, b);
      if (fa != fb) return fa < fb;
      if (state->cpus_free(a) != state->cpus_free(b))
        return state->cpus_free(a) < state->cpus_free(b);
      if (state->memory_free(a) != state->memory_free(b)) {
        return state->memory_free(a) < state->memory_free(b);
      }
      return a < b;
    }
    // A node's key against a floor (which sorts before every node of its key).
    bool operator()(NodeIdx a, Floor f) const {
      return Key(a) < std::tie(f.free, f.cpus, f.memory);
    }
    bool operator()(Floor f, NodeIdx b) const {
      return std::tie(f.free, f.cpus, f.memory) <= Key(b);
    }
    std::tuple<MilliGpu, MilliCpu, Mib> Key(NodeIdx i) const {
      return {state->slot_free(slot, i), state->cpus_free(i), state->memory_free(i)};
    }
  };
  using Set = std::set<NodeIdx, Less>;

  // The first node at or after `it` that has `min_cpus` and `min_memory` free, or one whose slot
  // free differs; the nodes between have too little free to fit (a seek, not a walk).
  static Set::const_iterator SkipShort(const Set& set, Set::const_iterator it, const Less& less,
                                       MilliCpu min_cpus, Mib min_memory);

  bool Belongs(int slot, NodeIdx i) const {
    return slot == state_->all_slot() || state_->devices_of(slot, i) > 0;
  }

  const NodeState* state_;
  std::vector<bool> built_;
  std::vector<std::vector<Set>> sets_;  // [slot][pool]
  std::vector<bool> member_;            // node i is in the sets of every built slot it belongs to
  std::vector<std::pair<size_t, Set::node_type>> removed_;  // taken out by Remove(), for Insert()
};

template <class Member>
void NodeIndex::Build(int slot, Member member) {
  const size_t s = static_cast<size_t>(slot);
  if (sets_.size() <= s) {
    sets_.resize(s + 1);
    built_.resize(s + 1, false);
  }
  if (member_.empty()) {
    member_.resize(state_->size());
    for (NodeIdx i = 0; i < state_->size(); ++i) member_[i] = member(i);
  }
  const Less less{state_, slot};
  std::vector<std::vector<NodeIdx>> by_pool(static_cast<size_t>(state_->num_pools()));
  for (NodeIdx i = 0; i < state_->size(); ++i) {
    if (member_[i] && Belongs(slot, i)) by_pool[static_cast<size_t>(state_->pool(i))].push_back(i);
  }
  sets_[s].clear();
  for (std::vector<NodeIdx>& nodes : by_pool) {
    std::sort(nodes.begin(), nodes.end(), less);
    Set set(less);
    for (NodeIdx i : nodes) set.emplace_hint(set.end(), i);
    sets_[s].push_back(std::move(set));
  }
  built_[s] = true;
}

inline NodeIndex::Set::const_iterator NodeIndex::SkipShort(const Set& set, Set::const_iterator it,
                                                           const Less& less, MilliCpu min_cpus,
                                                           Mib min_memory) {
  while (it != set.end()) {
    const NodeState& s = *less.state;
    const MilliCpu cpus = s.cpus_free(*it);
    if (cpus >= min_cpus && s.memory_free(*it) >= min_memory) return it;
    // Within this slot free, nodes are ordered by CPUs free, then memory free: the next one that
    // can fit has at least the CPUs wanted (and this node's, if it had those), and the memory.
    it = set.lower_bound(Floor{s.slot_free(less.slot, *it), std::max(cpus, min_cpus), min_memory});
  }
  return it;
}

template <class Visit>
void NodeIndex::Scan(int slot, int pool, MilliGpu min_free, MilliCpu min_cpus, Mib min_memory,
                     Visit visit) const {
  const std::vector<Set>& pools = sets_[static_cast<size_t>(slot)];
  const Less less{state_, slot};
  const Floor first{min_free, min_cpus, min_memory};
  if (pool >= 0) {
    const Set& set = pools[static_cast<size_t>(pool)];
    for (auto it = SkipShort(set, set.lower_bound(first), less, min_cpus, min_memory);
         it != set.end(); it = SkipShort(set, std::next(it), less, min_cpus, min_memory)) {
      if (!visit(*it)) return;
    }
    return;
  }
  // Every pool: merge the pools' orders (there are few pools).
  struct Cursor {
    const Set* set;
    Set::const_iterator it;
  };
  std::vector<Cursor> cursors;
  for (const Set& set : pools) {
    auto it = SkipShort(set, set.lower_bound(first), less, min_cpus, min_memory);
    if (it != set.end()) cursors.push_back({&set, it});
  }
  while (!cursors.empty()) {
    size_t best = 0;
    for (size_t c = 1; c < cursors.size(); ++c) {
      if (less(*cursors[c].it, *cursors[best].it)) best = c;
    }
    Cursor& cursor = cursors[best];
    const NodeIdx i = *cursor.it;
    cursor.it = SkipShort(*cursor.set, std::next(cursor.it), less, min_cpus, min_memory);
    if (cursor.it == cursor.set->end()) cursors.erase(cursors.begin() + static_cast<long>(best));
    if (!visit(i)) return;
  }
}

}  // namespace berth::sched::internal
