// Core: the server's state machine — nodes, active jobs, leases, scheduling passes — without HTTP.
// The HTTP front (server/http/server.h) parses requests and calls it; unit tests call it directly
// with a fake clock, a fault-injecting store and a fake agent channel (tests/unit/server/).
//
// Commit, then apply, then send. Every state change (a pass, a report batch, a cancel, a drain, a
// registration, a lease expiry, a time limit) is built as a Txn: the store Batch, the in-memory
// changes and the messages for agents. The batch is committed first; only when it is durable do the
// messages go out and the log followers wake. The in-memory changes are made while the txn is
// built, each entry saved in the txn's undo journal before its first change; if the commit fails
// the journal restores every entry, nothing is sent, and the caller gets Unavailable (HTTP 503,
// retryable). Either way the state under the lock equals what a fresh server would load from the
// store (tests/unit/server/core_commit_test.cpp proves it for each kind of change).
//
// Scheduling off the lock. RunPass() copies a snapshot under the lock (node views and pending
// requests are cached per entry and rebuilt only when they change), runs the pure scheduler without
// the lock, then applies the decisions under the lock in chunks of `pass_commit_chunk`, each chunk
// one commit. A generation check drops decisions about jobs or nodes that changed meanwhile (a job
// cancelled, a node drained or re-registered, resources taken); they are retried in the next pass.
//
// Submissions are group-committed: concurrent Submit() calls queue, the first one writes the
// whole queue in one store transaction (LevelDB's writer queue), without holding the state lock.
//
// Time: wall time (Clock::Now) is what is stored and shown; leases, time limits and intervals run
// on monotonic time (Clock::Monotonic), so a step of the wall clock expires nothing.
//
// Thread-safety: every public method is thread-safe. The state is guarded by `mu_`; the pending
// jobs' waiting reasons are in a WaitingBoard with a lock of its own, so listings never wait for a
// pass.
// Methods never call back into their caller while holding a lock, except the log-waiter callbacks,
// which must only post work elsewhere.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"
#include "sched/dependencies.h"
#include "sched/scheduler.h"
#include "server/core/active_job.h"
#include "server/core/agent_channel.h"
#include "server/core/core_metrics.h"
#include "server/core/dependency_waiters.h"
#include "server/core/dying_attempts.h"
#include "server/core/fair_share.h"
#include "server/core/group_limits.h"
#include "server/core/group_tallies.h"
#include "server/core/job_counts.h"
#include "server/core/job_table.h"
#include "server/core/log_followers.h"
#include "server/core/node_jobs.h"
#include "server/core/node_table.h"
#include "server/core/spec_cache.h"
#include "server/core/submit_queue.h"
#include "server/core/txn.h"
#include "server/core/usage_ledger.h"
#include "server/core/waiting_board.h"
#include "server/listing.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace berth {

struct CoreOptions {
  DurationMs lease_ms = 30'000;
  DurationMs kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL, unless the job sets kill_grace
  // The time limit of an interactive job that sets none (0: none), so that a forgotten shell does
  // not hold its node for ever.
  DurationMs interactive_time_limit_ms = 24 * 3'600'000;
  // An interactive job that nobody has had a session with (attach, port-forward) for this long
  // ends (0: never), so that a detached, forgotten shell does not hold its node until its time
  // limit (Slurm's InactiveLimit).
  DurationMs interactive_idle_limit_ms = 0;
  DurationMs starvation_ms = 10 * 60'000;
  int max_jobs_per_submit = 100'000;
  size_t pass_commit_chunk = 500;  // decisions applied per commit (and per hold of the lock)
  // After a pass that decided nothing (jobs pending, none placed or preempting), the next pass
  // starts no sooner than this many times that pass's length after it ended (at most
  // max_pass_pacing_ms; 0: at once), so that a stream of submissions into a queue that cannot move
  // costs at most 1/(1 + pacing) of a CPU in passes instead of a whole one (docs/design.md).
  int fruitless_pass_pacing = 3;
  DurationMs max_pass_pacing_ms = 1'000;
  int max_group_commit_jobs = 200'000;  // jobs written in one group commit of submissions
  // Fair share (docs/fair-share.md).
  UsageConfig usage;                 // half-life and GPU weights
  double admission_charge_s = 3600;  // each weighted GPU held counts as this much use in advance
  int reclaim_limit = 3;             // reclaims per team within reclaim_window
  DurationMs reclaim_window = 60'000;
  // A node down for this long is gone for good: forgotten by memory (ForgetGoneNodes, and not
  // loaded at a restart), kept in the store; 0: never.
  DurationMs node_retention_ms = 7LL * 24 * 3'600'000;
};

// The numbers behind a waiting job's reason, from the last pass that considered it.
// What an attempt that still runs has used so far: a UsageRecord ending now.
using RunningUsage = UsageRecord;

struct SubmitRequest {
  JobSpec spec;
  std::string user;
  int count = 1;
  bool as_group = false;       // a bulk group: jobs get ranks 0..count-1
  bool depend_on_any = false;  // its dependencies may name other users' jobs (an operator)
  // The client's idempotency key ("": none; docs/api.md): a submission sent again with the same key
  // by the same user is answered with the jobs the first one made instead of making more.
  std::string key;
};

struct CancelRequest {
  std::vector<int64_t> ids;
  bool all = false;        // every job of `user`
  bool all_users = false;  // every job
  std::optional<int64_t> group;
  std::string user;         // who asks
  bool cancel_any = false;  // may cancel other users' jobs (an operator); else they are forbidden
  std::string why;          // said after "cancelled by USER: " ("local cluster stopped"); "" none
};

struct CancelAnswer {
  std::vector<int64_t> cancelled;
  std::vector<int64_t> already_finished;
  std::vector<int64_t> not_found;
  std::vector<int64_t> forbidden;  // other users' jobs, named by id, that the asker may not cancel
};

// A node as `berth nodes` shows it: its row and what its jobs hold.
struct NodeStatus {
  NodeRow row;
  MilliCpu cpus_used = 0;
  Mib memory_used = 0;
  std::map<int, MilliGpu> gpu_used;  // device index -> milli-GPUs held
  std::string isolation;             // RegisterRequest::isolation of its agent
  Mib job_memory_default = 0;        // RegisterRequest::job_memory_default_mib (0: none enforced)
  proto::NodeHealth health;          // what its agent's probes found last (docs/operators.md)
};

