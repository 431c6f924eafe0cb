// CoreState: the server core's tables and its one transaction. Every service of the core
// (admission.h, scheduling.h, lifecycle.h, agent_sessions.h, read_model.h, and the job books of
// job_books.h) holds a reference to the one CoreState of its Core and shares its tables and its
// lock; the state itself decides nothing. Its methods are what every change does with a Txn
// (txn.h): Execute commits the batch, then applies the outbox (CountCommitted) and sends
// (SendCommitted), or undoes the memory changes when the commit fails (Undo).
//
// Thread-safety: the tables are guarded by `mu`. The thread-safety analysis knows holding it by one
// name, `core_lock`, whichever service holds it (each reaches the state through its own reference,
// and the analysis would see `s_.mu` of one and `other.s_.mu` of another as two locks): take it
// with CoreLock or HandlerLock, which lock `mu` and name `core_lock`; a method that needs it says
// REQUIRES(core_lock). The waiting board, the metrics, the group tallies (written under the lock,
// read without it) and the submit queue are thread-safe themselves.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
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
#include "server/core/notice_book.h"
#include "server/core/reservation.h"
#include "server/core/spec_cache.h"
#include "server/core/submit_queue.h"
#include "server/core/txn.h"
#include "server/core/usage_ledger.h"
#include "server/core/waiting_board.h"
#include "spec/idle_policy.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace berth {

struct CoreOptions {
  DurationMs lease_ms = 30'000;
  // MIG re-slicing (server/core/mig_changes.h): how long a GPU keeps a new layout (or waits after a
  // failed change) before it may be changed again, and how long its agent has to apply one.
  DurationMs mig_hold_ms = 10 * 60'000;
  DurationMs mig_change_timeout_ms = 5 * 60'000;
  DurationMs kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL, unless the job sets kill_grace
  // The time limit of an interactive job that sets none (0: none), so that a forgotten shell does
  // not hold its node for ever.
  DurationMs interactive_time_limit_ms = 24 * 3'600'000;
  // An interactive job that nobody has had a session with (attach, port-forward) for this long
  // ends (0: never), so that a detached, forgotten shell does not hold its node until its time
  // limit (Slurm's InactiveLimit).
  DurationMs interactive_idle_limit_ms = 0;
  // What happens to jobs whose GPUs stay idle: the cluster's (--idle-policy), teams' and pools'
  // (docs/idle.md); none: nothing.
  IdlePolicies idle_policies;
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
  // Topology levels across nodes, coarse to fine (--topology-levels; docs/topology.md).
  std::vector<std::string> topology_levels;
  // A node down for this long is gone for good: forgotten by memory (ForgetGoneNodes, and not
  // loaded at a restart), kept in the store; 0: never.
  DurationMs node_retention_ms = 7LL * 24 * 3'600'000;
};

// The name the thread-safety analysis gives the core's state lock (CoreState::mu), wherever it is
// held from. It is a name only: it has no state, and two Cores in one process (tests) each have
// their own `mu`.
class CAPABILITY("mutex") CoreLockName {};
inline CoreLockName core_lock;

// A node down for longer than `retention` (0: never gone).
bool GoneForGood(const NodeRow& row, TimeMs now, DurationMs retention);

// A job that holds resources, as the pass index files it (see CoreState::held_index).
struct HeldView {
  std::shared_ptr<const sched::RunningJob> view;  // built at generation `gen` of the job
  uint64_t gen = 0;
  std::optional<int64_t> group;
  bool time_limited = false;  // running, with a time limit: CheckTimeLimits looks at it
  bool holds_gpus = false;    // running, with GPUs: its usage so far counts for fair share
  TimeMs placed_at = 0;       // when its current attempt was placed
};

