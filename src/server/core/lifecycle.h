// Lifecycle: how a job's attempts move — placed, running, ended, requeued, restarted after a
// backoff, stopped and released — and what follows from an end: dependents released or cancelled,
// held launches sent, time limits and idle limits enforced, owed cancels retried. Every change is
// added to a Txn (txn.h) that the caller executes (CoreState::Execute), except the housekeeping
// checks (CheckTimeLimits, EndIdleInteractive, RetryFailedCancels), which take the lock and execute
// their own.
//
// Thread-safety: the REQUIRES(core_lock) methods run under the state lock (core_state.h); the
// EXCLUDES ones take it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "protocol/agent_protocol.h"
#include "server/core/core_state.h"
#include "server/core/job_books.h"

namespace berth {

class Lifecycle {
 public:
  Lifecycle(CoreState& state, JobBooks& books) : s_(state), books_(books) {}

  // --- housekeeping ---
  // Ends running jobs past their time limit (monotonic time since they started running).
  void CheckTimeLimits() EXCLUDES(core_lock);
  // Commits the cancellations promised but not committed yet: of jobs whose dependencies failed,
  // and those owed to a cancel (CoreState::owed_cancels). Housekeeping calls it with the other
  // checks.
  void RetryFailedCancels() EXCLUDES(core_lock);
  // Ends the running interactive jobs idle for longer than interactive_idle_limit_ms: no session
  // since `seen[job]` (monotonic; TerminalBridges::SeenAt), nor since they started running, nor
  // since `watching_since` (when the caller began to see sessions: a server that just started
  // or took over does not know who was attached before). Nothing when the limit is 0.
  void EndIdleInteractive(const std::map<int64_t, int64_t>& seen, int64_t watching_since)
      EXCLUDES(core_lock);
  // What a running attempt's sampled GPUs did so far (server/gpu_usage_table.h: its nodes'
  // heartbeats), every rank's GPUs known.
  struct GpuReading {
    int64_t job = 0;
    int attempt = 0;
    DurationMs idle_for = 0;  // the current idle spell (0: busy now)
    double mean_sm = 0;       // over the attempt so far
    DurationMs idle_ms = 0;   // idle in all, over the attempt so far
  };
  // Keeps each reading with its attempt (ActiveJob::gpu_use: its usage record counts GPU
  // efficiency and idle GPU time when it ends), and applies the idle policy
  // (CoreOptions::idle_policies: its pool's, team's or the cluster's; docs/idle.md) to those idle
  // now: an attempt idle past its warn window gets a warning event, one idle past its act window is
  // requeued or cancelled (with action none, reported in an event). `told` says what each attempt
  // was told in its current idle spell, so that each event comes once: the caller forgets an
  // attempt when its GPUs are busy again.
  void NoteGpuUse(const std::vector<GpuReading>& readings,
                  std::map<std::pair<int64_t, int>, IdleVerdict>& told) EXCLUDES(core_lock);

  // --- transitions ---
  // Moves `job` to `status` (recorded in txn; counts, tallies and dependents follow).
  void Transition(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason, TimeMs now)
      REQUIRES(core_lock);
  // Ends the job for good (its ranks are told to stop; its resources stay held until they are
  // gone).
  void EndJob(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
              std::optional<int> exit_code, TimeMs now) REQUIRES(core_lock);
  // Why an attempt goes back to the queue: each is counted in its own column of the job.
  enum class RequeueCause { kOther, kPreempted, kRestart };
  // Ends the current attempt (its processes are stopped; its resources stay held until they are
  // gone) and puts the job back in the queue. A restart records the attempt's failure (`outcome`,
  // `exit_code`) and waits out the retry policy's backoff.
  void ReturnToQueue(Txn& txn, ActiveJob& job, const std::string& reason, TimeMs now,
                     RequeueCause cause = RequeueCause::kOther,
                     std::optional<JobStatus> outcome = std::nullopt,
                     std::optional<int> exit_code = std::nullopt) REQUIRES(core_lock);
  // A failed attempt (`status`, `exit_code`): restarted when the job's retry policy allows it,
  // else the job ends. `out_of_memory`: the kernel killed it for its memory limit (restarted only
  // with retry.on_oom).
  void FailAttempt(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                   std::optional<int> exit_code, TimeMs now, bool out_of_memory = false)
      REQUIRES(core_lock);
  // A node's fault ends `job`'s attempt: requeued or failed, as its recovery.on_node_fault says.
  void EndForNodeFault(Txn& txn, ActiveJob& job, const std::string& why, TimeMs now)
      REQUIRES(core_lock);