class Core {
 public:
  // `store`, `clock` and `channel` must outlive the Core.
  Core(CoreOptions options, Store& store, const Clock& clock, AgentChannel& channel);
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Loads nodes and active jobs from the store. Call once, before anything else.
  Status Load() EXCLUDES(mu_);

  // --- users ---
  // Checks feasibility, then records the jobs (group-committed with concurrent submissions).
  // Infeasible: the job can never run on this cluster; Unavailable: the store failed (nothing
  // kept).
  Result<SubmitAnswer> Submit(SubmitRequest request) EXCLUDES(mu_);
  Result<CancelAnswer> Cancel(const CancelRequest& request) EXCLUDES(mu_);
  // Stops the running attempt of `job` and puts it back in the queue (its next attempt starts
  // afresh), on the request of `user`; `any` lets them requeue other users' jobs (an operator).
  // Forbidden (not theirs), NotFound, Conflict (pending already, or ended), Unavailable.
  Status Requeue(int64_t job, const std::string& user, bool any) EXCLUDES(mu_);
  // Sets (or, with nullopt, lifts) bulk group `group`'s max_running, on the request of `user`;
  // `any` lets them change other users' groups (an operator). NotFound, Forbidden, Unavailable.
  Status SetGroupLimit(int64_t group, std::optional<int> max_running, const std::string& user,
                       bool any) EXCLUDES(mu_);
  // A group's max_running now (none: no limit).
  std::optional<int> GroupLimit(int64_t group) EXCLUDES(mu_);
  // A bulk group as memory knows it while it has jobs there (group_tallies.h; without the core's
  // lock); nullopt when it has none, or no tally: ask the store.
  std::optional<GroupTallies::Tally> TalliedGroup(int64_t group) const {
    return tallies_.Find(group);
  }
  // The status counts of those of `groups` that memory tallies; the others are left out.
  std::map<int64_t, std::map<JobStatus, int>> TalliedGroupCounts(
      const std::vector<int64_t>& groups) const {
    return tallies_.Counts(groups);
  }
  // NotFound for an unknown node; Unavailable when the change could not be recorded.
  // `by` is recorded in the audit log. Undraining with `force` also clears a drain by the node's
  // health probes (the agent forgets its faults and probes afresh); without it such a drain stays.
  Result<NodeStatus> Drain(const std::string& node, bool drain, const std::string& by = "",
                           bool force = false) EXCLUDES(mu_);
  std::vector<NodeStatus> Nodes() EXCLUDES(mu_);
  // When node `node` was last heard from; nullopt when the cluster does not know it (never joined,
  // or forgotten: ForgetGoneNodes).
  std::optional<TimeMs> NodeLastSeen(const std::string& node) EXCLUDES(mu_);
  // The memory limit each of `placement`'s nodes gives a job that asked for none (0: none
  // enforced; a node not known is left out), for `berth show`: not a copy of every node.
  std::map<std::string, Mib> JobMemoryDefaults(const Placement& placement) EXCLUDES(mu_);
  // Who holds each GPU device now: node -> device index -> (job, user), for the GPU maps of
  // `berth top` (and `GET /v1/nodes?holders=1`). Walks the active jobs under the lock.
  using Holder = std::pair<int64_t, std::string>;
  std::map<std::string, std::map<int, std::vector<Holder>>> DeviceHolders() EXCLUDES(mu_);
  // Why a pending job waits (the last pass's reason), or "".
  std::string WaitingReason(int64_t job) { return waiting_.Reason(job); }
  // The reason with its numbers; nullopt when no pass has considered the job.
  std::optional<WaitingDetail> WaitingDetailOf(int64_t job) { return waiting_.Detail(job); }

  // --- fair share ---
  // The users' caps and teams, as Accounts holds them; call at start and after every change.
  void SetShareRules(const std::vector<UserRow>& users, const std::vector<TeamRow>& teams)
      EXCLUDES(mu_);
  // Rebuilds the decayed usage from the store's hourly rollup (after Load).
  Status LoadUsage() EXCLUDES(mu_);
  // The attempts that hold resources now, as records ending now (for `berth usage`).
  std::vector<RunningUsage> RunningAttempts() EXCLUDES(mu_);
  // The team a user is in now ("" = the default team).
  std::string TeamOf(const std::string& user) EXCLUDES(mu_);
  // Decayed usage (ended and running attempts) of a team, weighted GPU-seconds.
  double TeamUsage(const std::string& team) EXCLUDES(mu_);
  // Who holds GPUs of `type` now: (user, team, milli-GPUs), most first.
  std::vector<std::tuple<std::string, std::string, MilliGpu>> Holders(const std::string& type)
      EXCLUDES(mu_);
  // What each team's active jobs hold now: team -> GPU type -> milli-GPUs.
  std::map<std::string, std::map<std::string, MilliGpu>> TeamHoldings() EXCLUDES(mu_);
  std::unordered_map<int64_t, std::string> WaitingReasons(const std::vector<int64_t>& jobs) {
    return waiting_.Reasons(jobs);
  }
  // The in-memory row of an active (or still stopping) job, and whether its output may still grow.
  std::optional<std::pair<JobRow, bool>> ActiveJobRow(int64_t job) EXCLUDES(mu_);
  // Where a user reaches rank `rank` of job `job` (server/http/terminal_bridges.h): the job's row
  // and that rank's node. NotFound for no active job; Conflict for a job not RUNNING (the reason
  // says its status); Invalid for a rank it does not have. TerminalOf is for its terminal, and is
  // also Conflict for a job that is not interactive; PortOf for a port-forward, of any running job.
  struct RankTarget {
    JobRow row;
    std::string node;
  };
  Result<RankTarget> TerminalOf(int64_t job, int rank) EXCLUDES(mu_);
  Result<RankTarget> PortOf(int64_t job, int rank) EXCLUDES(mu_);
  // The active jobs, for `berth queue` (from ActiveEntries): bulk groups with an active job (with
  // its newest active member) and the ids of active jobs in no group, newest first. `user` and
  // `team` filter when set (`team` "-" is the default team).
  struct QueueOverview {
    std::vector<std::pair<int64_t, int64_t>> groups;  // (group, its newest active job)
    std::vector<int64_t> ungrouped;
  };
  QueueOverview Overview(const listing::RowFilter& filter) EXCLUDES(mu_);

