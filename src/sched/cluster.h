// The scheduler's view of the world: nodes with their capacity and what is free now, running jobs,
// and pending requests. Plain values built by the server for each pass; the scheduler never reads a
// clock, a store or a socket. Not thread-safe to mutate concurrently; a pass owns its copy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/resources.h"

namespace berth::sched {

using JobId = int64_t;  // ids grow with submission order

struct Device {
  int index = 0;                 // the device index on its node
  std::string type;              // "V100"
  MilliGpu free = kMilliPerGpu;  // 1000 when nobody holds a share of it
  // Where it sits in its node's GPU topology (GpuDevice, common/resources.h): its NVLink island,
  // PCIe switch and NUMA node as small group numbers, 0 where unknown (or alone). Whole GPUs of a
  // job are taken from one group where one can hold them (docs/topology.md).
  uint8_t nvlink = 0;
  uint8_t pcie = 0;
  uint8_t numa = 0;
};

struct NodeView {
  std::string name;
  bool schedulable = true;  // UP and not DRAINING; unschedulable nodes still count for feasibility
  std::string pool;         // "" = default pool
  std::map<std::string, std::string> labels;
  // Host paths (and what is below them) a container job may mount here (agent --container-mount).
  std::vector<std::string> container_mounts;
  MilliCpu cpus_total = 0;
  MilliCpu cpus_free = 0;
  Mib memory_total = 0;
  Mib memory_free = 0;
  std::vector<Device> gpus;  // every device of the node, with what is free of each
  // On a node whose GPUs in MIG mode may be re-sliced (sched/reslice.h): the slice types it could
  // offer after re-slicing, with how many at most. Only "never" (CheckFeasible) reads it; a pass
  // places on `gpus` alone.
  std::map<std::string, int> reslice_capacity;
};

// What a gang asks of the cluster's topology levels (Config::topology_levels, sched/topology.h), by
// index into them: all its nodes in one domain of `required`, as few domains of `preferred` as can
// be. -1: none asked (a gang then prefers the finest level); kUndefinedLevel: a level the cluster
// no longer defines (the job waits, saying so).
inline constexpr int kUndefinedLevel = -2;
struct TopologyRequest {
  int required = -1;
  int preferred = -1;
  bool operator==(const TopologyRequest&) const = default;
};

// A job waiting to be placed.
struct JobRequest {
  JobId id = 0;
  std::string user;  // its owner, for fair share and quotas ("" = anonymous, default team)
  int priority = 0;
  int num_nodes = 1;
  ResourceRequest per_node;
  std::string pool;  // "" = any pool
  std::map<std::string, std::string> node_selector;
  // The host paths its container mounts: only nodes that allow each of them (NodeView).
  std::vector<std::string> container_mounts;
  std::string exclusive;  // node label key for exclusive placement; "" = none
  TopologyRequest topology;
  TimeMs submitted_at = 0;
  std::optional<DurationMs> time_limit;
  std::optional<int64_t> group;  // its bulk group, when Snapshot::group_caps may limit it
  // The reservation it asked to run in (`--reservation N`): it runs only on that reservation's
  // nodes, inside its window. "" = none (a member of a team with a reservation may still use that
  // reservation's nodes: ReservedWindow::team).
  std::string reservation;

