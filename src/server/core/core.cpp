// Core: loading, plans (commit, then apply, then send), log followers and housekeeping.
#include "server/core/core.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/json_util.h"
#include "common/log.h"

namespace berth {
namespace {

// A node down for longer than `retention` (0: never gone).
bool GoneForGood(const NodeRow& row, TimeMs now, DurationMs retention) {
  if (retention <= 0 || row.state != NodeState::kDown) return false;
  return row.down_since.value_or(row.last_seen) < now - retention;
}

}  // namespace

Core::Core(CoreOptions options, Store& store, const Clock& clock, AgentChannel& channel)
    : options_(std::move(options)),
      store_(store),
      clock_(clock),
      channel_(channel),
      shares_(options_.usage, options_.reclaim_window) {
  // Every job's books hear it enter and leave memory, from wherever (job_table.h).
  jobs_.Subscribe(&books_);
  jobs_.Subscribe(&group_limits_);
  jobs_.Subscribe(&waiters_);
}

sched::JobRequest Core::RequestFor(const JobRow& row, const JobSpec& spec) {
  sched::JobRequest r;
  r.id = row.id;
  r.user = row.user;
  r.priority = row.priority;
  r.num_nodes = row.num_nodes;
  r.per_node = row.resources;
  r.pool = spec.pool;
  r.node_selector = spec.node_selector;
  // Only nodes whose agent found a container runtime run a job with an image.
  if (spec.container) {
    r.node_selector.emplace(kContainerRuntimeLabel, "podman");
    // ... and allow what it mounts, where some nodes do and some do not.
    for (const std::string& mount : spec.container->mounts) {
      r.container_mounts.push_back(mount.substr(0, mount.find(':')));
    }
  }
  r.exclusive = spec.exclusive;
  r.submitted_at = row.submitted_at;
  r.time_limit = spec.time_limit;
  r.group = row.group;
  return r;
}

Status Core::Load() {
  auto nodes = store_.LoadNodes();
  if (!nodes.ok()) return nodes.status();
  auto jobs = store_.LoadActiveJobs();
  if (!jobs.ok()) return jobs.status();
  MutexLock lock(mu_);
  TimeMs now = clock_.Now();
  int64_t mono = clock_.Monotonic();
  for (auto& row : *nodes) {
    if (GoneForGood(row, now, options_.node_retention_ms)) continue;
    NodeRuntime node;
    node.row = row;
    // Agents get one lease period after a server restart to reconnect before their nodes count
    // as down.
    if (row.state != NodeState::kDown) node.lease_expires = mono + options_.lease_ms;
    nodes_.Add(row.name) = std::move(node);
  }
  std::map<int64_t, int> group_sizes;
  // One scheduler request per submission (its jobs share spec, owner, priority and submission
  // time).
  std::map<int64_t, std::shared_ptr<const sched::JobRequest>> requests;  // by spec id
  Txn unused;  // Allocate() journals; nothing here is ever undone
  for (auto& row : *jobs) {
    ActiveJob job;
    job.row = row;
    job.spec = SpecFor(row.spec_id);
    if (!job.spec) {
      LogError("job {}: spec {} is unreadable; it stays pending", row.id, row.spec_id);
      continue;
    }
    auto& request = requests[row.spec_id];
    if (!request || request->priority != row.priority || request->user != row.user ||
        request->submitted_at != row.submitted_at) {
      request = std::make_shared<const sched::JobRequest>(RequestFor(row, *job.spec));
    }
    job.request = request;
    job.ranks.resize(static_cast<size_t>(row.num_nodes));
    if (row.group) {
      auto size = group_sizes.find(*row.group);
      if (size == group_sizes.end()) {
        auto stored = store_.GroupSize(*row.group);
        size = group_sizes.emplace(*row.group, stored.ok() ? *stored : 0).first;
      }
      job.group_size = size->second;
    }
    if (row.status == JobStatus::kRunning) {
      for (auto& r : job.ranks) r.running = true;
      // Time limits run on monotonic time; a job that was running before the restart has run
      // for as long as the wall clock says.
      job.running_since = mono - (now - row.started_at.value_or(now));
    }
    job.queued_at = row.submitted_at;  // a requeued job's last requeue is not kept: close enough
    if (IsActive(row.status)) {
      nodes_.Allocate(unused, row.placement, row.resources, +1);
      // When its attempt was placed: its usage runs from then.
      auto attempts = store_.GetAttempts(row.id);
      if (attempts.ok()) {
        for (const AttemptRow& a : *attempts) {
          if (a.attempt == row.attempt) job.placed_at = a.placed_at;
        }
      }
    }
    jobs_.Enter(std::move(job));
  }
  // Pipelines: groups' limits, restarts' backoffs, and the dependencies of waiting submissions.
  auto limits = store_.LoadGroupLimits();
  if (!limits.ok()) return limits.status();
  group_limits_.Load(std::move(*limits));
  if (Status st = LoadGroupTallies(); !st.ok()) return st;
  // Submissions with a job never placed that has dependencies: their id range and live jobs. (A
  // job placed before had its dependencies met: Eligible.)
  std::map<int64_t, DependencyWaiters::Jobs> waiting;
  std::map<int64_t, int> live;  // spec -> its jobs in memory
  for (const auto& [id, job] : jobs_) {
    ++live[job.row.spec_id];
    if (job.row.status != JobStatus::kPending) continue;
    if (job.row.not_before) backoffs_.emplace(*job.row.not_before, id);
    if (job.spec->depends_on.empty() || job.row.attempt > 0) continue;
    auto [it, fresh] = waiting.try_emplace(job.row.spec_id, DependencyWaiters::Jobs{id, id, 0});
    it->second.last = id;
  }
  // Every waiter's conditions are read before any is acted on: a cancellation below changes
  // memory before it is committed, and the store would no longer agree with it.
  std::vector<std::pair<int64_t, std::vector<sched::DepCondition>>> read;
  for (const auto& [spec_id, range] : waiting) {
    const ActiveJob& first = jobs_.at(range.first);
    // Who may depend on what was checked at submission.
    auto conditions = DependencyConditions(*first.spec, first.row.user, /*any_owner=*/true);
    if (!conditions.ok()) {
      LogError("jobs {}..{}: their dependencies cannot be read ({}); they wait", range.first,
               range.last, conditions.status().message());
      continue;
    }
    read.emplace_back(spec_id, std::move(*conditions));
  }
  Txn deps_txn;
  for (auto& [spec_id, conditions] : read) {
    const DependencyWaiters::Jobs& range = waiting.at(spec_id);
    deps_txn.out.deps_changed.insert(spec_id);
    if (waiters_.Add(spec_id, std::move(conditions), {range.first, range.last, live[spec_id]}) ==
        sched::DepState::kFailed) {
      deps_txn.dep_failures.push_back(spec_id);
    }
  }
  std::vector<int64_t> failed = deps_txn.dep_failures;
  DrainDependencyFailures(deps_txn, now);
  if (Status st = Execute(deps_txn); !st.ok()) {
    LogError("cancelling jobs whose dependencies failed: {}; retried", st.message());
    for (auto key : failed) waiters_.RetryCancel(key);
  }
  LogInfo("loaded {} nodes and {} active jobs", nodes_.size(), jobs_.size());
  return Status::Ok();
}

std::shared_ptr<const JobSpec> Core::SpecFor(int64_t spec_id) {
  if (auto spec = specs_.Find(spec_id)) return spec;
  std::shared_ptr<const JobSpec> shared = ReadSpec(spec_id);
  if (shared) RememberSpec(spec_id, shared);
  return shared;
}

std::shared_ptr<const JobSpec> Core::ReadSpec(int64_t spec_id) {
  auto text = store_.GetSpec(spec_id);
  if (!text.ok()) return nullptr;
  auto value = ParseJson(*text, "stored spec");
  if (!value.ok()) return nullptr;
  auto spec = SpecFromJson(*value);
  if (!spec.ok()) return nullptr;
  // Not make_shared: a weak reference left in specs_ must not keep the spec's memory.
  return std::shared_ptr<const JobSpec>(new JobSpec(std::move(*spec)));
}

void Core::RememberSpec(int64_t spec_id, const std::shared_ptr<const JobSpec>& spec) {
  specs_.Remember(spec_id, spec);
}

void Core::AddJobObserver(JobTable::Observer* observer) {
  MutexLock lock(mu_);
  jobs_.Subscribe(observer);
}

size_t Core::QueuedSubmissionsForTesting() { return submits_.QueuedForTesting(); }

void Core::ForgetUnheldSpecs() {
  MutexLock lock(mu_);
  specs_.Sweep();
}

size_t Core::RememberedSpecsForTesting() {
  MutexLock lock(mu_);
  return specs_.size();
}

// --- plans ---

Core::ActiveJob& Core::MutJob(Txn& txn, ActiveJob& job) { return jobs_.Edit(txn, job); }

void Core::SaveDying(Txn& txn, const AttemptKey& key) { txn.journal.Save(dying_, key); }

void Core::SaveLaunchHeld(Txn& txn) { txn.journal.SaveValue(launch_held_); }

Status Core::Execute(Txn& txn) {
  if (!txn.batch.empty()) {
    const auto start = std::chrono::steady_clock::now();
    Status st = store_.Commit(txn.batch);
    metrics_.commit_seconds.Observe(
        {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!st.ok()) {
      Undo(txn);
      LogError("a change could not be recorded and was dropped: {}", st.message());
      return Status::Unavailable("the server could not record the change (" + st.message() +
                                 "); nothing was changed, try again");
    }
  }
  CountCommitted(txn);
  SendCommitted(txn);
  return Status::Ok();
}

void Core::CountCommitted(const Txn& txn) {
  for (const auto& [group, from, to] : txn.out.tally_moves) tallies_.Move(group, from, to);
  for (const UsageRecord& u : txn.batch.usage) {
    shares_.AddEnded(u);
    const double seconds = static_cast<double>(u.ended_at - u.placed_at) / 1000;
    if (u.gpu_milli > 0) {
      metrics_.user_gpu_seconds.Add({u.user, u.team, u.gpu_type},
                                    seconds * static_cast<double>(u.gpu_milli) / kMilliPerGpu);
    }
    metrics_.user_cpu_seconds.Add({u.user, u.team},
                                  seconds * static_cast<double>(u.cpu_milli) / kMilliPerCpu);
  }
  for (const auto& [status, run] : txn.out.events.finished) {
    metrics_.jobs_finished.Add({status});
    if (run >= 0) metrics_.job_run_seconds.Observe({status}, run);
  }
  for (const auto& [team, waited] : txn.out.events.placed) {
    metrics_.launches.Add({});
    metrics_.admission_wait_seconds.Observe({team}, waited);
  }
  for (const std::string& reason : txn.out.events.preempted) metrics_.preemptions.Add({reason});
  if (txn.out.events.lease_expiries > 0)
    metrics_.lease_expiries.Add({}, txn.out.events.lease_expiries);
  if (txn.out.events.out_of_memory > 0)
    metrics_.out_of_memory.Add({}, txn.out.events.out_of_memory);
  for (const std::string& team : txn.out.reclaims) shares_.Reclaimed(team, clock_.Now());
  for (const auto& hint : txn.out.backoffs) backoffs_.insert(hint);
}

void Core::SendCommitted(const Txn& txn) {
  if (!txn.out.deps_changed.empty()) WriteDependencyReasons(txn.out.deps_changed);
  for (const auto& [node, session] : txn.out.opens) {
    channel_.Open(node, session);
    specs_.SessionChanged(node);  // a new session: the agent may have restarted
  }
  for (const auto& node : txn.out.closes) {
    channel_.Close(node);
    specs_.SessionChanged(node);
  }
  for (const auto& [node, message] : txn.out.sends) {
    if (const auto* launch = std::get_if<proto::LaunchMessage>(&message)) {
      SendSpecOnce(node, launch->spec_id);
    }
    channel_.Send(node, message);
  }
  for (int64_t job : txn.out.wake_logs) WakeLogWaiters(job);
  if (txn.out.reap) ReapFinished(txn);
  if (txn.out.kick) RequestPassLocked();
}

void Core::SendSpecOnce(const std::string& node, int64_t spec_id) {
  auto spec = specs_.Find(spec_id);
  if (!spec) return;  // the agent fetches it
  if (!specs_.NeedsSending(node, spec_id)) return;
  channel_.Send(node, proto::SpecMessage{spec_id, SerializeJson(SpecToJson(*spec))});
}

void Core::Undo(Txn& txn) {
  // The job table goes first: its restores tell the observers (JobBooks, group limits, waiters),
  // whose own saved entries are then put back over what those notices changed.
  txn.journal.Undo();
  waiters_.TakeGone();  // a waiter forgotten by an undone entry is not one the board forgets
  // Generations are restored with their entries: the state is again exactly what any pass in
  // flight saw, so its decisions stay valid.
}

void Core::ReapFinished(const Txn& txn) {
  // Only a job the txn changed can have become finished (every change goes through
  // JobTable::Edit, which saves it in the journal): look at those, not at every job (a chunked
  // cancel of 100,000 jobs walked all of them once per chunk).
  const auto* changed = txn.journal.Saved(jobs_);
  if (changed == nullptr) return;
  std::vector<int64_t> reaped;
  for (const auto& [id, before] : *changed) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    const ActiveJob& job = it->second;
    if (!IsTerminal(job.row.status) || job.terminating) continue;
    reaped.push_back(id);
    // Its books (counts, tally, group limit, waiter, pass index) hear it leave.
    jobs_.Leave(it);
  }
  // A group's limit, and a submission's dependencies, are forgotten with their last job.
  std::vector<sched::Dependencies::Key> waiters_gone = waiters_.TakeGone();
  if (!reaped.empty()) waiting_.Forget(reaped, waiters_gone);
}

void Core::RequestPassLocked() {
  if (pass_requested_) return;  // the scheduler thread is not waiting for one: nobody to wake
  pass_requested_ = true;
  pass_cv_.SignalAll();
}

void Core::RequestPass() {
  MutexLock lock(mu_);
  RequestPassLocked();
}

bool Core::WaitForPassRequest(DurationMs timeout_ms) {
  MutexLock lock(mu_);
  if (!backoffs_.empty()) {
    // A restart's backoff ends: wake for it (wall time, as stored).
    timeout_ms = std::clamp<DurationMs>(backoffs_.begin()->first - clock_.Now() + 1, 0, timeout_ms);
  }
  if (!pass_requested_ && !shutdown_ && timeout_ms > 0) pass_cv_.WaitFor(mu_, timeout_ms);
  for (TimeMs now = clock_.Now(); !backoffs_.empty() && backoffs_.begin()->first <= now;) {
    backoffs_.erase(backoffs_.begin());
    pass_requested_ = true;
  }
  if (!shutdown_ && !pass_requested_) {
    // A reclaim leaving its team's rate-limit window may let a job held by the limit reclaim now;
    // nothing else would start a pass for it (no job or node changed).
    if (shares_.ExpireReclaims(clock_.Now())) pass_requested_ = true;
  }
  if (shutdown_ || !pass_requested_) return false;
  if (int64_t paced = pass_not_before_ - clock_.Monotonic(); paced > 0) {
    // Woken early only by Shutdown: further requests do not signal while one is pending.
    if (timeout_ms > 0) pass_cv_.WaitFor(mu_, std::min(paced, timeout_ms));
    if (shutdown_ || clock_.Monotonic() < pass_not_before_) return false;
  }
  pass_requested_ = false;
  return true;
}

void Core::Shutdown() {
  MutexLock lock(mu_);
  shutdown_ = true;
  log_followers_.Clear();
  pass_cv_.SignalAll();
}

// --- log followers ---

void Core::WakeLogWaiters(int64_t job) { log_followers_.Wake(job); }

std::optional<uint64_t> Core::AddLogWaiter(int64_t job, int attempt, std::function<void()> fire) {
  HandlerLock lock(this);
  auto it = jobs_.find(job);
  bool live = it != jobs_.end() && (!IsTerminal(it->second.row.status) || it->second.terminating) &&
              it->second.row.attempt == attempt;
  if (!live || shutdown_) return std::nullopt;
  return log_followers_.Add(job, std::move(fire));
}

void Core::RemoveLogWaiter(int64_t job, uint64_t id) {
  HandlerLock lock(this);
  log_followers_.Remove(job, id);
}

void Core::LogsAppended(int64_t job) { LogsAppended(std::set<int64_t>{job}); }

void Core::LogsAppended(const std::set<int64_t>& jobs) {
  HandlerLock lock(this);
  for (int64_t job : jobs) WakeLogWaiters(job);
}

Core::QueueOverview Core::Overview(const listing::RowFilter& filter) {
  QueueOverview out;
  std::map<int64_t, int64_t> groups;  // group -> newest active job
  for (const QueueEntry& e : ActiveEntries(filter)) {
    if (e.group) {
      groups.try_emplace(*e.group, e.id);  // newest first: the first seen is newest
    } else {
      out.ungrouped.push_back(e.id);
    }
  }
  for (const auto& [group, newest] : groups) out.groups.emplace_back(group, newest);
  std::sort(out.groups.begin(), out.groups.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::optional<std::pair<JobRow, bool>> Core::ActiveJobRow(int64_t job) {
  HandlerLock lock(this);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  return std::make_pair(it->second.row,
                        !IsTerminal(it->second.row.status) || it->second.terminating);
}

Result<Core::RankTarget> Core::TerminalOf(int64_t job, int rank) {
  return RunningRank(job, rank, true);
}

Result<Core::RankTarget> Core::PortOf(int64_t job, int rank) {
  return RunningRank(job, rank, false);
}

Result<Core::RankTarget> Core::RunningRank(int64_t job, int rank, bool terminal) {
  HandlerLock lock(this);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || IsTerminal(it->second.row.status)) {
    return Status::NotFound(fmt::format("job {} is not running", job));
  }
  const ActiveJob& active = it->second;
  if (terminal && (!active.spec || !active.spec->interactive)) {
    return Status::Conflict(fmt::format(
        "job {} is not interactive (it has no terminal): follow its output with berth logs -f {}",
        job, job));
  }
  if (rank < 0 || rank >= active.row.num_nodes) {
    return Status::Invalid(
        fmt::format("job {} has ranks 0 to {}, not {}", job, active.row.num_nodes - 1, rank));
  }
  if (active.row.status != JobStatus::kRunning ||
      static_cast<size_t>(rank) >= active.row.placement.size()) {
    return Status::Conflict(
        fmt::format("job {} is {}, not RUNNING yet", job, JobStatusName(active.row.status)));
  }
  return RankTarget{active.row, active.row.placement[static_cast<size_t>(rank)].node};
}

// --- housekeeping ---

void Core::LetWaitingHandlersIn() {
  for (int i = 0; i < 100 && handlers_waiting_.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::optional<TimeMs> Core::NodeLastSeen(const std::string& node) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.row.last_seen;
}

size_t Core::ForgetGoneNodes() {
  MutexLock lock(mu_);
  const TimeMs now = clock_.Now();
  std::vector<std::string> gone;
  for (const auto& [name, node] : nodes_) {
    if (GoneForGood(node.row, now, options_.node_retention_ms)) gone.push_back(name);
  }
  size_t forgotten = 0;
  for (const std::string& name : gone) {
    if (!nodes_.Forget(name)) continue;
    ++forgotten;
    LogInfo("node {} has been down for over the node retention: forgotten (its row is kept)", name);
  }
  return forgotten;
}

std::vector<int64_t> Core::JobsOn(const std::string& node) {
  if (node_jobs_.NeedsRebuild(jobs_.size())) {
    node_jobs_.Clear();
    for (const auto& [id, job] : jobs_) node_jobs_.Add(id, job.row.placement);
  }
  return node_jobs_.Of(node);
}

void Core::CheckLeases() {
  MutexLock lock(mu_);
  int64_t mono = clock_.Monotonic();
  TimeMs now = clock_.Now();
  Txn txn;
  for (auto& [name, runtime] : nodes_) {
    if (runtime.row.state == NodeState::kDown || runtime.lease_expires > mono) continue;
    LogWarn("node {}: lease expired; marking it down", name);
    ++txn.out.events.lease_expiries;
    NodeRuntime& node = nodes_.Edit(txn, runtime);
    node.row.state = NodeState::kDown;
    node.row.down_since = now;
    node.session.clear();
    ++node.sched_gen;
    nodes_.CapacityChanged();
    txn.out.closes.push_back(name);
    txn.batch.nodes.push_back(node.row);
    // Dying ranks died with the node.
    for (const auto& [job_id, attempt, rank] : dying_.AliveOn(name))
      DyingRankGone(txn, job_id, attempt, rank);
    for (int64_t id : JobsOn(name)) {
      auto found = jobs_.find(id);
      if (found == jobs_.end()) continue;
      ActiveJob& job = found->second;
      bool here = false;
      for (const auto& g : job.row.placement) here = here || g.node == name;
      if (!here || (!IsActive(job.row.status) && !job.terminating)) continue;
      if (job.terminating) {  // its processes died with the node
        Release(txn, job);
        continue;
      }
      std::string why = "node " + name + " stopped answering (lease expired)";
      if (job.spec->on_node_lost == RecoveryAction::kRequeue) {
        ReturnToQueue(txn, job, why + "; requeued", now);
      } else {
        EndJob(txn, job, JobStatus::kLost, why, std::nullopt, now);
      }
    }
  }
  if (txn.batch.empty()) return;
  txn.out.reap = true;
  txn.out.kick = true;
  Status st = Execute(txn);
  if (!st.ok()) LogError("lost nodes stay as they were until the next check: {}", st.message());
}

void Core::EndIdleInteractive(const std::map<int64_t, int64_t>& seen, int64_t watching_since) {
  const DurationMs limit = options_.interactive_idle_limit_ms;
  if (limit <= 0) return;
  MutexLock lock(mu_);
  const int64_t mono = clock_.Monotonic();
  if (mono - watching_since <= limit) return;
  TimeMs now = clock_.Now();
  Txn txn;
  for (auto& [id, job] : jobs_) {
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
  Status st = Execute(txn);
  if (!st.ok()) LogError("idle limits are enforced at the next check: {}", st.message());
}

void Core::RetryFailedCancels() {
  MutexLock lock(mu_);
  RetryDependencyCancels();
  RetryOwedCancels();
}

void Core::CheckTimeLimits() {
  MutexLock lock(mu_);
  int64_t mono = clock_.Monotonic();
  TimeMs now = clock_.Now();
  Txn txn;
  // Only the jobs with a time limit among those holding resources (the pass index), not every job:
  // this runs every 200 ms under the lock.
  RefreshPassIndex();
  std::vector<int64_t> limited;
  for (const auto& [id, held] : held_index_) {
    if (held.time_limited) limited.push_back(id);
  }
  for (int64_t id : limited) {
    auto found = jobs_.find(id);
    if (found == jobs_.end()) continue;
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
  Status st = Execute(txn);
  if (!st.ok()) LogError("time limits are enforced at the next check: {}", st.message());
}

}  // namespace berth