  // --- the dashboard (core_dashboard.cpp) ---
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
  Totals ClusterTotals() EXCLUDES(mu_);
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
  std::vector<QueueEntry> ActiveEntries(const listing::RowFilter& filter) EXCLUDES(mu_);

  // --- log followers ---
  // Calls `fire` once when output for `job` arrives or the job ends for good. Returns nullopt (and
  // never calls `fire`) when attempt `attempt` of the job is no longer live. `fire` may run under
  // the core's lock: it must only post work to another thread.
  std::optional<uint64_t> AddLogWaiter(int64_t job, int attempt, std::function<void()> fire)
      EXCLUDES(mu_);
  void RemoveLogWaiter(int64_t job, uint64_t id) EXCLUDES(mu_);
  void LogsAppended(int64_t job) EXCLUDES(mu_);
  void LogsAppended(const std::set<int64_t>& jobs) EXCLUDES(mu_);  // under one lock

  // --- agents ---
  // Starts a new session for the node (replacing any earlier one) and reconciles what the agent
  // says it runs with what the store says should run. Conflict: the name is held by another live
  // agent. Unavailable: the registration could not be recorded (nothing changed).
  Result<proto::RegisterAnswer> Register(const proto::RegisterRequest& request,
                                         const std::string& remote_address) EXCLUDES(mu_);
  // Renews the node's lease. Conflict: not the node's current session.
  Result<proto::HeartbeatAnswer> Heartbeat(const std::string& node, const std::string& session)
      EXCLUDES(mu_);
  // Takes the node's health (docs/operators.md "Node health"): a node-level fault keeps it from
  // new jobs, a GPU's fault makes that GPU unallocatable and ends the attempts that hold it (their
  // recovery.on_node_fault applies). Conflict: unknown session. Unavailable: not recorded.
  Result<proto::HealthAnswer> ReportHealth(const proto::HealthRequest& request) EXCLUDES(mu_);
  // Applies a batch of reports all or nothing; entries that could not be decoded, or name nothing
  // applicable, are answered one by one. Conflict: unknown session. Unavailable: not recorded.
  Result<std::vector<proto::ReportResult>> Report(const proto::ReportBatch& request) EXCLUDES(mu_);
  // Ends the node's agent session now (its credential was revoked): its calls are refused from here
  // on (Conflict), its watch stream ends, and its lease runs out as a silent node's does.
  void EndSession(const std::string& node) EXCLUDES(mu_);
  // Whether `session` is the node's current session.
  bool SessionIs(const std::string& node, const std::string& session) EXCLUDES(mu_);
  // For a log append: checks the session, and that rank `rank` of the job's attempt `attempt` is
  // (or was) placed on `node` (Forbidden otherwise: a node writes only its own jobs' logs); returns
  // the prefix each line of `rank` gets in the interleaved log of a multi-node job ("" for a
  // single-node job). An ended attempt's placement is read from the store.
  Result<std::string> LogPrefix(const std::string& node, const std::string& session, int64_t job,
                                int attempt, int rank) EXCLUDES(mu_);
  // LogPrefix for each rank of a log batch, taking the state lock once (and reading each ended
  // attempt's placement from the store once, after it).
  std::vector<Result<std::string>> LogPrefixes(const std::string& node, const std::string& session,
                                               const std::vector<proto::AttemptRank>& ranks)
      EXCLUDES(mu_);
  // For a spec read: Ok when `session` is the node's and job `job`, of spec `spec_id`, is placed on
  // it now; else Conflict (session) or Forbidden.
  Status MayReadSpec(const std::string& node, const std::string& session, int64_t job,
                     int64_t spec_id) EXCLUDES(mu_);
  // For a node's fetch of uploaded blobs: the manifests (workdir_upload, file_mounts) of job `job`
  // when it is placed on `node` now, whose session `session` is; else Conflict or Forbidden.
  Result<std::vector<std::string>> JobUploads(const std::string& node, const std::string& session,
                                              int64_t job) EXCLUDES(mu_);
  // The manifests the jobs not ended yet name (their uploads must stay); Unavailable when one's
  // spec is not in memory (then nothing may be collected this time).
  Result<std::set<std::string>> LiveUploads() EXCLUDES(mu_);

  // --- metrics (docs/monitoring.md) ---
  // What the core did: counters and histograms, updated as changes are applied.
  const CoreMetrics& metrics() const { return metrics_; }
  // Writes the gauges of the state as it is now: jobs by status, pool and team; pending jobs by
  // reason class, user and team (as of the last pass); GPUs by type and state, overall and per
  // node; nodes by state. Holds the core's lock for one walk of the active jobs and the nodes.
  void WriteGauges(metrics::ExpositionWriter& out) EXCLUDES(mu_);
  // The class of a waiting reason, for berth_pending_jobs{reason=...}: "resources", "preempting",
  // "reclaiming", "user_cap", "group_cap", "team_borrow_limit", "reservation", "no_node",
  // "invalid", "other".
  static std::string_view ReasonClass(std::string_view reason);