// A pending job as the pass index files it (see CoreState::pending_index): what a snapshot reads
// of it, copied at generation `gen` of the job, so that a pass walks one vector instead of 100,000
// jobs scattered over the heap (a cache miss or two each, under the lock).
struct PendingView {
  ActiveJob* job = nullptr;                    // into CoreState::jobs
  const sched::JobRequest* request = nullptr;  // job->request
  uint64_t gen = 0;
  std::optional<TimeMs> not_before;  // a restart's backoff
  bool awaits_dependencies = false;  // it has dependencies and was never placed
  bool operator==(const PendingView&) const = default;
};

// Cancel-all epochs (CoreState::cancel).
struct CancelSeqs {
  uint64_t seq = 0;                          // +1 per cancel-all
  uint64_t all_users_seq = 0;                // seq of the last --all-users
  std::map<std::string, uint64_t> user_seq;  // seq of each user's last --all
};

class CoreState {
 public:
  // `store`, `clock` and `channel` must outlive the state.
  CoreState(CoreOptions options, Store& store, const Clock& clock, AgentChannel& channel);
  CoreState(const CoreState&) = delete;
  CoreState& operator=(const CoreState&) = delete;

  // Tells the analysis that the caller holds the lock (for lambdas run under it).
  void AssertHeld() const BERTH_THREAD_ANNOTATION(assert_capability(core_lock)) {}

  // --- the one transaction ---
  // Commits the txn's batch; then runs its effects (CountCommitted, then SendCommitted), or undoes
  // its memory changes on failure (Undo) and answers Unavailable.
  Status Execute(Txn& txn) REQUIRES(core_lock);
  // `job` made editable in `txn` (JobTable::Edit: journaled before its first change there).
  ActiveJob& MutJob(Txn& txn, ActiveJob& job) REQUIRES(core_lock);
  // Journals the dying attempt `key`, and the held launches, before a change in `txn`.
  void SaveDying(Txn& txn, const AttemptKey& key) REQUIRES(core_lock);
  void SaveLaunchHeld(Txn& txn) REQUIRES(core_lock);
  void RequestPassLocked() REQUIRES(core_lock);
  // Wakes the log followers of `job` (its output grew, or it ended).
  void WakeLogWaiters(int64_t job) REQUIRES(core_lock);

  // --- specs ---
  // The spec `spec_id` (remembered, else read from the store); nullptr when it cannot be read.
  std::shared_ptr<const JobSpec> SpecFor(int64_t spec_id) REQUIRES(core_lock);
  // A spec read from the store (nullptr when it cannot be read); needs no lock.
  std::shared_ptr<const JobSpec> ReadSpec(int64_t spec_id);
  // Makes `spec` what SpecFor(spec_id) answers while some job holds it.
  void RememberSpec(int64_t spec_id, const std::shared_ptr<const JobSpec>& spec)
      REQUIRES(core_lock);
  // The scheduler's request of the job of `row`, running `spec`.
  sched::JobRequest RequestFor(const JobRow& row, const JobSpec& spec) const;

  // Between the chunks of a long change (a pass's decisions, a cancel --all), waits a little while
  // requests wait for the lock (HandlerLock), so that they take it first: std::mutex would let the
  // thread that just released it take it back before they wake. At most 20 ms.
  void LetWaitingHandlersIn() EXCLUDES(core_lock);
  // Writes the waiting reasons of the jobs of waiters `keys` ("waiting for job 10 (RUNNING)").
  void WriteDependencyReasons(const std::set<sched::Dependencies::Key>& keys) REQUIRES(core_lock);

  // --- the tables ---
  const CoreOptions options;
  Store& store;
  const Clock& clock;
  AgentChannel& channel;

