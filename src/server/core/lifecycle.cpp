// Lifecycle: transitions, launches, ends, dependencies and the housekeeping checks.
#include "server/core/lifecycle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/json_util.h"
#include "common/log.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "net/tls.h"
#include "server/core/notices.h"

namespace berth {

void Lifecycle::Transition(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                           TimeMs now) {
  s_.MutJob(txn, job);
  const JobStatus from = job.row.status;
  job.row.status = status;
  job.row.reason = reason;
  books_.TallyJob(txn, job);
  if (status == JobStatus::kRunning && !job.row.started_at) {
    job.row.started_at = now;
    job.running_since = s_.clock.Monotonic();
  }
  books_.CountJob(job);
  txn.batch.jobs.push_back(job.row);
  txn.batch.events.push_back({job.row.id, JobEvent{now, status, job.row.attempt, reason, txn.by}});
  NoticeTransition(s_, txn, job, from, now);
  if (IsTerminal(status)) {
    txn.out.wake_logs.insert(job.row.id);
    txn.out.reap = true;
    DependencyEnded(txn, job, now);
  } else if (s_.waiters.size() > 0) {
    // Jobs waiting for this one show its status in their reason.
    for (auto key : s_.waiters.Watching(job.row.id, job.row.group))
      txn.out.deps_changed.insert(key);
  }
}

Lifecycle::MeasuredUse Lifecycle::MeasuredUseOf(const ActiveJob& job) {
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

void Lifecycle::AddRankUsage(const ActiveJob& job, AttemptRow& attempt) {
  MeasuredUse use = MeasuredUseOf(job);
  attempt.peak_memory_bytes = use.peak_memory_bytes;
  attempt.cpu_ms = use.cpu_ms;
}

void Lifecycle::EndJob(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
                       std::optional<int> exit_code, TimeMs now) {
  s_.MutJob(txn, job);
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
    s_.nodes.Allocate(txn, job.row.placement, job.row.resources, -1);
  } else {
    // The user sees the end at once; the devices stay held until every process is really gone,
    // so that no new job lands on a GPU that a dying one still uses.
    job.terminating = true;
    books_.CountJob(job);
    StopRanks(txn, job, reason);
  }
}

DurationMs Lifecycle::RunningFor(const ActiveJob& job) const {
  if (job.running_since == 0) return 0;
  return std::max<DurationMs>(0, s_.clock.Monotonic() - job.running_since);
}

void Lifecycle::ReturnToQueue(Txn& txn, ActiveJob& job, const std::string& reason, TimeMs now,
                              RequeueCause cause, std::optional<JobStatus> outcome,
                              std::optional<int> exit_code) {
  s_.MutJob(txn, job);
  const bool preempted = cause == RequeueCause::kPreempted;
  RecordUsage(txn, job, now, false, preempted);
  if (preempted || cause == RequeueCause::kRestart)
    NoticeRequeue(s_, txn, job, preempted, reason, now);
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
    auto node = s_.nodes.find(grant.node);
    bool exited =
        static_cast<size_t>(grant.rank) < job.ranks.size() && job.ranks[grant.rank].exited;
    bool node_down = node == s_.nodes.end() || node->second.row.state == NodeState::kDown;
    if (!exited && !node_down) dying.alive.insert(grant.rank);
  }
  if (dying.alive.empty()) {
    s_.nodes.Allocate(txn, job.row.placement, job.row.resources, -1);
  } else {
    // The old attempt keeps its resources until its processes are gone: no new job (nor this
    // job's next attempt) lands on devices it still uses.
    AttemptKey key{job.row.id, job.row.attempt};
    s_.SaveDying(txn, key);
    s_.dying.Add(key, std::move(dying));
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

void Lifecycle::FailAttempt(Txn& txn, ActiveJob& job, JobStatus status, const std::string& reason,
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

UsageRecord Lifecycle::UsageOf(const ActiveJob& job, TimeMs now) const {
  UsageRecord u;
  u.user = job.row.user;
  u.team = s_.shares.TeamOf(job.row.user);
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
  // What its sampled GPUs did, as its nodes last said (NoteGpuUse): for GPU efficiency and idle
  // GPU time in `berth usage`.
  if (job.gpu_use && job.gpu_use->attempt == job.row.attempt) {
    u.gpu_mean_sm = job.gpu_use->mean_sm;
    u.gpu_idle_ms = job.gpu_use->idle_ms;
  }
  return u;
}

void Lifecycle::RecordUsage(Txn& txn, const ActiveJob& job, TimeMs now, bool job_ended,
                            bool preempted) {
  UsageRecord u = UsageOf(job, now);
  u.job_ended = job_ended;
  u.preempted = preempted;
  txn.batch.usage.push_back(std::move(u));
}

void Lifecycle::StopRanks(Txn& txn, const ActiveJob& job, const std::string& reason) {
  for (const auto& grant : job.row.placement) {
    if (static_cast<size_t>(grant.rank) < job.ranks.size() && job.ranks[grant.rank].exited) {
      continue;
    }
    auto it = s_.nodes.find(grant.node);
    if (it == s_.nodes.end() || it->second.row.state == NodeState::kDown) continue;
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

void Lifecycle::Release(Txn& txn, ActiveJob& job) {
  if (!job.terminating) return;
  s_.MutJob(txn, job);
  s_.nodes.Allocate(txn, job.HeldGrants(), job.row.resources, -1);
  job.terminating = false;
  books_.CountJob(job);
  // Followers of its logs were kept waiting while its processes stopped: now the log is complete.
  txn.out.wake_logs.insert(job.row.id);
  txn.out.reap = true;
  txn.out.kick = true;
  LaunchUnblocked(txn, AttemptKey{job.row.id, job.row.attempt});
}

void Lifecycle::DyingRankGone(Txn& txn, int64_t job, int attempt, int rank) {
  AttemptKey key{job, attempt};
  if (!s_.dying.count(key)) return;
  s_.SaveDying(txn, key);
  std::optional<DyingAttempt> ended = s_.dying.RankGone(key, rank);
  if (!ended) return;
  s_.nodes.Allocate(txn, ended->Held(), ended->per_node, -1);
  txn.out.kick = true;
  LaunchUnblocked(txn, key);
}

void Lifecycle::LaunchUnblocked(Txn& txn, std::optional<AttemptKey> gone) {
  // Only the few jobs whose launch is held are looked at, not every active job: this runs on
  // every release of a stopped attempt.
  if (s_.launch_held.empty()) return;
  s_.SaveLaunchHeld(txn);
  for (auto it = s_.launch_held.begin(); it != s_.launch_held.end();) {
    auto j = s_.jobs.find(*it);
    if (j == s_.jobs.end()) {
      it = s_.launch_held.erase(it);
      continue;
    }
    ActiveJob& job = j->second;
    if (gone && job.launch_after.count(*gone)) s_.MutJob(txn, job).launch_after.erase(*gone);
    if (!job.launch_after.empty()) {
      ++it;
      continue;
    }
    it = s_.launch_held.erase(it);
    if (job.row.status != JobStatus::kStarting || job.terminating) continue;  // ended meanwhile
    SendLaunches(txn, job);
  }
}

proto::LaunchMessage Lifecycle::LaunchFor(const ActiveJob& job, int rank) const {
  proto::LaunchMessage m;
  m.job = job.row.id;
  m.attempt = job.row.attempt;
  m.rank = rank;
  m.num_nodes = job.row.num_nodes;
  m.spec_id = job.row.spec_id;
  m.name = job.row.name;
  m.user = job.row.user;
  for (const auto& grant : job.row.placement) {
    auto it = s_.nodes.find(grant.node);
    m.node_ips.push_back(it == s_.nodes.end() ? std::string() : it->second.row.address);
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
  m.kill_grace_ms = job.spec->kill_grace.value_or(s_.options.kill_grace_ms);
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
  // The agent judges the rank's GPUs idle by its policy's threshold.
  if (const IdlePolicy* idle = IdlePolicyOf(job); idle && !m.gpus.empty())
    m.idle_below = idle->below;
  return m;
}

std::string Lifecycle::PoolOf(const ActiveJob& job) const {
  if (job.row.placement.empty()) return "";
  auto node = s_.nodes.find(job.row.placement[0].node);
  return node == s_.nodes.end() ? "" : node->second.row.pool;
}

const IdlePolicy* Lifecycle::IdlePolicyOf(const ActiveJob& job) const {
  // The policy of the pool its first rank runs in, else of its team, else the cluster's.
  return s_.options.idle_policies.For(s_.shares.TeamOf(job.row.user), PoolOf(job));
}

std::string Lifecycle::IdlePolicySource(const ActiveJob& job) const {
  return s_.options.idle_policies.Source(s_.shares.TeamOf(job.row.user), PoolOf(job));
}

void Lifecycle::SendLaunches(Txn& txn, const ActiveJob& job) {
  for (const auto& grant : job.row.placement) {
    if (s_.nodes.count(grant.node))
      txn.out.sends.emplace_back(grant.node, LaunchFor(job, grant.rank));
  }
}

void Lifecycle::Place(Txn& txn, ActiveJob& job, const Placement& placement, const std::string& how,
                      TimeMs now) {
  s_.MutJob(txn, job);
  job.row.attempt += 1;
  job.row.not_before.reset();
  job.row.placement = placement;
  s_.node_jobs.Add(job.row.id, placement);
  job.row.started_at.reset();
  job.row.ended_at.reset();
  job.row.exit_code.reset();
  job.ranks.assign(static_cast<size_t>(job.row.num_nodes), RankState{});
  job.placed_at = now;
  job.running_since = 0;
  txn.out.events.placed.emplace_back(
      s_.counts.GroupNames(books_.CountGroupOf(job)).second,  // the job's team
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
  s_.nodes.Allocate(txn, job.row.placement, job.row.resources, +1);
}

void Lifecycle::RetryOwedCancels() {
  if (s_.owed_cancels.empty()) return;
  TimeMs now = s_.clock.Now();
  Txn txn;
  std::vector<int64_t> settled;
  for (const auto& [id, why] : s_.owed_cancels) {
    auto it = s_.jobs.find(id);
    if (it == s_.jobs.end()) continue;  // not applied yet: its submission's apply cancels it
    if (!it->second.terminating && !IsTerminal(it->second.row.status)) {
      EndJob(txn, it->second, JobStatus::kCancelled, why, std::nullopt, now);
    }
    settled.push_back(id);
  }
  txn.out.reap = true;
  if (s_.Execute(txn).ok()) {
    for (int64_t id : settled) s_.owed_cancels.erase(id);
  }
}

void Lifecycle::EndForNodeFault(Txn& txn, ActiveJob& job, const std::string& why, TimeMs now) {
  if (job.spec->on_node_fault == RecoveryAction::kRequeue) {
    ReturnToQueue(txn, job, why + "; requeued", now);
  } else {
    EndJob(txn, job, JobStatus::kFailed, why, std::nullopt, now);
  }
}

void Lifecycle::EndIdleInteractive(const std::map<int64_t, int64_t>& seen, int64_t watching_since) {
  const DurationMs limit = s_.options.interactive_idle_limit_ms;
  if (limit <= 0) return;
  CoreLock lock(s_);
  const int64_t mono = s_.clock.Monotonic();
  if (mono - watching_since <= limit) return;
  TimeMs now = s_.clock.Now();
  Txn txn;
  for (auto& [id, job] : s_.jobs) {
    if (job.terminating || job.row.status != JobStatus::kRunning || !job.spec->interactive ||
        job.running_since == 0) {
      continue;
    }
    int64_t active = std::max(job.running_since, watching_since);
    if (auto it = seen.find(id); it != seen.end()) active = std::max(active, it->second);
    if (mono - active <= limit) continue;
    EndJob(txn, job, JobStatus::kFailed,
           "idle limit " + FormatDuration(limit) +
               " exceeded: no one attached to the interactive job (the server's "
               "--interactive-idle-limit)",
           std::nullopt, now);
  }
  if (txn.batch.empty()) return;
  txn.out.reap = true;
  txn.out.kick = true;
  Status st = s_.Execute(txn);
  if (!st.ok()) LogError("idle limits are enforced at the next check: {}", st.message());
}

void Lifecycle::NoteGpuUse(const std::vector<GpuReading>& readings,
                           std::map<std::pair<int64_t, int>, IdleVerdict>& told) {
  CoreLock lock(s_);
  const TimeMs now = s_.clock.Now();
  Txn txn;
  std::vector<std::pair<int64_t, int>> told_now;
  for (const GpuReading& i : readings) {
    auto it = s_.jobs.find(i.job);
    if (it == s_.jobs.end()) continue;
    ActiveJob& job = it->second;
    if (job.terminating || job.row.status != JobStatus::kRunning || job.row.attempt != i.attempt) {
      continue;
    }
    // Kept for the attempt's usage record (UsageOf), whatever the policy.
    job.gpu_use =
        ActiveJob::GpuUse{.attempt = i.attempt, .mean_sm = i.mean_sm, .idle_ms = i.idle_ms};
    if (i.idle_for <= 0) continue;
    const IdlePolicy* chosen = IdlePolicyOf(job);
    if (chosen == nullptr) continue;
    const IdlePolicy& policy = *chosen;
    const bool interactive = job.spec->interactive;
    const IdleVerdict verdict = JudgeIdle(policy, i.idle_for, interactive);
    if (verdict != IdleVerdict::kWarn && verdict != IdleVerdict::kAct) continue;
    const std::pair<int64_t, int> key{i.job, i.attempt};
    const std::string idle_text =
        fmt::format("idle GPUs: below {}% SM (mean {:.1f}% so far) for {}", policy.below, i.mean_sm,
                    FormatDuration(i.idle_for - i.idle_for % 1000));
    const std::string policy_text = " (" + IdlePolicySource(job) + policy.Format() + ")";
    // (Where the policy that applies here allows it: a job may land in a pool whose does not.
    // Audited when it first counts.)
    const bool exempt = !job.spec->idle_ok.empty() && policy.exempt;
    if (verdict == IdleVerdict::kAct && policy.action != IdleAction::kNone && !exempt) {
      const bool requeue = policy.action == IdleAction::kRequeue;
      if (requeue) {
        ReturnToQueue(txn, job, idle_text + "; requeued" + policy_text, now);
      } else {
        EndJob(txn, job, JobStatus::kCancelled, idle_text + "; cancelled" + policy_text,
               std::nullopt, now);
      }
      told.erase(key);
      continue;
    }
    // A warning, and with action none the report at the act window: each once per idle spell.
    IdleVerdict& said = told[key];
    if (said >= verdict) continue;
    const bool first = said < IdleVerdict::kWarn;  // the spell's first event
    said = verdict;
    told_now.push_back(key);
    const DurationMs act = interactive ? policy.interactive_act : policy.act;
    const char* fate = exempt                                  ? "reported"
                       : policy.action == IdleAction::kCancel  ? "cancelled"
                       : policy.action == IdleAction::kRequeue ? "requeued"
                                                               : "reported";
    const std::string why = exempt ? "exempt: " + job.spec->idle_ok : "action none";
    std::string next =
        verdict == IdleVerdict::kAct
            ? "; reported only (" + why + ")"
            : fmt::format("; it will be {} once idle for {}", fate, FormatDuration(act));
    if (exempt && verdict == IdleVerdict::kWarn) next += " (" + why + ")";
    if (exempt && first) {  // the exemption counts: in the audit log, with whose it is
      txn.batch.audit.push_back(AuditRow{.at = now,
                                         .by = job.row.user,
                                         .action = "idle exempt",
                                         .target = fmt::format("job {}", job.row.id),
                                         .detail = job.spec->idle_ok});
    }
    txn.batch.events.push_back(
        {job.row.id, JobEvent{now, job.row.status, job.row.attempt, idle_text + next, ""}});
    if (verdict == IdleVerdict::kWarn) NoticeIdle(s_, txn, job, idle_text + next, now);
  }
  if (txn.batch.empty()) return;
  txn.out.reap = true;
  txn.out.kick = true;
  Status st = s_.Execute(txn);
  if (!st.ok()) {
    LogError("the idle policy is applied at the next check: {}", st.message());
    for (const auto& key : told_now) told.erase(key);  // (told again then)
  }
}

void Lifecycle::RetryFailedCancels() {
  CoreLock lock(s_);
  RetryDependencyCancels();
  RetryOwedCancels();
}

void Lifecycle::CheckTimeLimits() {
  CoreLock lock(s_);
  int64_t mono = s_.clock.Monotonic();
  TimeMs now = s_.clock.Now();
  Txn txn;
  // Only the jobs with a time limit among those holding resources (the pass index), not every job:
  // this runs every 200 ms under the lock.
  books_.RefreshPassIndex();
  std::vector<int64_t> limited;
  for (const auto& [id, held] : s_.held_index) {
    if (held.time_limited) limited.push_back(id);
  }
  for (int64_t id : limited) {
    auto found = s_.jobs.find(id);
    if (found == s_.jobs.end()) continue;
    ActiveJob& job = found->second;
    if (job.terminating || !IsActive(job.row.status) || !job.spec->time_limit) continue;
    // With time_limit_scope: job the limit bounds the running time of every attempt, summed.
    const bool whole_job = job.spec->time_limit_scope == TimeLimitScope::kJob;
    const DurationMs before = whole_job ? job.row.run_ms : 0;
    if (job.running_since == 0 || before + mono - job.running_since <= *job.spec->time_limit) {
      continue;
    }
    EndJob(
        txn, job, JobStatus::kFailed,
        "time limit " + FormatDuration(*job.spec->time_limit) + " exceeded" +
            (whole_job && job.row.attempt > 1 ? fmt::format(" (over {} attempts)", job.row.attempt)
                                              : std::string()),
        std::nullopt, now);
  }
  if (txn.batch.empty()) return;
  txn.out.reap = true;
  txn.out.kick = true;
  Status st = s_.Execute(txn);
  if (!st.ok()) LogError("time limits are enforced at the next check: {}", st.message());
}

void Lifecycle::AddWaiter(Txn& txn, int64_t spec_id, std::vector<sched::DepCondition> conditions,
                          int64_t first, int64_t last, int live, TimeMs now) {
  sched::DepState state = s_.waiters.Add(spec_id, std::move(conditions), {first, last, live});
  txn.out.deps_changed.insert(spec_id);
  if (state == sched::DepState::kFailed) {
    txn.dep_failures.push_back(spec_id);
    DrainDependencyFailures(txn, now);
  }
}

void Lifecycle::DrainDependencyFailures(Txn& txn, TimeMs now) {
  if (txn.draining_deps) return;  // the outer call goes on with the list
  txn.draining_deps = true;
  while (!txn.dep_failures.empty()) {
    auto key = txn.dep_failures.back();
    txn.dep_failures.pop_back();
    const sched::Dependencies::Waiter* w = s_.waiters.Find(key);
    if (w != nullptr) CancelWaiters(txn, key, w->why, now);
  }
  txn.draining_deps = false;
}

void Lifecycle::RetryDependencyCancels() {
  if (s_.waiters.cancel_retries().empty()) return;
  Txn txn;
  TimeMs now = s_.clock.Now();
  for (auto key : s_.waiters.cancel_retries()) {
    const sched::Dependencies::Waiter* w = s_.waiters.Find(key);
    if (w != nullptr && w->state == sched::DepState::kFailed) txn.dep_failures.push_back(key);
  }
  DrainDependencyFailures(txn, now);
  if (s_.Execute(txn).ok()) s_.waiters.CancelRetriesDone();
}

void Lifecycle::CancelWaiters(Txn& txn, sched::Dependencies::Key key, const std::string& why,
                              TimeMs now) {
  const DependencyWaiters::Jobs* range = s_.waiters.JobsOf(key);
  if (range == nullptr) return;
  const auto [first, last, live] = *range;
  for (auto it = s_.jobs.lower_bound(first); it != s_.jobs.end() && it->first <= last; ++it) {
    ActiveJob& job = it->second;
    if (job.row.spec_id != key || job.row.status != JobStatus::kPending) continue;
    EndJob(txn, job, JobStatus::kCancelled, why, std::nullopt, now);
  }
}

void Lifecycle::DependencyEnded(Txn& txn, const ActiveJob& job, TimeMs now) {
  if (s_.waiters.size() == 0) return;
  std::vector<sched::Dependencies::Key> keys = s_.waiters.Watching(job.row.id, job.row.group);
  if (keys.empty()) return;
  for (auto key : keys) {
    txn.journal.Save(s_.waiters, key);
    txn.out.deps_changed.insert(key);  // the reason names the dependency's status
  }
  for (const auto& change : s_.waiters.JobEnded(job.row.id, job.row.group, job.row.status)) {
    if (change.state == sched::DepState::kMet) {
      txn.out.kick = true;
    } else if (change.state == sched::DepState::kFailed) {
      txn.dep_failures.push_back(change.key);  // its jobs are cancelled, which may cascade
    }
  }
  DrainDependencyFailures(txn, now);
}

}  // namespace berth