  // --- housekeeping and scheduling ---
  // Marks down nodes whose lease ran out (monotonic time) and ends or requeues their jobs.
  void CheckLeases() EXCLUDES(mu_);
  // Forgets the nodes down for longer than options.node_retention_ms (their rows stay in the
  // store; the name is free again, also for a join). Answers how many went.
  size_t ForgetGoneNodes() EXCLUDES(mu_);
  // Ends running jobs past their time limit (monotonic time since they started running).
  void CheckTimeLimits() EXCLUDES(mu_);
  // Commits the cancellations promised but not committed yet: of jobs whose dependencies failed,
  // and those owed to a cancel (owed_cancels_). Housekeeping calls it with the other checks.
  void RetryFailedCancels() EXCLUDES(mu_);
  // Ends the running interactive jobs idle for longer than interactive_idle_limit_ms: no session
  // since `seen[job]` (monotonic; TerminalBridges::SeenAt), nor since they started running, nor
  // since `watching_since` (when the caller began to see sessions: a server that just started
  // or took over does not know who was attached before). Nothing when the limit is 0.
  void EndIdleInteractive(const std::map<int64_t, int64_t>& seen, int64_t watching_since)
      EXCLUDES(mu_);
  void RequestPass() EXCLUDES(mu_);
  // Waits up to `timeout_ms` for RequestPass(); true (and the request taken) when there was one,
  // or when a team's reclaim has left its rate-limit window since (a held job may reclaim now),
  // and the pacing after a pass that decided nothing is over (CoreOptions::fruitless_pass_pacing);
  // false with the request kept while that pacing lasts.
  bool WaitForPassRequest(DurationMs timeout_ms) EXCLUDES(mu_);
  // One scheduling pass. Returns false when a commit failed (the rest is retried by a later pass).
  bool RunPass() EXCLUDES(mu_);
  // Monotonic time the last pass that had pending jobs ended (0: none yet).
  int64_t last_pass_with_work() const { return last_pass_with_work_.load(); }
  // Wakes WaitForPassRequest and drops the log waiters (their connections are being closed).
  void Shutdown() EXCLUDES(mu_);

  const CoreOptions& options() const { return options_; }

  // --- for tests (core_debug.cpp) ---
  // The whole in-memory state as canonical text (nodes with sessions and what they hold, jobs with
  // their ranks, dying attempts, held launches): equal texts mean equal states.
  std::string DebugState() EXCLUDES(mu_);
  // What a fresh Core loading the same store rebuilds: the active jobs' rows, and the nodes' rows
  // (without last_seen, which heartbeats renew in memory only) with the resources active jobs hold.
  std::string DurableState() EXCLUDES(mu_);
  // Adds `observer` to the jobs' books: it hears every job enter memory, change, be restored by an
  // undo and leave (job_table.h), with the state lock held. Before Load, to hear the loaded jobs.
  void AddJobObserver(JobTable::Observer* observer) EXCLUDES(mu_);
  // Runs `hook` in every RunPass between the scheduler's decision and its application, without
  // the lock: lets a test change the state while a pass is deciding.
  void SetPassHookForTesting(std::function<void()> hook) EXCLUDES(mu_);
  // Whether the job counts kept for /metrics (CountJob) equal a count of every active job now.
  bool JobCountsConsistentForTesting() EXCLUDES(mu_);
  // Whether the pass index, brought up to date, equals a walk of every job.
  bool PassIndexConsistentForTesting() EXCLUDES(mu_);
  // Whether every group tally equals the store's counts of the group, and its jobs in memory are
  // those counted as there (group_tallies.h). False when the store cannot be read.
  bool GroupTalliesConsistentForTesting() EXCLUDES(mu_);
  // How many times the pass index was rebuilt from every job (the first snapshot is one).
  int PassIndexRebuildsForTesting() EXCLUDES(mu_);
  // Specs the core remembers (held by a job, or not yet swept): bounded by the live ones.
  size_t RememberedSpecsForTesting() EXCLUDES(mu_);
  // Forgets the specs no job holds any more (SpecCache::Sweep); the server does before an idle
  // heap trim.
  void ForgetUnheldSpecs() EXCLUDES(mu_);
  // Submissions waiting in the group-commit queue (the one writing included).
  size_t QueuedSubmissionsForTesting();

 private:
  // TerminalOf (`terminal`) and PortOf.
  Result<RankTarget> RunningRank(int64_t job, int rank, bool terminal) EXCLUDES(mu_);

  using RankState = berth::RankState;
  using ActiveJob = berth::ActiveJob;
  // A job that holds resources, as the pass index files it (see held_index_).
  struct HeldView {
    std::shared_ptr<const sched::RunningJob> view;  // built at generation `gen` of the job
    uint64_t gen = 0;
    std::optional<int64_t> group;
    bool time_limited = false;  // running, with a time limit: CheckTimeLimits looks at it
    bool holds_gpus = false;    // running, with GPUs: its usage so far counts for fair share
    TimeMs placed_at = 0;       // when its current attempt was placed
  };
  // A pending job as the pass index files it (see pending_index_): what a snapshot reads of it,
  // copied at generation `gen` of the job, so that a pass walks one vector instead of 100,000 jobs
  // scattered over the heap (a cache miss or two each, under the lock).
  struct PendingView {
    ActiveJob* job = nullptr;                    // into jobs_
    const sched::JobRequest* request = nullptr;  // job->request
    uint64_t gen = 0;
    std::optional<TimeMs> not_before;  // a restart's backoff
    bool awaits_dependencies = false;  // it has dependencies and was never placed
    bool operator==(const PendingView&) const = default;
  };
  struct CancelSeqs {
    uint64_t seq = 0;                          // +1 per cancel-all
    uint64_t all_users_seq = 0;                // seq of the last --all-users
    std::map<std::string, uint64_t> user_seq;  // seq of each user's last --all
  };

  // A pass's input, taken under the lock: the snapshot and the generations it saw. The pending
  // jobs' requests are noted there as (id, request) only, and copied into snapshot.pending by
  // ExpandPending once the lock is released: a request is immutable and shared by the jobs of a
  // submission, so that a submission waits for a pointer per pending job, not a copy of each
  // (100,000 of them took a third of a pass's time under the lock).
  struct PassInput {
    sched::Snapshot snapshot;
    std::vector<std::pair<int64_t, uint64_t>> job_gens;  // (id, gen), sorted by id
    std::unordered_map<std::string, uint64_t> node_gens;
    std::vector<std::pair<int64_t, const sched::JobRequest*>> pending;  // id order
    std::vector<std::shared_ptr<const sched::JobRequest>> keep;  // what `pending` points into
  };
  // Fills in.snapshot.pending from in.pending (and lets the requests go). Needs no lock.
  static void ExpandPending(PassInput& in);

  // Takes mu_ for a caller that answers someone (a request handler): a pass applying a big batch
  // lets such callers in between its chunks (std::mutex alone would let the pass take it back
  // first).
  class SCOPED_CAPABILITY HandlerLock {
   public:
    explicit HandlerLock(Core* core) ACQUIRE(core->mu_) : core_(core) {
      core_->handlers_waiting_.fetch_add(1);
      core_->mu_.Lock();
      core_->handlers_waiting_.fetch_sub(1);
    }
    ~HandlerLock() RELEASE() { core_->mu_.Unlock(); }
    HandlerLock(const HandlerLock&) = delete;
    HandlerLock& operator=(const HandlerLock&) = delete;

