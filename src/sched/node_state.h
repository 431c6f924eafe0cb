// Node state: what every node has free during one scheduling pass, in a compact form built for
// speed (GPU types and pools interned as small integers, per-type totals kept current), so that
// "does this node fit, and how tightly" is a handful of integer comparisons instead of a walk over
// strings: whole GPUs go to the best-connected set of fully free devices of the type (PickDevices,
// node_state.cpp: one NVLink island, else one PCIe switch, else one NUMA node, the tightest such
// group first; the lowest indices where the node's topology is unknown); a fractional GPU to
// the device of the type with the least free share that still holds it (lowest index on ties), so
// that shares pack onto used devices. The pass, its node index, preemption and reservations are
// built on it.
//
// Nodes are numbered in name order, so that comparing positions breaks ties the way comparing names
// does. Internal to sched/. Not thread-safe: a pass owns its NodeState.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/resources.h"
#include "sched/cluster.h"

namespace berth::sched::internal {

using NodeIdx = uint32_t;
inline constexpr NodeIdx kNoNode = std::numeric_limits<NodeIdx>::max();
inline constexpr int kNoType = -1;

// The value of label `key` on `node`, or nullptr. Nodes carry a few labels: a walk is quicker than
// the map's search, which calls memcmp for every comparison.
const std::string* LabelOf(const NodeView& node, std::string_view key);

// One device's free share, with its place in the node's GPU topology (Device's link groups, 0 =
// none known). Packed into 16 bytes: a pass copies one per device of the cluster.
struct DeviceFree {
  int16_t index = 0;  // the device index on its node
  int16_t type = kNoType;
  uint8_t nvlink = 0;
  uint8_t pcie = 0;
  uint8_t numa = 0;
  MilliGpu free = kMilliPerGpu;
};

// One node's share of a job, with its GPU type interned.
struct Need {
  MilliCpu cpus = 0;
  Mib memory = 0;
  int type = kNoType;         // the GPU type; kNoType when no GPU is wanted or no node has the type
  bool unknown_type = false;  // a GPU type that no node has
  MilliGpu milli = 0;         // 0 when no GPU is wanted
  int devices = 0;            // whole devices; 1 for a share of one
  bool fractional = false;
  bool valid = true;  // the request is well formed (RequestProblem() is "")
  bool wants_gpu() const { return milli > 0; }
};

// How tight a fit is; smaller is better. FitKey (matching.h) with the node's position for its name.
struct FitOrder {
  MilliGpu gpus_left = 0;
  MilliCpu cpus_left = 0;
  Mib memory_left = 0;
  NodeIdx node = kNoNode;
  auto operator<=>(const FitOrder&) const = default;
};

// One node's free resources outside the pass's state: what preemption and reservations imagine when
// they take jobs off a node. Cheap to copy (a node has a handful of devices).
struct Scratch {
  NodeIdx node = kNoNode;
  MilliCpu cpus = 0;
  Mib memory = 0;
  std::vector<DeviceFree> devices;

  // Gives back what a job holds on this node (its per-node CPUs and memory and the grant's
  // devices).
  void Release(const ResourceRequest& per_node, const NodeGrant& grant);
  bool Fits(const Need& need) const;
  FitOrder Order(const Need& need) const;              // only meaningful when Fits()
  std::vector<GpuGrant> Pick(const Need& need) const;  // only when Fits()
  void Take(const Need& need, const std::vector<GpuGrant>& gpus);
};

class NodeState {
 public:
  // Keeps pointers into `nodes`, which must outlive the NodeState.
  explicit NodeState(const std::vector<NodeView>& nodes);

  size_t size() const { return views_.size(); }
  const NodeView& view(NodeIdx i) const { return *views_[i]; }
  const std::string& name(NodeIdx i) const { return views_[i]->name; }
  // The position of the node called `name`, or kNoNode. O(log nodes); O(1) once IndexNames() ran.
  NodeIdx Find(std::string_view name) const;
  // Builds a hash table of names, for callers about to look up many (every running job's nodes).
  void IndexNames();

