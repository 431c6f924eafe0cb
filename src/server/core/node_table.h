// NodeTable: the nodes the core knows — each one's stored row, what its jobs hold, its agent's
// session, lease and health — with the scheduler's view of each, cached and rebuilt only after the
// node changed, and the capacity-only views the feasibility check at submission reads, rebuilt only
// after a node joined or its capacity, state or drain changed.
//
// A change to a node goes through a Txn (Edit marks the view stale and saves the node in the txn's
// undo journal; Allocate is the only writer of what jobs hold); Restore puts a saved node back when
// the txn's commit failed.
//
// Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/agent_protocol.h"
#include "sched/cluster.h"
#include "server/core/txn.h"
#include "store/store.h"

namespace berth {

struct NodeRuntime {
  NodeRow row;
  MilliCpu cpus_used = 0;
  Mib memory_used = 0;
  std::map<int, MilliGpu> gpu_used;  // device index -> milli-GPUs held
  std::string session;               // current agent session; "" when none
  std::string isolation;             // RegisterRequest::isolation (not stored)
  std::string sharing;               // RegisterRequest::sharing (not stored)
  // MIG re-slicing (server/core/mig_changes.h; not stored): whether its agent allows it, why the
  // last change failed, the layout each GPU is being given, and when each was last ordered changed
  // or found failed.
  bool mig_reconfigure = false;
  std::string mig_error;
  std::map<int, std::vector<std::string>> mig_changing;
  std::map<int, TimeMs> mig_changed_at;
  Mib job_memory_default = 0;  // RegisterRequest::job_memory_default_mib (not stored)
  std::vector<std::string> container_mounts;  // RegisterRequest::container_mounts (not stored)
  proto::NodeHealth health;                   // the agent's last (not stored: it sends it again)
  // After a maintenance window (docs/reservations.md): when it ended. The node takes no job until
  // its agent reports health without a node fault after then (0: not held; not stored: a
  // restarted server takes each agent's first report).
  TimeMs maintenance_ended = 0;
  std::string maintenance;    // the window's name, while held
  int64_t lease_expires = 0;  // monotonic ms
  // Bumped by every change that may invalidate a placement decided on an older snapshot:
  // resources taken, state, drain, session or capacity changed. Freed resources do not bump it.
  uint64_t sched_gen = 0;
  bool view_stale = true;  // `view` must be rebuilt before the next snapshot
  // The cached scheduler view. Immutable once made (a rebuild makes a new one): a pass copies the
  // pointer under the lock and the view after it (Scheduling::BuildPassInput).
  std::shared_ptr<const sched::NodeView> view;
};

class NodeTable {
 public:
  using Map = std::map<std::string, NodeRuntime>;
  // Its side of a Txn's undo journal (txn.h): a node by name, absent as nullopt.
  using Key = std::string;
  using Snapshot = std::optional<NodeRuntime>;
  Snapshot Save(const std::string& name) const {
    auto it = nodes_.find(name);
    return it == nodes_.end() ? Snapshot() : Snapshot(it->second);
  }

  // The nodes by name, to walk or look up (a node is added with Add, removed by Restore and
  // Forget).
  Map::iterator begin() { return nodes_.begin(); }
  Map::iterator end() { return nodes_.end(); }
  Map::const_iterator begin() const { return nodes_.begin(); }
  Map::const_iterator end() const { return nodes_.end(); }
  Map::iterator find(const std::string& name) { return nodes_.find(name); }
  Map::const_iterator find(const std::string& name) const { return nodes_.find(name); }
  size_t count(const std::string& name) const { return nodes_.count(name); }
  size_t size() const { return nodes_.size(); }

  // Saves `node` in `txn`'s journal before its first change there and marks its view stale;
  // `node` itself, to change.
  NodeRuntime& Edit(Txn& txn, NodeRuntime& node);
  // Takes (`sign` +1) or gives back (-1) what `placement` holds of each of its nodes, in `txn`:
  // `per_node` CPUs and memory, and each grant's GPUs. Only this writes a node's counters; a take
  // bumps the node's sched_gen (a placement decided on an older snapshot may no longer fit).
  void Allocate(Txn& txn, const Placement& placement, const ResourceRequest& per_node, int sign);

  // A node that joins (or is loaded): its place, empty until filled in.
  NodeRuntime& Add(const std::string& name);
  // Puts back a node as it was before a change whose commit failed (nullopt: it did not exist).
  void Restore(const std::string& name, std::optional<NodeRuntime> before);
  // Forgets a node gone for good (its row stays in the store): only one that is down, holds
  // nothing and has no session. Answers whether it went.
  bool Forget(const std::string& name);
  // A node's capacity, state or drain changed: the capacity views are rebuilt when next read.
  void CapacityChanged() { capacity_stale_ = true; }

  // The scheduler's view of `node` (*node.view), rebuilt when it is stale: free resources,
  // schedulable (up, not draining, with a session and without a node-level fault), a faulty GPU
  // with nothing free.
  static const sched::NodeView& ViewOf(NodeRuntime& node);
  // Every node's view as of its capacity, for the feasibility check at submission.
  const std::vector<sched::NodeView>& CapacityViews();

 private:
  Map nodes_;
  std::vector<sched::NodeView> capacity_views_;
  bool capacity_stale_ = true;
};

}  // namespace berth