   private:
    Core* core_;
  };

  // Between the chunks of a long change (a pass's decisions, a cancel --all), waits a little while
  // requests wait for the lock (HandlerLock), so that they take it first: std::mutex would let the
  // thread that just released it take it back before they wake. At most 20 ms.
  void LetWaitingHandlersIn() EXCLUDES(mu_);

  // core.cpp: txns — commit, then apply (CountCommitted), then send (SendCommitted).
  ActiveJob& MutJob(Txn& txn, ActiveJob& job) REQUIRES(mu_);
  void SaveDying(Txn& txn, const AttemptKey& key) REQUIRES(mu_);
  void SaveLaunchHeld(Txn& txn) REQUIRES(mu_);
  // Commits the txn's batch; then runs its effects (CountCommitted, then SendCommitted), or undoes
  // its memory changes on failure (Undo).
  Status Execute(Txn& txn) REQUIRES(mu_);
  // What a committed txn adds to the books: the usage ledger, the metrics, reclaims, backoffs.
  void CountCommitted(const Txn& txn) REQUIRES(mu_);
  // What a committed txn tells others: agents' sessions and messages, log followers, waiting
  // reasons; then it drops the jobs that ended for good and asks for a pass when it freed or
  // queued something.
  void SendCommitted(const Txn& txn) REQUIRES(mu_);
  // Sends the node the spec a launch is about to use, unless its session has it already.
  void SendSpecOnce(const std::string& node, int64_t spec_id) REQUIRES(mu_);
  void Undo(Txn& txn) REQUIRES(mu_);
  void RequestPassLocked() REQUIRES(mu_);
  void WakeLogWaiters(int64_t job) REQUIRES(mu_);
  std::shared_ptr<const JobSpec> SpecFor(int64_t spec_id) REQUIRES(mu_);
  // A spec read from the store (nullptr when it cannot be read); needs no lock.
  std::shared_ptr<const JobSpec> ReadSpec(int64_t spec_id);
  // Makes `spec` what SpecFor(spec_id) answers while some job holds it.
  void RememberSpec(int64_t spec_id, const std::shared_ptr<const JobSpec>& spec) REQUIRES(mu_);
  // Drops the jobs `txn` finished for good (ended, processes gone) from memory.
  void ReapFinished(const Txn& txn) REQUIRES(mu_);
  static sched::JobRequest RequestFor(const JobRow& row, const JobSpec& spec);
  // The ids of the jobs in memory that may be placed on `node` (NodeJobs: check each one's
  // placement), rebuilding the index first when it is due.
  std::vector<int64_t> JobsOn(const std::string& node) REQUIRES(mu_);
  // The warning for a job whose request some of `candidates` (NodesThatCouldHold) would not
  // enforce: nodes whose agent isolates nothing (RegisterRequest::isolation "none: ..."); "" when
  // every one enforces it.
  std::string UnenforcedLimits(const std::vector<std::string>& candidates,
                               const JobSpec& spec) const REQUIRES(mu_);
  // A submission of a container job that no node of its pool can run, saying why by the fields
  // the user wrote: no node runs containers (when `feasible` is false), or none allows its
  // container.mounts. Ok otherwise.
  Status CheckContainerPlacement(const JobSpec& spec, bool feasible) REQUIRES(mu_);

  // core_jobs.cpp: job state transitions, each adding its writes to the txn.
  // Keeps counts_ current (core_gauges.cpp): CountJob counts a job where
  // it belongs now (moving it from where it was counted), UncountJob takes it out (it leaves
  // jobs_).
  void CountJob(ActiveJob& job) REQUIRES(mu_);
  // Notes the job's move in its group's tally to its status now, for once `txn` is committed
  // (Transition calls it).
  void TallyJob(Txn& txn, ActiveJob& job) REQUIRES(mu_);
  // Starts the tallies of the groups of the jobs just loaded, from the store's counts.
  Status LoadGroupTallies() REQUIRES(mu_);
  // The count group of (pool, user's team); a job's, looked up once and kept with it.
  uint32_t CountGroup(const std::string& pool, const std::string& user) REQUIRES(mu_);
  uint32_t CountGroupOf(ActiveJob& job) REQUIRES(mu_);
  void UncountJob(ActiveJob& job) REQUIRES(mu_);
  // Adds the job where `job.counted` says it is counted (CountJob, and Undo restoring a job).
  void AddToCounts(const ActiveJob& job) REQUIRES(mu_);
  void RecountAllJobs() REQUIRES(mu_);
  void Transition(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason, TimeMs now)
      REQUIRES(mu_);
  void EndJob(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
              std::optional<int> exit_code, TimeMs now) REQUIRES(mu_);
  void StopRanks(Txn& txn, const ActiveJob& job, const std::string& reason) REQUIRES(mu_);
  // Why an attempt goes back to the queue: each is counted in its own column of the job.
  enum class RequeueCause { kOther, kPreempted, kRestart };
  // Ends the current attempt (its processes are stopped; its resources stay held until they are
  // gone) and puts the job back in the queue. A restart records the attempt's failure (`outcome`,
  // `exit_code`) and waits out the retry policy's backoff.
  void ReturnToQueue(Txn& txn, ActiveJob& job, const std::string& reason, TimeMs now,
                     RequeueCause cause = RequeueCause::kOther,
                     std::optional<JobStatus> outcome = std::nullopt,
                     std::optional<int> exit_code = std::nullopt) REQUIRES(mu_);
  // What the ranks used, once every rank reported it: the highest peak memory, the sum of CPU time.
  struct MeasuredUse {
    std::optional<int64_t> peak_memory_bytes;
    std::optional<int64_t> cpu_ms;
  };
  static MeasuredUse MeasuredUseOf(const ActiveJob& job);
  static void AddRankUsage(const ActiveJob& job, AttemptRow& attempt);
  // A failed attempt (`status`, `exit_code`): restarted when the job's retry policy allows it,
  // else the job ends. `out_of_memory`: the kernel killed it for its memory limit (restarted only
  // with retry.on_oom).
  void FailAttempt(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                   std::optional<int> exit_code, TimeMs now, bool out_of_memory = false)
      REQUIRES(mu_);
  // Running time of the current attempt so far (monotonic), 0 when it is not running.
  DurationMs RunningFor(const ActiveJob& job) const REQUIRES(mu_);

