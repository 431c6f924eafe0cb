// ReadModel: what the core's memory answers to readers — nodes and what they hold, the active
// queue, waiting reasons, fair-share holdings, the dashboard's totals, the /metrics gauges, where
// a terminal or a port-forward reaches a job — and the log followers waiting for a job's output.
// It changes nothing but the followers. Readers ask memory first and the store for what memory no
// longer holds (an ended job); server/http's handlers do the latter.
//
// Thread-safety: every method is thread-safe. Those that walk the state take the state lock
// (core_state.h) with HandlerLock, so that a pass applying a big batch lets them in between its
// chunks; the waiting reasons come from the waiting board, without the state lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/core/core_state.h"
#include "server/core/lifecycle.h"
#include "server/listing.h"

namespace berth {

// What an attempt that still runs has used so far: a UsageRecord ending now.
using RunningUsage = UsageRecord;

// A node as `berth nodes` shows it: its row and what its jobs hold.
struct NodeStatus {
  NodeRow row;
  MilliCpu cpus_used = 0;
  Mib memory_used = 0;
  std::map<int, MilliGpu> gpu_used;                      // device index -> milli-GPUs held
  std::string isolation;                                 // RegisterRequest::isolation of its agent
  std::string sharing;                                   // RegisterRequest::sharing of its agent
  bool mig_reconfigure = false;                          // RegisterRequest::mig_reconfigure
  std::string mig_error;                                 // why its last MIG layout change failed
  std::map<int, std::vector<std::string>> mig_changing;  // GPU -> the layout it is being given
  Mib job_memory_default = 0;  // RegisterRequest::job_memory_default_mib (0: none enforced)
  proto::NodeHealth health;    // what its agent's probes found last (docs/operators.md)
  // The operator's reservation that holds it now, else the next within a week
  // (docs/reservations.md); name "" when none.
  struct Reserved {
    std::string name;
    TimeMs start = 0;
    TimeMs end = 0;
    bool active = false;
    bool maintenance = false;
  } reserved;
  std::string maintenance_hold;  // a maintenance window it waits to pass health probes after
};

class ReadModel {
 public:
  ReadModel(CoreState& state, const Lifecycle& life) : s_(state), life_(life) {}

  // --- nodes ---
  std::vector<NodeStatus> Nodes() EXCLUDES(core_lock);
  static NodeStatus StatusOf(const NodeRuntime& node);
  // When node `node` was last heard from; nullopt when the cluster does not know it (never joined,
  // or forgotten: ForgetGoneNodes).
  std::optional<TimeMs> NodeLastSeen(const std::string& node) EXCLUDES(core_lock);
  // The memory limit each of `placement`'s nodes gives a job that asked for none (0: none
  // enforced; a node not known is left out), for `berth show`: not a copy of every node.
  std::map<std::string, Mib> JobMemoryDefaults(const Placement& placement) EXCLUDES(core_lock);
  // The labels of `placement`'s nodes (a node not known is left out), for where in the topology a
  // job runs (`berth show`).
  std::map<std::string, std::map<std::string, std::string>> NodeLabels(const Placement& placement)
      EXCLUDES(core_lock);
  // Who holds each GPU device now: node -> device index -> (job, user), for the GPU maps of
  // `berth top` (and `GET /v1/nodes?holders=1`). Walks the active jobs under the lock.
  using Holder = std::pair<int64_t, std::string>;
  std::map<std::string, std::map<int, std::vector<Holder>>> DeviceHolders() EXCLUDES(core_lock);

  // --- jobs ---
  // Why a pending job waits (the last pass's reason), or "".
  std::string WaitingReason(int64_t job) { return s_.waiting.Reason(job); }
  // The reason with its numbers; nullopt when no pass has considered the job.
  std::optional<WaitingDetail> WaitingDetailOf(int64_t job) { return s_.waiting.Detail(job); }
  std::unordered_map<int64_t, std::string> WaitingReasons(const std::vector<int64_t>& jobs) {
    return s_.waiting.Reasons(jobs);
  }
  // The in-memory row of an active (or still stopping) job, and whether its output may still grow.
  std::optional<std::pair<JobRow, bool>> ActiveJobRow(int64_t job) EXCLUDES(core_lock);
  // A job's row, and whether its output may still grow: memory's while it is active, else the
  // store's (an ended job). NotFound ("no job N") for an unknown one; the store's error.
  Result<std::pair<JobRow, bool>> JobRowOf(int64_t job) EXCLUDES(core_lock);

