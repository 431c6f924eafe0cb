// ReservedWindows: operators' reservations (docs/reservations.md) as one pass sees them — which
// nodes each window covers, who may use them, and whether a job may start on a node now. Internal
// to sched/ (pass.h).
//
// Rules, for a job J and a node N at Snapshot::now:
//   - N inside a window (start <= now < end): only its members' jobs start there, none in a
//     maintenance window. Members: jobs that name it (`--reservation`) and whose user it lists (or
//     it lists none), and any job of its team's users.
//   - N with a window ahead (the next to start on it): J starts there only if its time_limit
//     ends by that start (backfill); a job without a time limit does not.
//   - A job naming a reservation runs only on that reservation's nodes, inside its window; before
//     the window it waits (NotInForce says until when).
//
// Cost: building is O(nodes of the windows); Blocks() is O(1) (a job's membership is computed once
// per job and kept for the next call). Not thread-safe; one per pass.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sched/cluster.h"
#include "sched/fair_share.h"
#include "sched/node_state.h"

namespace berth::sched::internal {

class ReservedWindows {
 public:
  ReservedWindows(const Snapshot& snapshot, const NodeState& state, const Shares& shares);

  bool empty() const { return windows_.empty(); }
  // Whether a window is in force on node i (then only its members' jobs may start there: the
  // pass keeps such nodes out of its index, and searches for members without it).
  bool ActiveOn(NodeIdx i) const { return !on_node_.empty() && on_node_[i].active >= 0; }
  // Whether `job` is a member of some window in force (it may start on nodes ActiveOn).
  bool MemberInForce(const JobRequest& job) const;
  // Whether `job` may not start on node i now.
  bool Blocks(NodeIdx i, const JobRequest& job) const;
  // Why a job that names a reservation cannot start anywhere now (its window has not begun, or its
  // user is not a member); "" when its reservation is in force for it, or it names none.
  std::string NotInForce(const JobRequest& job) const;
  // Why `job` waits, when enough nodes would fit but `blocked` (non-empty) are kept from it.
  std::string Reason(const JobRequest& job, const std::vector<NodeIdx>& blocked) const;
  // Equal for jobs the windows treat alike (same reservation named, same team membership), so that
  // the pass's shapes tell the others apart.
  int ShapeKey(const JobRequest& job) const;

 private:
  struct Window {
    const ReservedWindow* view = nullptr;
    int team = -1;  // index into teams_, -1 without a team
    std::vector<NodeIdx> nodes;
  };
  struct OnNode {
    int active = -1;  // the window in force on the node
    int next = -1;    // the next window to start on it
  };
  struct Member {
    // Whose membership this is: the request (shared by jobs of one submission, and what decides)
    // and the job's id.
    const JobRequest* request = nullptr;
    int64_t job = -1;
    int window = -1;      // the reservation it names (-1: none, or one not in the snapshot)
    bool denied = false;  // it names one whose users do not include its user
    int team = -1;        // its user's team, when some window belongs to that team
  };
  const Member& MemberOf(const JobRequest& job) const;
  const Member& Membership(const JobRequest& job) const;  // computes and keeps it
  bool Admits(int window, const Member& m) const;
  std::string Names(const std::vector<NodeIdx>& nodes) const;

  const Snapshot& snapshot_;
  const NodeState& state_;
  const Shares& shares_;
  std::vector<Window> windows_;
  std::vector<std::string> teams_;
  std::vector<uint8_t> team_in_force_;  // by teams_: some window of the team is in force
  std::vector<OnNode> on_node_;         // by node; empty when no window covers a node
  mutable Member memo_;
};

}  // namespace berth::sched::internal