  // core_pipelines.cpp: dependencies, group limits, backoffs.
  // What the store says of a submission's dependencies, read before the state lock is taken (a
  // round trip each on PostgreSQL): the rows of the jobs it names, each group's owner and counts.
  struct DependencyRows {
    std::map<int64_t, JobRow> jobs;
    std::map<int64_t, Store::GroupInfo> groups;
    std::map<int64_t, std::map<JobStatus, int>> counts;
  };
  DependencyRows ReadDependencyRows(const JobSpec& spec) EXCLUDES(mu_);
  // The conditions of `spec`'s dependencies as they stand now (the store agrees with memory under
  // the lock). What `read` holds is used where it cannot have changed since it was read: an ended
  // job's row, a group none of whose jobs ended since; the rest is read from the store here.
  // InvalidArgument/NotFound/Forbidden name what is wrong.
  Result<std::vector<sched::DepCondition>> DependencyConditions(
      const JobSpec& spec, const std::string& user, bool any_owner,
      const DependencyRows* read = nullptr) REQUIRES(mu_);
  // A group's owner and its jobs per status, from `read` when still true, else from the store.
  // NotFound for an unknown group; Unavailable when the store failed.
  Result<std::pair<std::string, std::map<JobStatus, int>>> GroupCounts(int64_t group,
                                                                       const DependencyRows* read)
      REQUIRES(mu_);
  // Registers the dependencies of the submission whose jobs are first..last (`live` of them in
  // memory); cancels them when the dependencies can no longer hold. The waiter mirrors what is
  // committed (the submission), so it is not journaled: if the cancels' commit fails, they are
  // retried by RetryFailedCancels.
  void AddWaiter(Txn& txn, int64_t spec_id, std::vector<sched::DepCondition> conditions,
                 int64_t first, int64_t last, int live, TimeMs now) REQUIRES(mu_);
  // Cancels the jobs of every waiter on txn.dep_failures, and of those their cancellation fails
  // in turn, unless an outer call is already doing it.
  void DrainDependencyFailures(Txn& txn, TimeMs now) REQUIRES(mu_);
  // Retries cancellations of failed waiters whose commit failed.
  void RetryDependencyCancels() REQUIRES(mu_);
  // Commits the cancels owed (owed_cancels_) of jobs that are in memory; an entry is dropped once
  // its job is cancelled (or ended otherwise).
  void RetryOwedCancels() REQUIRES(mu_);
  // A job ended for good: its dependents whose dependencies now hold are released, those whose
  // can no longer hold are cancelled (which cascades).
  void DependencyEnded(Txn& txn, const ActiveJob& job, TimeMs now) REQUIRES(mu_);
  void CancelWaiters(Txn& txn, sched::Dependencies::Key key, const std::string& why, TimeMs now)
      REQUIRES(mu_);
  // Whether pending job `id` may be placed now: its dependencies hold, its backoff is over and no
  // cancel of it is owed.
  bool Eligible(int64_t id, const PendingView& job, TimeMs now) const REQUIRES(mu_);
  // Writes the waiting reasons of the jobs of waiters `keys` ("waiting for job 10 (RUNNING)").
  void WriteDependencyReasons(const std::set<sched::Dependencies::Key>& keys) REQUIRES(mu_);
  std::string DependencyReason(sched::Dependencies::Key key) const REQUIRES(mu_);
  // Adds what the job's current attempt used to the txn (its usage record).
  // The usage of the job's current attempt from its placement until `now` (an attempt placed at an
  // unknown time counts none).
  UsageRecord UsageOf(const ActiveJob& job, TimeMs now) const REQUIRES(mu_);
  void RecordUsage(Txn& txn, const ActiveJob& job, TimeMs now, bool job_ended, bool preempted)
      REQUIRES(mu_);
  // The snapshot's users and teams: rules, decayed usage (running attempts included), reclaims.
  void AddShares(sched::Snapshot& snap) REQUIRES(mu_);
  // A terminating job whose processes are all gone: frees its resources.
  void Release(Txn& txn, ActiveJob& job) REQUIRES(mu_);
  // Marks rank `rank` of a dying attempt gone; frees the attempt's resources when it was the last.
  void DyingRankGone(Txn& txn, int64_t job, int attempt, int rank) REQUIRES(mu_);
  // Takes `gone` (a stopped attempt now gone) off the held launches' lists, and sends the launches
  // of preemptors left waiting on nothing.
  void LaunchUnblocked(Txn& txn, std::optional<AttemptKey> gone = std::nullopt) REQUIRES(mu_);
  void SendLaunches(Txn& txn, const ActiveJob& job) REQUIRES(mu_);
  proto::LaunchMessage LaunchFor(const ActiveJob& job, int rank) const REQUIRES(mu_);
  // Starts a new attempt of `job` on `placement` (STARTING; resources taken); `how` ends the
  // reason.
  void Place(Txn& txn, ActiveJob& job, const Placement& placement, const std::string& how,
             TimeMs now) REQUIRES(mu_);

  // core_scheduling.cpp
  PassInput BuildPassInput(TimeMs now) REQUIRES(mu_);
  // The core's own books per job, kept by watching the job table (core_job_books.cpp): the counts
  // (CountJob), the group tallies' membership, the pass index (Touch) and NodeJobs. Called by
  // jobs_ with mu_ held.
  class JobBooks final : public JobTable::Observer {
   public:
    explicit JobBooks(Core* core) : core_(core) {}
    void Entered(ActiveJob& job) override;
    void Left(ActiveJob& job) override;
    void Edited(const ActiveJob& job) override;
    void Restored(ActiveJob* was, ActiveJob& job) override;

   private:
    Core* const core_;
  };
  friend class JobBooks;