  Mutex mu;
  std::atomic<int> handlers_waiting{0};  // callers blocked in HandlerLock
  std::atomic<int64_t> last_pass_with_work{0};
  // Monotonic time before which no pass starts (the pacing after a pass that decided nothing).
  // Written by RunPass without the lock, read by WaitForPassRequest under it.
  std::atomic<int64_t> pass_not_before{0};
  NodeTable nodes GUARDED_BY(core_lock);
  JobTable jobs GUARDED_BY(core_lock);       // non-terminal + terminating
  NodeJobs node_jobs GUARDED_BY(core_lock);  // which of jobs may be on each node
  // The pass index (job_books.h): what a snapshot needs of jobs, kept current by the changes
  // themselves, so that a pass learns what changed (pass_delta) and the walks of the
  // resource-holding jobs (usage, time limits) are not walks of every job. `pending_index`: every
  // pending job's PendingView, pointing into jobs (map nodes do not move; an erased job is touched
  // and leaves the index before the next snapshot); a map, as placements take entries from all over
  // a deep queue. `held_index`: every job that holds resources (active, or ended and still
  // stopping), with its scheduler view built once per change (generation `gen`), a vector sorted by
  // id (walked every 200 ms; the touched entries are merged in). `touched` holds the ids changed
  // since the last refresh; past an eighth of jobs (+ 64), the index is rebuilt from jobs instead
  // (`rebuild_index`), so it stays bounded by jobs.
  std::map<int64_t, PendingView> pending_index GUARDED_BY(core_lock);
  std::vector<std::pair<int64_t, HeldView>> held_index GUARDED_BY(core_lock);
  std::set<int64_t> touched GUARDED_BY(core_lock);
  bool rebuild_index GUARDED_BY(core_lock) = true;
  int index_rebuilds GUARDED_BY(core_lock) = 0;
  // What the scheduler thread's copy of the index lacks (pass_mirror.h): the ids whose entries
  // changed since the last snapshot (unsorted, repeats allowed), or, with `pass_delta_full`, all of
  // it (the first snapshot; after a rebuild; past half the jobs (+ 64): each change costs a
  // lookup, a few times the copy of an entry).
  std::vector<int64_t> pass_delta GUARDED_BY(core_lock);
  bool pass_delta_full GUARDED_BY(core_lock) = true;
  // Jobs per state, (pool, team) and pending user: berth_jobs, the dashboard's totals and
  // max-pending-jobs without a scan.
  JobCounts counts GUARDED_BY(core_lock);
  // Jobs of capped users' submissions admitted but not yet recorded (absent: none), so that
  // concurrent submissions cannot together exceed max-pending-jobs.
  std::unordered_map<std::string, int64_t> reserved_pending GUARDED_BY(core_lock);
  // Earlier attempts whose ranks still run, holding their resources until they are gone.
  DyingAttempts dying GUARDED_BY(core_lock);
  // Pipelines: the submissions waiting for dependencies, with their jobs.
  DependencyWaiters waiters GUARDED_BY(core_lock);
  // Cancels promised but not yet committed (job -> reason): a cancel of a job committed by a
  // submission not yet applied, or a cancel --all's cancel of an in-flight submission whose commit
  // failed. Such a job is never placed (PassEligible, pass_mirror.h), and the cancel is retried
  // until it is committed. Entries live from a promise to its commit (one housekeeping tick when
  // the store is up).
  std::map<int64_t, std::string> owed_cancels GUARDED_BY(core_lock);
  // Bulk groups' max_running, for groups with jobs in jobs.
  GroupLimits group_limits GUARDED_BY(core_lock);
  // Bulk groups' jobs per status, for groups with jobs in jobs. Changed under the lock (as jobs
  // changes), read without it.
  GroupTallies tallies;
  // Restarts waiting out a backoff: (not_before, job). Hints only: a stale one costs a pass.
  std::set<std::pair<TimeMs, int64_t>> backoffs GUARDED_BY(core_lock);
  std::set<int64_t> launch_held GUARDED_BY(core_lock);  // preemptors whose launch waits on
                                                        // launch_after
  // The specs jobs hold, and those sent to each node's session.
  SpecCache specs GUARDED_BY(core_lock);
  LogFollowers log_followers GUARDED_BY(core_lock);
  // Cancel-all epochs: a submission received before a `cancel --all` but committed after it is
  // cancelled too, so a cancel never misses a submission that was in flight (SkyPilot's did).
  CancelSeqs cancel GUARDED_BY(core_lock);
  std::function<void()> pass_hook GUARDED_BY(core_lock);
  bool pass_requested GUARDED_BY(core_lock) = false;
  bool shutdown GUARDED_BY(core_lock) = false;
  CondVar pass_cv;
  // Fair share: rules from Accounts, the usage ledger, and each team's recent reclaims.
  FairShare shares GUARDED_BY(core_lock);
  CoreMetrics metrics;  // thread-safe itself
  // Why pending jobs wait (its own lock: listings never wait for a pass or for the state lock).
  WaitingBoard waiting;
  // Group commit of submissions, and the idempotency keys lately committed
  // (server/core/submit_queue.h). Keys are remembered for 10 minutes: by then no writer that looked
  // its key up earlier is queued.
  SubmitQueue submits{options.max_group_commit_jobs, 10 * 60 * 1000};
  // Notifications: the users' sinks and what is owed (server/core/notices.h).
  NoticeBook notices GUARDED_BY(core_lock);
  // Operators' reservations, by name (server/core/reservations.h), and when the next window of
  // one starts or ends after the last pass (0: none): a pass is due then.
  std::map<std::string, Reservation> reservations GUARDED_BY(core_lock);
  TimeMs next_window_change GUARDED_BY(core_lock) = 0;
  // Rung after a commit that wrote notices: the sender (server/notify/notice_sender.h) waits on it.
  std::function<void()> notice_bell;  // set before Start; called under the lock, must not wait