  // --- launches and releases ---
  // Starts a new attempt of `job` on `placement` (STARTING; resources taken); `how` ends the
  // reason.
  void Place(Txn& txn, ActiveJob& job, const Placement& placement, const std::string& how,
             TimeMs now) REQUIRES(core_lock);
  void SendLaunches(Txn& txn, const ActiveJob& job) REQUIRES(core_lock);
  proto::LaunchMessage LaunchFor(const ActiveJob& job, int rank) const REQUIRES(core_lock);
  // The idle policy that applies to `job` (CoreOptions::idle_policies): its first rank's pool's,
  // else its team's, else the cluster's; null: none.
  const IdlePolicy* IdlePolicyOf(const ActiveJob& job) const REQUIRES(core_lock);
  // Where that policy comes from, as its flag says it ("--idle-policy ", "--team-idle-policy T=").
  std::string IdlePolicySource(const ActiveJob& job) const REQUIRES(core_lock);
  // The pool of the node its first rank runs on ("" when none).
  std::string PoolOf(const ActiveJob& job) const REQUIRES(core_lock);
  // Takes `gone` (a stopped attempt now gone) off the held launches' lists, and sends the launches
  // of preemptors left waiting on nothing.
  void LaunchUnblocked(Txn& txn, std::optional<AttemptKey> gone = std::nullopt) REQUIRES(core_lock);
  // A terminating job whose processes are all gone: frees its resources.
  void Release(Txn& txn, ActiveJob& job) REQUIRES(core_lock);
  // Marks rank `rank` of a dying attempt gone; frees the attempt's resources when it was the last.
  void DyingRankGone(Txn& txn, int64_t job, int attempt, int rank) REQUIRES(core_lock);

  // --- dependencies ---
  // Registers the dependencies of the submission whose jobs are first..last (`live` of them in
  // memory); cancels them when the dependencies can no longer hold. The waiter mirrors what is
  // committed (the submission), so it is not journaled: if the cancels' commit fails, they are
  // retried by RetryFailedCancels.
  void AddWaiter(Txn& txn, int64_t spec_id, std::vector<sched::DepCondition> conditions,
                 int64_t first, int64_t last, int live, TimeMs now) REQUIRES(core_lock);
  // Cancels the jobs of every waiter on txn.dep_failures, and of those their cancellation fails
  // in turn, unless an outer call is already doing it.
  void DrainDependencyFailures(Txn& txn, TimeMs now) REQUIRES(core_lock);

  // The usage of the job's current attempt from its placement until `now` (an attempt placed at an
  // unknown time counts none).
  UsageRecord UsageOf(const ActiveJob& job, TimeMs now) const REQUIRES(core_lock);

 private:
  void StopRanks(Txn& txn, const ActiveJob& job, const std::string& reason) REQUIRES(core_lock);
  // What the ranks used, once every rank reported it: the highest peak memory, the sum of CPU time.
  struct MeasuredUse {
    std::optional<int64_t> peak_memory_bytes;
    std::optional<int64_t> cpu_ms;
  };
  static MeasuredUse MeasuredUseOf(const ActiveJob& job);
  static void AddRankUsage(const ActiveJob& job, AttemptRow& attempt);
  // Running time of the current attempt so far (monotonic), 0 when it is not running.
  DurationMs RunningFor(const ActiveJob& job) const REQUIRES(core_lock);
  // Adds what the job's current attempt used to the txn (its usage record).
  void RecordUsage(Txn& txn, const ActiveJob& job, TimeMs now, bool job_ended, bool preempted)
      REQUIRES(core_lock);
  // A job ended for good: its dependents whose dependencies now hold are released, those whose
  // can no longer hold are cancelled (which cascades).
  void DependencyEnded(Txn& txn, const ActiveJob& job, TimeMs now) REQUIRES(core_lock);
  void CancelWaiters(Txn& txn, sched::Dependencies::Key key, const std::string& why, TimeMs now)
      REQUIRES(core_lock);
  // Retries cancellations of failed waiters whose commit failed.
  void RetryDependencyCancels() REQUIRES(core_lock);
  // Commits the cancels owed (CoreState::owed_cancels) of jobs that are in memory; an entry is
  // dropped once its job is cancelled (or ended otherwise).
  void RetryOwedCancels() REQUIRES(core_lock);

  CoreState& s_;
  JobBooks& books_;
};

}  // namespace berth