  int num_types() const { return static_cast<int>(types_.size()); }
  // Index slots: one per GPU type, then one (all_slot()) for jobs that want no GPU.
  int all_slot() const { return num_types(); }
  int TypeId(std::string_view type) const;  // kNoType when no node has it
  int num_pools() const { return static_cast<int>(pools_.size()); }
  int PoolId(std::string_view pool) const;  // -1 when no node is in it
  int pool(NodeIdx i) const { return pool_[i]; }
  bool schedulable(NodeIdx i) const { return schedulable_[i] != 0; }

  Need NeedOf(const ResourceRequest& request) const;

  MilliCpu cpus_free(NodeIdx i) const { return cpus_[i]; }
  Mib memory_free(NodeIdx i) const { return memory_[i]; }
  MilliGpu free_all(NodeIdx i) const { return all_free_[i]; }
  MilliGpu free_of_type(int t, NodeIdx i) const { return t < 0 ? 0 : type_free_[At(t, i)]; }
  int whole_free(int t, NodeIdx i) const { return t < 0 ? 0 : whole_[At(t, i)]; }
  MilliGpu largest_free(int t, NodeIdx i) const { return t < 0 ? 0 : largest_[At(t, i)]; }
  int devices_of(int t, NodeIdx i) const { return t < 0 ? 0 : count_[At(t, i)]; }
  // What an index slot orders nodes by first: free milli-GPUs of the slot's type, or of all types.
  MilliGpu slot_free(int slot, NodeIdx i) const {
    return slot == all_slot() ? all_free_[i] : type_free_[At(slot, i)];
  }
  std::span<const DeviceFree> devices(NodeIdx i) const {
    return {devices_.data() + dev_begin_[i], devices_.data() + dev_begin_[i + 1]};
  }

  // Whether one node's share fits in what node i has free now.
  bool Fits(NodeIdx i, const Need& need) const;
  FitOrder Order(NodeIdx i, const Need& need) const;
  // The devices node i would give (lowest fully free indices; for a share, the fullest device that
  // holds it). Only when Fits().
  std::vector<GpuGrant> Pick(NodeIdx i, const Need& need) const;
  void Take(NodeIdx i, const Need& need, const std::vector<GpuGrant>& gpus);
  // Lowers node i's free amounts to those of `after` wherever `after` has less: what a preemptor
  // holds when it takes part of its share from victims (whose resources stay taken) and part from
  // what is free.
  void LowerTo(NodeIdx i, const Scratch& after);
  Scratch ScratchOf(NodeIdx i) const;

 private:
  // Reads the nodes in views_ order; false (and a half-built state) when they are not in name
  // order.
  bool Load();
  void Prefetch(size_t view, size_t devices) const;
  size_t At(int t, NodeIdx i) const { return static_cast<size_t>(t) * views_.size() + i; }
  void Refresh(NodeIdx i);     // recomputes node i's per-type totals from its devices
  void Accumulate(NodeIdx i);  // adds node i's devices to its (zeroed) per-type totals

  std::vector<const NodeView*> views_;
  std::vector<std::string> types_;
  std::vector<std::string> pools_;
  std::vector<int> pool_;
  std::vector<uint8_t> schedulable_;
  std::vector<MilliCpu> cpus_;
  std::vector<Mib> memory_;
  std::vector<uint32_t> dev_begin_;  // node i's devices: devices_[dev_begin_[i], dev_begin_[i+1])
  std::vector<DeviceFree> devices_;
  // Per type t and node i, at At(t, i): free milli-GPUs, wholly free devices, the largest free
  // share of one device, and the number of devices.
  std::vector<MilliGpu> type_free_;
  std::vector<int32_t> whole_;
  std::vector<MilliGpu> largest_;
  std::vector<int32_t> count_;
  std::vector<MilliGpu> all_free_;
  std::vector<NodeIdx> name_table_;  // open addressing, kNoNode = empty; empty until IndexNames()
};

}  // namespace berth::sched::internal