  // --- bulk groups: memory's tally while the group has jobs there, else the store ---
  // A bulk group as memory knows it (group_tallies.h; without the state lock); nullopt when it has
  // no jobs in memory.
  std::optional<GroupTallies::Tally> TalliedGroup(int64_t group) const {
    return s_.tallies.Find(group);
  }
  // A bulk group: its tally, else its size, owner, limit and counts read from the store.
  // NotFound for an unknown group.
  Result<GroupTallies::Tally> Group(int64_t group);
  // The status counts of `groups`: tallied ones from memory, the others from the store.
  Result<std::map<int64_t, std::map<JobStatus, int>>> GroupCounts(
      const std::vector<int64_t>& groups);
  // Where a user reaches rank `rank` of job `job` (server/http/terminal_bridges.h): the job's row
  // and that rank's node. NotFound for no active job; Conflict for a job not RUNNING (the reason
  // says its status); Invalid for a rank it does not have. TerminalOf is for its terminal, and is
  // also Conflict for a job that is not interactive; PortOf for a port-forward, of any running job.
  struct RankTarget {
    JobRow row;
    std::string node;
  };
  Result<RankTarget> TerminalOf(int64_t job, int rank) EXCLUDES(core_lock);
  Result<RankTarget> PortOf(int64_t job, int rank) EXCLUDES(core_lock);
  // The active jobs, for `berth queue` (from ActiveEntries): bulk groups with an active job (with
  // its newest active member) and the ids of active jobs in no group, newest first. `user` and
  // `team` filter when set (`team` "-" is the default team).
  struct QueueOverview {
    std::vector<std::pair<int64_t, int64_t>> groups;  // (group, its newest active job)
    std::vector<int64_t> ungrouped;
  };
  QueueOverview Overview(const listing::RowFilter& filter) EXCLUDES(core_lock);
  // One active job as the dashboard's queue sorts and filters it (its full row is read from the
  // store for the page shown only).
  struct QueueEntry {
    int64_t id = 0;
    std::optional<int64_t> group;
    std::string user;
    JobStatus status = JobStatus::kPending;
    int priority = 0;
  };
  // The active jobs (not those still stopping) that pass `filter`, newest first.
  std::vector<QueueEntry> ActiveEntries(const listing::RowFilter& filter) EXCLUDES(core_lock);

  // --- the dashboard and /metrics (read_model_gauges.cpp) ---
  // What the cluster holds now, for the dashboard's overview: counted under the lock, from the
  // job counts kept for /metrics and one walk of the nodes.
  struct Totals {
    std::map<std::string, int64_t> jobs;   // status name (and STOPPING) -> active jobs
    std::map<std::string, int64_t> nodes;  // UP, DRAINING, DOWN -> nodes
    struct Gpus {
      MilliGpu total = 0;
      MilliGpu used = 0;
      MilliGpu down = 0;  // on nodes that are down
    };
    std::map<std::string, Gpus> gpus;  // GPU type ->
    MilliCpu cpus = 0;
    MilliCpu cpus_used = 0;
    Mib memory = 0;
    Mib memory_used = 0;
  };
  Totals ClusterTotals() EXCLUDES(core_lock);
  // Writes the gauges of the state as it is now: jobs by status, pool and team; pending jobs by
  // reason class, user and team (as of the last pass); GPUs by type and state, overall and per
  // node; nodes by state. Holds the state lock for one walk of the active jobs and the nodes.
  void WriteGauges(metrics::ExpositionWriter& out) EXCLUDES(core_lock);
  // The class of a waiting reason, for berth_pending_jobs{reason=...}: "resources", "preempting",
  // "reclaiming", "user_cap", "group_cap", "team_borrow_limit", "reservation", "no_node",
  // "invalid", "other".
  static std::string_view ReasonClass(std::string_view reason);

  // --- fair share ---
  // The attempts that hold resources now, as records ending now (for `berth usage`).
  std::vector<RunningUsage> RunningAttempts() EXCLUDES(core_lock);
  // The team a user is in now ("" = the default team).
  std::string TeamOf(const std::string& user) EXCLUDES(core_lock);
  // Decayed usage (ended and running attempts) of a team, weighted GPU-seconds.
  double TeamUsage(const std::string& team) EXCLUDES(core_lock);
  // Who holds GPUs of `type` now: (user, team, milli-GPUs), most first.
  std::vector<std::tuple<std::string, std::string, MilliGpu>> Holders(const std::string& type)
      EXCLUDES(core_lock);
  // What each team's active jobs hold now: team -> GPU type -> milli-GPUs.
  std::map<std::string, std::map<std::string, MilliGpu>> TeamHoldings() EXCLUDES(core_lock);

  // --- log followers ---
  // Calls `fire` once when output for `job` arrives or the job ends for good. Returns nullopt (and
  // never calls `fire`) when attempt `attempt` of the job is no longer live. `fire` may run under
  // the state lock: it must only post work to another thread.
  std::optional<uint64_t> AddLogWaiter(int64_t job, int attempt, std::function<void()> fire)
      EXCLUDES(core_lock);
  void RemoveLogWaiter(int64_t job, uint64_t id) EXCLUDES(core_lock);
  void LogsAppended(int64_t job) EXCLUDES(core_lock);
  void LogsAppended(const std::set<int64_t>& jobs) EXCLUDES(core_lock);  // under one lock

  // --- for tests (read_model_debug.cpp) ---
  // The whole in-memory state as canonical text (nodes with sessions and what they hold, jobs with
  // their ranks, dying attempts, held launches): equal texts mean equal states.
  std::string DebugState() EXCLUDES(core_lock);
  // What a fresh Core loading the same store rebuilds: the active jobs' rows, and the nodes' rows
  // (without last_seen, which heartbeats renew in memory only) with the resources active jobs hold.
  std::string DurableState() EXCLUDES(core_lock);
  // Specs the core remembers (held by a job, or not yet swept): bounded by the live ones.
  size_t RememberedSpecsForTesting() EXCLUDES(core_lock);

 private:
  // TerminalOf (`terminal`) and PortOf.
  Result<RankTarget> RunningRank(int64_t job, int rank, bool terminal) EXCLUDES(core_lock);

  CoreState& s_;
  const Lifecycle& life_;
};

}  // namespace berth
