// Job state transitions. Each one changes the in-memory job (through the txn's journal) and adds
// its writes (job row, event, attempt) and messages to the txn, which the caller executes.
#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"
#include "server/core/core.h"

namespace berth {

void Core::Transition(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                      TimeMs now) {
  MutJob(txn, job);
  job.row.status = status;
  job.row.reason = reason;
  TallyJob(txn, job);
  if (status == JobStatus::kRunning && !job.row.started_at) {
    job.row.started_at = now;
    job.running_since = clock_.Monotonic();
  }
  CountJob(job);
  txn.batch.jobs.push_back(job.row);
  txn.batch.events.push_back({job.row.id, JobEvent{now, status, job.row.attempt, reason, txn.by}});
  if (IsTerminal(status)) {
    txn.out.wake_logs.insert(job.row.id);
    txn.out.reap = true;
    DependencyEnded(txn, job, now);
  } else if (waiters_.size() > 0) {
    // Jobs waiting for this one show its status in their reason.
    for (auto key : waiters_.Watching(job.row.id, job.row.group)) txn.out.deps_changed.insert(key);
  }
}

Core::MeasuredUse Core::MeasuredUseOf(const ActiveJob& job) {
  // A partial sum would mislead (the efficiency divides by every rank's allotment): only when every
  // rank reported what it used.
  MeasuredUse use;
  for (const RankState& rank : job.ranks) {
    if (!rank.peak_memory_bytes && !rank.cpu_ms) return use;
  }
  for (const RankState& rank : job.ranks) {
    if (rank.peak_memory_bytes) {
      use.peak_memory_bytes = std::max(use.peak_memory_bytes.value_or(0), *rank.peak_memory_bytes);
    }
    if (rank.cpu_ms) use.cpu_ms = use.cpu_ms.value_or(0) + *rank.cpu_ms;
  }
  return use;
}

void Core::AddRankUsage(const ActiveJob& job, AttemptRow& attempt) {
  MeasuredUse use = MeasuredUseOf(job);
  attempt.peak_memory_bytes = use.peak_memory_bytes;
  attempt.cpu_ms = use.cpu_ms;
}

void Core::EndJob(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                  std::optional<int> exit_code, TimeMs now) {
  MutJob(txn, job);
  bool holds_resources = IsActive(job.row.status);
  job.row.exit_code = exit_code;
  job.row.ended_at = now;
  if (holds_resources && job.row.attempt > 0) {
    AttemptRow attempt;
    attempt.attempt = job.row.attempt;
    attempt.placement = job.row.placement;
    attempt.placed_at = job.placed_at;
    attempt.ended_at = now;
    attempt.outcome = status;
    attempt.reason = reason;
    attempt.exit_code = exit_code;
    AddRankUsage(job, attempt);
    txn.batch.attempts.push_back({job.row.id, attempt});
    RecordUsage(txn, job, now, true, status == JobStatus::kPreempted);
  }
  txn.out.events.finished.emplace_back(
      std::string(JobStatusName(status)),
      job.row.started_at ? static_cast<double>(now - *job.row.started_at) / 1000 : -1.0);
  Transition(txn, job, status, reason, now);
  txn.out.kick = true;
  if (!holds_resources) return;
  if (job.AllRanksExited()) {
    nodes_.Allocate(txn, job.row.placement, job.row.resources, -1);
  } else {
    // The user sees the end at once; the devices stay held until every process is really gone,
    // so that no new job lands on a GPU that a dying one still uses.
    job.terminating = true;
    CountJob(job);
    StopRanks(txn, job, reason);
  }
}

DurationMs Core::RunningFor(const ActiveJob& job) const {
  if (job.running_since == 0) return 0;
  return std::max<DurationMs>(0, clock_.Monotonic() - job.running_since);
}

void Core::ReturnToQueue(Txn& txn, ActiveJob& job, const std::string& reason, TimeMs now,
                         RequeueCause cause, std::optional<JobStatus> outcome,
                         std::optional<int> exit_code) {
  MutJob(txn, job);
  const bool preempted = cause == RequeueCause::kPreempted;
  RecordUsage(txn, job, now, false, preempted);
  // A restart keeps its place in the queue (the queue is ordered by id); the wait it is measured
  // by starts again.
  job.queued_at = now;
  job.row.run_ms += RunningFor(job);
  switch (cause) {
    case RequeueCause::kPreempted:
      ++job.row.preemptions;
      break;
    case RequeueCause::kRestart:
      ++job.row.restarts;
      break;
    case RequeueCause::kOther:
      ++job.row.requeues;
      break;
  }
  AttemptRow attempt;
  attempt.attempt = job.row.attempt;
  attempt.placement = job.row.placement;
  attempt.placed_at = job.placed_at;
  attempt.ended_at = now;
  attempt.outcome = outcome.value_or(JobStatus::kPending);
  attempt.reason = reason;
  attempt.exit_code = exit_code;
  AddRankUsage(job, attempt);
  txn.batch.attempts.push_back({job.row.id, attempt});
  StopRanks(txn, job, reason);
  DyingAttempt dying{job.row.placement, job.row.resources, {}};
  for (const auto& grant : job.row.placement) {
    auto node = nodes_.find(grant.node);
    bool exited =
        static_cast<size_t>(grant.rank) < job.ranks.size() && job.ranks[grant.rank].exited;
    bool node_down = node == nodes_.end() || node->second.row.state == NodeState::kDown;
    if (!exited && !node_down) dying.alive.insert(grant.rank);
  }
  if (dying.alive.empty()) {
    nodes_.Allocate(txn, job.row.placement, job.row.resources, -1);
  } else {
    // The old attempt keeps its resources until its processes are gone: no new job (nor this
    // job's next attempt) lands on devices it still uses.
    AttemptKey key{job.row.id, job.row.attempt};
    SaveDying(txn, key);
    dying_.Add(key, std::move(dying));
  }
  job.row.placement.clear();
  job.row.started_at.reset();
  job.running_since = 0;
  job.ranks.assign(job.ranks.size(), RankState{});
  std::string why = reason;
  if (cause == RequeueCause::kRestart) {
    const RetryPolicy& retry = job.spec->retry;
    why = fmt::format("{}; restart {} of {}", reason, job.row.restarts, retry.max_restarts);
    if (retry.backoff > 0) {
      job.row.not_before = now + retry.backoff;
      txn.out.backoffs.emplace_back(*job.row.not_before, job.row.id);
      why += ", after a backoff of " + FormatDuration(retry.backoff);
    }
  }
  Transition(txn, job, JobStatus::kPending, why, now);
  txn.out.kick = true;
}

void Core::FailAttempt(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                       std::optional<int> exit_code, TimeMs now, bool out_of_memory) {
  const RetryPolicy& retry = job.spec->retry;
  bool retryable = job.row.restarts < retry.max_restarts;  // `never`: max_restarts is 0
  if (out_of_memory) ++txn.out.events.out_of_memory;
  if (retryable && out_of_memory && !retry.on_oom) {
    // It would only run out again: restarted only when the task asks (retry.on_oom).
    EndJob(txn, job, status, reason + "; not restarted: retry.on_oom is not set", exit_code, now);
    return;
  }
  if (retryable && !retry.on_exit_codes.empty()) {
    retryable = exit_code && std::find(retry.on_exit_codes.begin(), retry.on_exit_codes.end(),
                                       *exit_code) != retry.on_exit_codes.end();
  }
  const bool used_up = retryable && job.spec->time_limit &&
                       job.spec->time_limit_scope == TimeLimitScope::kJob &&
                       job.row.run_ms + RunningFor(job) >= *job.spec->time_limit;
  if (used_up) {
    EndJob(txn, job, status,
           reason + "; not restarted: its time limit " + FormatDuration(*job.spec->time_limit) +
               " is used up",
           exit_code, now);
    return;
  }
  if (!retryable) {
    std::string why = reason;
    if (retry.max_restarts > 0 && job.row.restarts >= retry.max_restarts) {
      why +=
          fmt::format(" (after {} restart{})", job.row.restarts, job.row.restarts == 1 ? "" : "s");
    }
    EndJob(txn, job, status, why, exit_code, now);
    return;
  }
  // Every rank of a gang restarts together: the others are stopped, and the job is placed anew.
  ReturnToQueue(txn, job, reason, now, RequeueCause::kRestart, status, exit_code);
}

UsageRecord Core::UsageOf(const ActiveJob& job, TimeMs now) const {
  UsageRecord u;
  u.user = job.row.user;
  u.team = shares_.TeamOf(job.row.user);
  u.gpu_type = job.row.resources.gpu_type;
  u.gpu_milli = job.gpu_milli_held();
  u.cpu_milli = TotalCpuMilli(job.row.resources, job.row.placement);
  // An attempt whose placement time is unknown (its row could not be read at start-up) counts no
  // time rather than decades: the store refuses an attempt longer than a year.
  u.placed_at = job.placed_at > 0 && job.placed_at <= now ? job.placed_at : now;
  u.ended_at = now;
  u.wait_ms = std::max<DurationMs>(0, u.placed_at - job.queued_at);
  MeasuredUse use = MeasuredUseOf(job);
  u.cpu_used_ms = use.cpu_ms;
  u.peak_memory_bytes = use.peak_memory_bytes;
  u.memory_mib = job.row.resources.memory;
  return u;
}

void Core::RecordUsage(Txn& txn, const ActiveJob& job, TimeMs now, bool job_ended, bool preempted) {
  UsageRecord u = UsageOf(job, now);
  u.job_ended = job_ended;
  u.preempted = preempted;
  txn.batch.usage.push_back(std::move(u));
}

void Core::StopRanks(Txn& txn, const ActiveJob& job, const std::string& reason) {
  for (const auto& grant : job.row.placement) {
    if (static_cast<size_t>(grant.rank) < job.ranks.size() && job.ranks[grant.rank].exited) {
      continue;
    }
    auto it = nodes_.find(grant.node);
    if (it == nodes_.end() || it->second.row.state == NodeState::kDown) continue;
    txn.out.sends.emplace_back(grant.node,
                               proto::StopMessage{job.row.id, job.row.attempt, grant.rank, reason});
  }
}

Placement ActiveJob::HeldGrants() const {
  Placement held;
  for (const NodeGrant& grant : row.placement) {
    const size_t rank = static_cast<size_t>(grant.rank);
    if (rank >= ranks.size() || !ranks[rank].unheld) held.push_back(grant);
  }
  return held;
}

void Core::Release(Txn& txn, ActiveJob& job) {
  if (!job.terminating) return;
  MutJob(txn, job);
  nodes_.Allocate(txn, job.HeldGrants(), job.row.resources, -1);
  job.terminating = false;
  CountJob(job);
  // Followers of its logs were kept waiting while its processes stopped: now the log is complete.
  txn.out.wake_logs.insert(job.row.id);
  txn.out.reap = true;
  txn.out.kick = true;
  LaunchUnblocked(txn, AttemptKey{job.row.id, job.row.attempt});
}

void Core::DyingRankGone(Txn& txn, int64_t job, int attempt, int rank) {
  AttemptKey key{job, attempt};
  if (!dying_.count(key)) return;
  SaveDying(txn, key);
  std::optional<DyingAttempt> ended = dying_.RankGone(key, rank);
  if (!ended) return;
  nodes_.Allocate(txn, ended->Held(), ended->per_node, -1);
  txn.out.kick = true;
  LaunchUnblocked(txn, key);
}

void Core::LaunchUnblocked(Txn& txn, std::optional<AttemptKey> gone) {
  // Only the few jobs whose launch is held are looked at, not every active job: this runs on
  // every release of a stopped attempt.
  if (launch_held_.empty()) return;
  SaveLaunchHeld(txn);
  for (auto it = launch_held_.begin(); it != launch_held_.end();) {
    auto j = jobs_.find(*it);
    if (j == jobs_.end()) {
      it = launch_held_.erase(it);
      continue;
    }
    ActiveJob& job = j->second;
    if (gone && job.launch_after.count(*gone)) MutJob(txn, job).launch_after.erase(*gone);
    if (!job.launch_after.empty()) {
      ++it;
      continue;
    }
    it = launch_held_.erase(it);
    if (job.row.status != JobStatus::kStarting || job.terminating) continue;  // ended meanwhile
    SendLaunches(txn, job);
  }
}

proto::LaunchMessage Core::LaunchFor(const ActiveJob& job, int rank) const {
  proto::LaunchMessage m;
  m.job = job.row.id;
  m.attempt = job.row.attempt;
  m.rank = rank;
  m.num_nodes = job.row.num_nodes;
  m.spec_id = job.row.spec_id;
  m.name = job.row.name;
  m.user = job.row.user;
  for (const auto& grant : job.row.placement) {
    auto it = nodes_.find(grant.node);
    m.node_ips.push_back(it == nodes_.end() ? std::string() : it->second.row.address);
    if (grant.rank == rank) {
      for (const auto& g : grant.gpus) m.gpus.push_back(g.index);
    }
  }
  const ResourceRequest& r = job.row.resources;
  m.gpus_per_node = r.gpu_milli >= kMilliPerGpu ? static_cast<int>(r.gpu_milli / kMilliPerGpu)
                                                : (r.gpu_milli > 0 ? 1 : 0);
  if (job.row.group) {
    m.group = *job.row.group;
    m.group_rank = job.row.rank.value_or(0);
    m.num_jobs = job.group_size;
  }
  m.kill_grace_ms = job.spec->kill_grace.value_or(options_.kill_grace_ms);
  if (job.spec->signal && job.spec->time_limit) {
    // The warning goes out `before` the limit; the agent's supervisor times it from the start of
    // the run step, as the limit runs from the job's start of RUNNING.
    DurationMs left = *job.spec->time_limit;
    if (job.spec->time_limit_scope == TimeLimitScope::kJob) left -= job.row.run_ms;
    // With a job-wide limit the earlier attempts may have used up the warning time: none then
    // (a signal at once would kill a script that has not set its trap yet).
    if (left - job.spec->signal->before > 0) {
      m.warn_signal = job.spec->signal->number;
      m.warn_after_ms = left - job.spec->signal->before;
    }
  }
  return m;
}

void Core::SendLaunches(Txn& txn, const ActiveJob& job) {
  for (const auto& grant : job.row.placement) {
    if (nodes_.count(grant.node))
      txn.out.sends.emplace_back(grant.node, LaunchFor(job, grant.rank));
  }
}

void Core::Place(Txn& txn, ActiveJob& job, const Placement& placement, const std::string& how,
                 TimeMs now) {
  MutJob(txn, job);
  job.row.attempt += 1;
  job.row.not_before.reset();
  job.row.placement = placement;
  node_jobs_.Add(job.row.id, placement);
  job.row.started_at.reset();
  job.row.ended_at.reset();
  job.row.exit_code.reset();
  job.ranks.assign(static_cast<size_t>(job.row.num_nodes), RankState{});
  job.placed_at = now;
  job.running_since = 0;
  txn.out.events.placed.emplace_back(
      counts_.GroupNames(CountGroupOf(job)).second,  // the job's team
      static_cast<double>(std::max<TimeMs>(0, now - job.queued_at)) / 1000);
  std::vector<std::string> where;
  for (const auto& g : placement) {
    where.push_back(g.gpus.empty() ? g.node
                                   : fmt::format("{} (GPU {})", g.node, CudaVisibleDevices(g)));
  }
  Transition(txn, job, JobStatus::kStarting, "placed on " + Join(where, ", ") + how, now);
  AttemptRow attempt;
  attempt.attempt = job.row.attempt;
  attempt.placement = job.row.placement;
  attempt.placed_at = now;
  txn.batch.attempts.push_back({job.row.id, attempt});
  nodes_.Allocate(txn, job.row.placement, job.row.resources, +1);
}

}  // namespace berth