 private:
  // Execute's steps. What a committed txn adds to the books: the usage ledger, the metrics,
  // reclaims, backoffs.
  void CountCommitted(const Txn& txn) REQUIRES(core_lock);
  // What a committed txn tells others: agents' sessions and messages, log followers, waiting
  // reasons; then it drops the jobs that ended for good and asks for a pass when it freed or
  // queued something.
  void SendCommitted(const Txn& txn) REQUIRES(core_lock);
  // Sends the node the spec a launch is about to use, unless its session has it already.
  void SendSpecOnce(const std::string& node, int64_t spec_id) REQUIRES(core_lock);
  void Undo(Txn& txn) REQUIRES(core_lock);
  // Drops the jobs `txn` finished for good (ended, processes gone) from memory.
  void ReapFinished(const Txn& txn) REQUIRES(core_lock);
  std::string DependencyReason(sched::Dependencies::Key key) const REQUIRES(core_lock);
};

// Holds the state lock for its scope; Unlock()/Lock() let a scope drop it for slow work.
class SCOPED_CAPABILITY CoreLock {
 public:
  explicit CoreLock(CoreState& s) ACQUIRE(core_lock, s.mu) : s_(s) { s_.mu.Lock(); }
  ~CoreLock() RELEASE() {
    if (held_) s_.mu.Unlock();
  }
  CoreLock(const CoreLock&) = delete;
  CoreLock& operator=(const CoreLock&) = delete;
  void Unlock() RELEASE() {
    held_ = false;
    s_.mu.Unlock();
  }
  void Lock() ACQUIRE() {
    s_.mu.Lock();
    held_ = true;
  }

 private:
  CoreState& s_;
  bool held_ = true;
};

// Takes the state lock for a caller that answers someone (a request handler): a pass applying a
// big batch lets such callers in between its chunks (LetWaitingHandlersIn; std::mutex alone would
// let the pass take it back first).
class SCOPED_CAPABILITY HandlerLock {
 public:
  explicit HandlerLock(CoreState& s) ACQUIRE(core_lock, s.mu) : s_(s) {
    s_.handlers_waiting.fetch_add(1);
    s_.mu.Lock();
    s_.handlers_waiting.fetch_sub(1);
  }
  ~HandlerLock() RELEASE() { s_.mu.Unlock(); }
  HandlerLock(const HandlerLock&) = delete;
  HandlerLock& operator=(const HandlerLock&) = delete;

 private:
  CoreState& s_;
};

}  // namespace berth