  // The pass index (core_scheduling.cpp): Touch notes that job `id` was added, changed or removed;
  // RefreshPassIndex brings the index up to date with the touched jobs.
  void Touch(int64_t id) REQUIRES(mu_);
  void RefreshPassIndex() REQUIRES(mu_);
  // Job `id`'s entry for held_index_ if it holds resources (`job` null: erased; `was`: its entry
  // before, reused while the job's generation is the same).
  std::optional<HeldView> IndexJob(int64_t id, ActiveJob* job, std::optional<HeldView> was)
      REQUIRES(mu_);
  // Its entry for pending_index_.
  static PendingView PendingViewOf(ActiveJob& job);
  // Whether the index equals a walk of every job (checked before each snapshot in debug builds).
  bool PassIndexConsistent() REQUIRES(mu_);
  // Whether the nodes of `placement` are as the pass saw them (else the decision is dropped).
  bool NodesUnchanged(const Placement& placement,
                      const std::unordered_map<std::string, uint64_t>& gens) REQUIRES(mu_);
  void NoteNodeGens(const Placement& placement, std::unordered_map<std::string, uint64_t>& gens)
      REQUIRES(mu_);
  sched::Config PassConfig() const;
  // Whether job `id` is as the pass saw it (its generation in the snapshot).
  bool AsPassSaw(const PassInput& in, int64_t id) REQUIRES(mu_);
  // RunPass's decisions, applied to `txn` if the state is still as the pass saw it (else false).
  bool ApplyPlacement(Txn& txn, const sched::PlaceDecision& d, PassInput& in, TimeMs now)
      REQUIRES(mu_);
  bool ApplyPreemption(Txn& txn, const sched::PreemptDecision& d, PassInput& in, TimeMs now)
      REQUIRES(mu_);

  // core_agents.cpp
  Result<NodeRuntime*> Authenticate(const std::string& node, const std::string& session)
      REQUIRES(mu_);
  static Status NotPlacedHere(const std::string& node, int64_t job, int attempt, int rank);
  // Where attempt `attempt` of `job` runs while it is live (placed now, or dying): nullptr
  // otherwise.
  const Placement* LivePlacement(int64_t job, int attempt) const REQUIRES(mu_);
  // Attempts an agent runs that are not in memory (a restart forgot them): read from the store.
  struct ForgottenAttempts {
    std::map<int64_t, JobRow> rows;                           // terminal jobs the agent still runs
    std::map<int64_t, std::vector<AttemptRow>> attempts;      // earlier attempts of active jobs
    std::map<int64_t, std::shared_ptr<const JobSpec>> specs;  // of the terminal rows, by spec id
  };
  ForgottenAttempts ReadForgotten(const std::set<std::tuple<int64_t, int, int>>& running)
      EXCLUDES(mu_);
  // Rank `rank` of an earlier attempt `key`, which node `node`'s agent still runs: held (its grant
  // allocated) when it was placed on that node; ignored otherwise.
  void HoldDyingRank(Txn& txn, const std::string& node, const AttemptKey& key, int rank,
                     const ResourceRequest& per_node, const ForgottenAttempts& forgotten)
      REQUIRES(mu_);
  void HoldEndedAttempts(Txn& txn, const NodeRuntime& node,
                         const std::set<std::tuple<int64_t, int, int>>& running,
                         const ForgottenAttempts& forgotten) REQUIRES(mu_);
  // Sets the node's health; ends the attempts that hold a GPU it finds faulty.
  void ApplyHealth(Txn& txn, NodeRuntime& node, proto::NodeHealth health, TimeMs now) REQUIRES(mu_);
  // A node's fault ends `job`'s attempt: requeued or failed, as its recovery.on_node_fault says.
  void EndForNodeFault(Txn& txn, ActiveJob& job, const std::string& why, TimeMs now) REQUIRES(mu_);
  static NodeStatus StatusOf(const NodeRuntime& node);
  proto::ReportResult ApplyReport(Txn& txn, NodeRuntime& node, const proto::Report& report,
                                  TimeMs now) REQUIRES(mu_);
  // ApplyReport's two longer cases: a rank pulling its image (the reason shows the progress), and
  // a rank's exit (recorded in its RankState already) deciding how the attempt ends.
  void ApplyPulling(Txn& txn, ActiveJob& job, const proto::Report& r, TimeMs now) REQUIRES(mu_);
  void ApplyExit(Txn& txn, ActiveJob& job, const NodeRuntime& node, const proto::Report& r,
                 TimeMs now) REQUIRES(mu_);

  // core_users.cpp
  // A submission in the queue (submits_), with what the core needs to record it.
  struct SubmitWriter : SubmitQueue::Entry {
    SubmitRequest* request = nullptr;
    uint64_t received_at_seq = 0;       // cancel_.seq when it arrived
    std::string spec_json;              // the spec as stored
    int64_t reserved_pending = 0;       // jobs it holds in reserved_pending_ until it is applied
    DependencyRows dependencies;        // read before the lock, for the checks made under it
    std::vector<std::string> warnings;  // SubmitAnswer::warnings, found at admission
  };
  // The jobs a cancel names: its ids, then those its filter (all, all users, group) selects now;
  // each once.
  std::vector<int64_t> CancelTargets(const CancelRequest& request) REQUIRES(mu_);
  // The jobs a cancel did not find in memory: unknown, ended, or committed by a submission not yet
  // applied (those are cancelled now, or owed to the apply). Unavailable when the store could not
  // say which (what was cancelled stays cancelled).
  Status CancelUnknown(const CancelRequest& request, const std::vector<int64_t>& unknown,
                       CancelAnswer& answer) EXCLUDES(mu_);
  // A committed submission into memory: its jobs (AddSubmittedJobs), its group's limit, the cancels
  // that caught it in flight (CancelOnArrival) and its dependencies; those cancels are committed,
  // or owed when that fails.
  void ApplySubmitted(SubmitWriter& writer, const SubmitResult& stored, TimeMs now) REQUIRES(mu_);
  void AddSubmittedJobs(const SubmitRequest& request, const SubmitResult& stored,
                        const std::shared_ptr<const JobSpec>& shared, TimeMs now) REQUIRES(mu_);
  // Ends the jobs `ids` just applied that a cancel promised to end: a cancel of their id between
  // their commit and now (owed_cancels_), or all of them when a cancel --all caught them in flight.
  // Returns (job, why) of each.
  std::vector<std::pair<int64_t, std::string>> CancelOnArrival(Txn& txn,
                                                               const std::vector<int64_t>& ids,
                                                               bool cancelled_in_flight, TimeMs now)
      REQUIRES(mu_);
  // Submit's steps. The checks that need no state, and the server's defaults in the spec.
  Status PrepareSubmission(SubmitRequest& request) const;
  // The checks against the cluster and the user's limits; reserves the jobs under max-pending-jobs.
  Status AdmitLocked(SubmitWriter& writer) REQUIRES(mu_);
  // Records an admitted submission in one store commit with those queued beside it; its answer.
  Result<SubmitAnswer> CommitInGroup(SubmitWriter& writer) EXCLUDES(mu_);
  static std::vector<Submission> SubmissionsOf(const std::vector<SubmitQueue::Entry*>& writing,
                                               TimeMs now);
  // Memory after the group's commit (or its failure): reservations released, jobs added.
  void ApplyGroupLocked(const std::vector<SubmitQueue::Entry*>& group,
                        const std::vector<SubmitQueue::Entry*>& writing,
                        const Result<std::vector<SubmitResult>>& stored, TimeMs now) REQUIRES(mu_);

