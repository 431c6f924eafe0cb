// Core: composing the services, loading the state, shutting down.
#include "server/core/core.h"

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

namespace berth {

Core::Core(CoreOptions options, Store& store, const Clock& clock, AgentChannel& channel)
    : state_(std::move(options), store, clock, channel) {
  // Every job's books hear it enter and leave memory, from wherever (job_table.h).
  state_.jobs.Subscribe(&books_);
  state_.jobs.Subscribe(&state_.group_limits);
  state_.jobs.Subscribe(&state_.waiters);
  state_.jobs.Subscribe(&state_.notices);
}

Status Core::Load() {
  auto nodes = state_.store.LoadNodes();
  if (!nodes.ok()) return nodes.status();
  auto sinks = state_.store.LoadNotifySinks();
  if (!sinks.ok()) return sinks.status();
  auto reservations = state_.store.LoadReservations();
  if (!reservations.ok()) return reservations.status();
  BERTH_RETURN_IF_ERROR(reservations_.Load(*reservations));
  auto jobs = state_.store.LoadActiveJobs();
  if (!jobs.ok()) return jobs.status();
  CoreLock lock(state_);
  state_.notices.Load(std::move(*sinks));  // before the jobs enter: their `pending>` deadlines
  TimeMs now = state_.clock.Now();
  int64_t mono = state_.clock.Monotonic();
  for (auto& row : *nodes) {
    if (GoneForGood(row, now, state_.options.node_retention_ms)) continue;
    NodeRuntime node;
    node.row = row;
    // Agents get one lease period after a server restart to reconnect before their nodes count
    // as down.
    if (row.state != NodeState::kDown) node.lease_expires = mono + state_.options.lease_ms;
    state_.nodes.Add(row.name) = std::move(node);
  }
  std::map<int64_t, int> group_sizes;
  // One scheduler request per submission (its jobs share spec, owner, priority and submission
  // time).
  std::map<int64_t, std::shared_ptr<const sched::JobRequest>> requests;  // by spec id
  Txn unused;  // Allocate() journals; nothing here is ever undone
  for (auto& row : *jobs) {
    ActiveJob job;
    job.row = row;
    job.spec = state_.SpecFor(row.spec_id);
    if (!job.spec) {
      LogError("job {}: spec {} is unreadable; it stays pending", row.id, row.spec_id);
      continue;
    }
    auto& request = requests[row.spec_id];
    if (!request || request->priority != row.priority || request->user != row.user ||
        request->submitted_at != row.submitted_at) {
      request = std::make_shared<const sched::JobRequest>(state_.RequestFor(row, *job.spec));
    }
    job.request = request;
    job.ranks.resize(static_cast<size_t>(row.num_nodes));
    if (row.group) {
      auto size = group_sizes.find(*row.group);
      if (size == group_sizes.end()) {
        auto stored = state_.store.GroupSize(*row.group);
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
      state_.nodes.Allocate(unused, row.placement, row.resources, +1);
      // When its attempt was placed: its usage runs from then.
      auto attempts = state_.store.GetAttempts(row.id);
      if (attempts.ok()) {
        for (const AttemptRow& a : *attempts) {
          if (a.attempt == row.attempt) job.placed_at = a.placed_at;
        }
      }
    }
    state_.jobs.Enter(std::move(job));
  }
  // Pipelines: groups' limits, restarts' backoffs, and the dependencies of waiting submissions.
  auto limits = state_.store.LoadGroupLimits();
  if (!limits.ok()) return limits.status();
  state_.group_limits.Load(std::move(*limits));
  if (Status st = books_.LoadGroupTallies(); !st.ok()) return st;
  // Submissions with a job never placed that has dependencies: their id range and live jobs. (A
  // job placed before had its dependencies met: PassEligible, pass_mirror.h.)
  std::map<int64_t, DependencyWaiters::Jobs> waiting;
  std::map<int64_t, int> live;  // spec -> its jobs in memory
  for (const auto& [id, job] : state_.jobs) {
    ++live[job.row.spec_id];
    if (job.row.status != JobStatus::kPending) continue;
    if (job.row.not_before) state_.backoffs.emplace(*job.row.not_before, id);
    if (job.spec->depends_on.empty() || job.row.attempt > 0) continue;
    auto [it, fresh] = waiting.try_emplace(job.row.spec_id, DependencyWaiters::Jobs{id, id, 0});
    it->second.last = id;
  }
  // Every waiter's conditions are read before any is acted on: a cancellation below changes
  // memory before it is committed, and the store would no longer agree with it.
  std::vector<std::pair<int64_t, std::vector<sched::DepCondition>>> read;
  for (const auto& [spec_id, range] : waiting) {
    const ActiveJob& first = state_.jobs.at(range.first);
    // Who may depend on what was checked at submission.
    auto conditions =
        admission_.DependencyConditions(*first.spec, first.row.user, /*any_owner=*/true);
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
    if (state_.waiters.Add(spec_id, std::move(conditions),
                           {range.first, range.last, live[spec_id]}) == sched::DepState::kFailed) {
      deps_txn.dep_failures.push_back(spec_id);
    }
  }
  std::vector<int64_t> failed = deps_txn.dep_failures;
  lifecycle_.DrainDependencyFailures(deps_txn, now);
  if (Status st = state_.Execute(deps_txn); !st.ok()) {
    LogError("cancelling jobs whose dependencies failed: {}; retried", st.message());
    for (auto key : failed) state_.waiters.RetryCancel(key);
  }
  LogInfo("loaded {} nodes and {} active jobs", state_.nodes.size(), state_.jobs.size());
  return Status::Ok();
}

void Core::AddJobObserver(JobTable::Observer* observer) {
  CoreLock lock(state_);
  state_.jobs.Subscribe(observer);
}

void Core::ForgetUnheldSpecs() {
  CoreLock lock(state_);
  state_.specs.Sweep();
}

void Core::Shutdown() {
  CoreLock lock(state_);
  state_.shutdown = true;
  state_.log_followers.Clear();
  state_.pass_cv.SignalAll();
}

}  // namespace berth