  // Whether more than its pool decides which nodes may take it: a node_selector, or container
  // mounts some nodes do not allow (InPoolAndSelector).
  bool narrowed() const { return !node_selector.empty() || !container_mounts.empty(); }
};

// A bulk group's max_running (Slurm's array throttle %N): at most `max_running` of its jobs hold
// resources at once. `running` is how many do now (the server counts them; stopping ones too).
struct GroupCap {
  int max_running = 0;
  int running = 0;
};

// A job holding resources now (STARTING, SETTING_UP or RUNNING). Used for preemption and
// reservations.
struct RunningJob {
  JobId id = 0;
  int attempt = 0;  // which attempt of the job holds these resources (a job may have two: one
                    // still stopping, one placed)
  std::string user;
  int priority = 0;
  ResourceRequest per_node;
  std::string exclusive;
  Placement placement;
  TimeMs started_at = 0;
  std::optional<DurationMs> time_limit;
  // True while the job's processes are being stopped (cancelled or preempted): it holds its
  // resources but can be neither preempted again nor counted as running work.
  bool stopping = false;
};

// One attempt of one job: what a decision names when "job 3" alone would be ambiguous (an earlier
// attempt may still be stopping while the next one is placed).
struct AttemptRef {
  JobId job = 0;
  int attempt = 0;
  auto operator<=>(const AttemptRef&) const = default;
};

// A team's claim on the cluster (docs/fair-share.md). A team without a view (and the default team,
// "") has no quota, no borrow limit and weight 1.
struct TeamView {
  std::string name;
  // GPU type -> milli-GPUs guaranteed (nominal quota); a type without an entry has quota 0.
  std::map<std::string, MilliGpu> quota;
  // GPU type -> milli-GPUs it may use beyond its quota; a type without an entry: no limit.
  std::map<std::string, MilliGpu> borrow_limit;
  double weight = 1;  // fair-share weight (> 0)
  double usage = 0;   // decayed, weighted GPU-seconds its users consumed (the server computes it)
  std::vector<TimeMs> reclaims;  // when its recent reclaims were decided (for the rate limit)
};

// A user, for fair share and per-user caps. A user without a view is in the default team, with no
// usage and no cap.
struct UserView {
  std::string name;
  std::string team;                          // "" = the default team
  double usage = 0;                          // decayed, weighted GPU-seconds
  std::optional<MilliGpu> max_running_gpus;  // over all GPU types, whole GPUs x 1000
};

// One window of an operator's reservation (docs/reservations.md): the occurrence that holds at
// Snapshot::now, or the next one. Before `start`, a job may start on its nodes only if its
// time_limit ends by then (backfill); inside [start, end), only its members' jobs run there (none
// in a maintenance window). Windows of one node never overlap (the server refuses them).
struct ReservedWindow {
  std::string name;
  TimeMs start = 0;
  TimeMs end = 0;
  bool all_nodes = false;          // every node of the cluster
  std::vector<std::string> nodes;  // else these (names of nodes gone are ignored)
  // Its members: jobs that name it (JobRequest::reservation) whose user is among `users` (none
  // listed: any such job), or any job of `team`'s users (team != "").
  std::vector<std::string> users;
  std::string team;
  bool maintenance = false;  // no job at all inside the window
};

// A pending job whose request it shares with others: the server keeps one request per submission,
// so that a snapshot of a million pending jobs copies none of them. `id` is the job's (the
// request's own `id` is not read).
struct SharedPendingJob {
  JobId id = 0;
  std::shared_ptr<const JobRequest> request;
};

struct Snapshot {
  std::vector<NodeView> nodes;
  // Shared and immutable: the server keeps each running job's view built while the job is
  // unchanged, so that taking a snapshot copies pointers, not placements (src/server/core/core.h).
  std::vector<std::shared_ptr<const RunningJob>> running;
  // The pending jobs, in any order (see scheduler.h for the order of a pass): those of `pending`,
  // then those of `shared_pending`, alike (PendingCount, PendingRequest and PendingId below number
  // them so). Tests mostly fill the first; the server, the second.
  std::vector<JobRequest> pending;
  std::vector<SharedPendingJob> shared_pending;
  std::vector<TeamView> teams;
  std::vector<UserView> users;
  std::map<int64_t, GroupCap> group_caps;  // by group; groups without a cap are absent
  std::vector<ReservedWindow> reserved;    // operators' reservations, by window
  TimeMs now = 0;
};

// Pending job k of a snapshot (its `pending`, then its `shared_pending`): how many there are, its
// request (whose `id` may be another job's, when shared) and its id.
inline size_t PendingCount(const Snapshot& s) { return s.pending.size() + s.shared_pending.size(); }
inline const JobRequest& PendingRequest(const Snapshot& s, size_t k) {
  return k < s.pending.size() ? s.pending[k] : *s.shared_pending[k - s.pending.size()].request;
}
inline JobId PendingId(const Snapshot& s, size_t k) {
  return k < s.pending.size() ? s.pending[k].id : s.shared_pending[k - s.pending.size()].id;
}

}  // namespace berth::sched