  const CoreOptions options_;
  Store& store_;
  const Clock& clock_;
  AgentChannel& channel_;

  Mutex mu_;
  std::atomic<int> handlers_waiting_{0};  // callers blocked in HandlerLock
  std::atomic<int64_t> last_pass_with_work_{0};
  // Monotonic time before which no pass starts (the pacing after a pass that decided nothing).
  // Written by RunPass without the lock, read by WaitForPassRequest under it.
  std::atomic<int64_t> pass_not_before_{0};
  NodeTable nodes_ GUARDED_BY(mu_);
  JobTable jobs_ GUARDED_BY(mu_);       // non-terminal + terminating
  NodeJobs node_jobs_ GUARDED_BY(mu_);  // which of jobs_ may be on each node
  JobBooks books_{this};                // subscribed to jobs_ first
  // The pass index: what a snapshot needs of jobs_, kept current by the changes themselves, so that
  // taking a snapshot walks the pending and the resource-holding jobs, not a tree of every job.
  // Both are vectors sorted by id (a walk of 100,000 tree nodes scattered over the heap was most of
  // a snapshot's cost; the touched entries are merged in). `pending_index_`: every pending job's
  // PendingView, pointing into jobs_ (map nodes do not move; an erased job is touched and leaves
  // the index before the next snapshot). `held_index_`: every job that holds resources (active,
  // or ended and still stopping), with its scheduler view built once per change (generation
  // `gen`). `touched_` holds the ids changed since the last snapshot; past an eighth of jobs_
  // (+ 64), the index is rebuilt from jobs_ instead (`rebuild_index_`), so it stays bounded by
  // jobs_.
  std::vector<std::pair<int64_t, PendingView>> pending_index_ GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, HeldView>> held_index_ GUARDED_BY(mu_);
  std::set<int64_t> touched_ GUARDED_BY(mu_);
  bool rebuild_index_ GUARDED_BY(mu_) = true;
  int index_rebuilds_ GUARDED_BY(mu_) = 0;
  // Jobs per state, (pool, team) and pending user: berth_jobs, the dashboard's totals and
  // max-pending-jobs without a scan.
  JobCounts counts_ GUARDED_BY(mu_);
  // Jobs of capped users' submissions admitted but not yet recorded (absent: none), so that
  // concurrent submissions cannot together exceed max-pending-jobs.
  std::unordered_map<std::string, int64_t> reserved_pending_ GUARDED_BY(mu_);
  // Earlier attempts whose ranks still run, holding their resources until they are gone.
  DyingAttempts dying_ GUARDED_BY(mu_);
  // Pipelines: the submissions waiting for dependencies, with their jobs.
  DependencyWaiters waiters_ GUARDED_BY(mu_);
  // Cancels promised but not yet committed (job -> reason): a cancel of a job committed by a
  // submission not yet applied, or a cancel --all's cancel of an in-flight submission whose commit
  // failed. Such a job is never placed (Eligible), and the cancel is retried until it is committed.
  // Entries live from a promise to its commit (one housekeeping tick when the store is up).
  std::map<int64_t, std::string> owed_cancels_ GUARDED_BY(mu_);
  // Bulk groups' max_running, for groups with jobs in jobs_.
  GroupLimits group_limits_ GUARDED_BY(mu_);
  // Bulk groups' jobs per status, for groups with jobs in jobs_. Changed under mu_ (as jobs_
  // changes), read without it.
  GroupTallies tallies_;
  // Restarts waiting out a backoff: (not_before, job). Hints only: a stale one costs a pass.
  std::set<std::pair<TimeMs, int64_t>> backoffs_ GUARDED_BY(mu_);
  std::set<int64_t> launch_held_ GUARDED_BY(mu_);  // preemptors whose launch waits on launch_after
  // The specs jobs hold, and those sent to each node's session.
  SpecCache specs_ GUARDED_BY(mu_);
  LogFollowers log_followers_ GUARDED_BY(mu_);
  // Cancel-all epochs: a submission received before a `cancel --all` but committed after it is
  // cancelled too, so a cancel never misses a submission that was in flight (SkyPilot's did).
  CancelSeqs cancel_ GUARDED_BY(mu_);
  std::function<void()> pass_hook_ GUARDED_BY(mu_);
  bool pass_requested_ GUARDED_BY(mu_) = false;
  bool shutdown_ GUARDED_BY(mu_) = false;
  CondVar pass_cv_;

  // Fair share: rules from Accounts, the usage ledger, and each team's recent reclaims.
  FairShare shares_ GUARDED_BY(mu_);
  CoreMetrics metrics_;  // thread-safe itself

  // Why pending jobs wait (its own lock: listings never wait for a pass or for mu_).
  WaitingBoard waiting_;

  // Group commit of submissions, and the idempotency keys lately committed
  // (server/core/submit_queue.h). Keys are remembered for 10 minutes: by then no writer that looked
  // its key up earlier is queued.
  SubmitQueue submits_{options_.max_group_commit_jobs, 10 * 60 * 1000};
};

}  // namespace berth
