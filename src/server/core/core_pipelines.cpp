// Pipelines: job dependencies (sched/dependencies.h keeps the conditions; this file reads them
// from the store and acts on them), bulk groups' max_running, and restarts' backoffs.
#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"
#include "server/core/core.h"

namespace berth {

namespace {

sched::DepKind KindOf(DependencyKind kind) {
  switch (kind) {
    case DependencyKind::kOk:
      return sched::DepKind::kOk;
    case DependencyKind::kNotOk:
      return sched::DepKind::kNotOk;
    case DependencyKind::kAny:
      return sched::DepKind::kAny;
  }
  return sched::DepKind::kOk;
}

std::string Owned(const std::string& what, const std::string& owner) {
  return fmt::format(
      "{} belongs to {}: a job may only wait for its owner's jobs (operators may "
      "name anyone's)",
      what, owner);
}

}  // namespace

Core::DependencyRows Core::ReadDependencyRows(const JobSpec& spec) {
  DependencyRows out;
  std::vector<int64_t> job_ids;
  for (const Dependency& d : spec.depends_on) {
    if (!d.groups) {
      job_ids.insert(job_ids.end(), d.ids.begin(), d.ids.end());
      continue;
    }
    for (int64_t id : d.ids) {
      auto info = store_.GetGroup(id);
      auto counts = info.ok() ? store_.GroupStatusCounts({id}) : info.status();
      if (!counts.ok()) continue;  // asked again under the lock, which says what is wrong
      out.groups.emplace(id, std::move(*info));
      out.counts.emplace(id, std::move((*counts)[id]));
    }
  }
  if (!job_ids.empty()) {
    auto rows = store_.GetJobs(job_ids);
    if (rows.ok()) {
      for (JobRow& row : *rows) out.jobs.emplace(row.id, std::move(row));
    }
  }
  return out;
}

Result<std::vector<sched::DepCondition>> Core::DependencyConditions(const JobSpec& spec,
                                                                    const std::string& user,
                                                                    bool any_owner,
                                                                    const DependencyRows* read) {
  std::vector<int64_t> job_ids;
  for (const Dependency& d : spec.depends_on) {
    if (!d.groups) job_ids.insert(job_ids.end(), d.ids.begin(), d.ids.end());
  }
  // Jobs that are not in memory have ended (or never existed): the store says which. Under the
  // lock the store agrees with memory: every change to a job is committed with the lock held. A
  // row read before the lock (`read`) is used when it cannot have changed since: an ended job's.
  // Anything else (not read, or read while it was still active) is read again here.
  std::map<int64_t, JobRow> stored;
  std::vector<int64_t> to_read;
  for (int64_t id : job_ids) {
    if (jobs_.count(id)) continue;
    const JobRow* early = nullptr;
    if (read) {
      if (auto it = read->jobs.find(id); it != read->jobs.end()) early = &it->second;
    }
    if (early && IsTerminal(early->status)) {
      stored.emplace(id, *early);
    } else {
      to_read.push_back(id);
    }
  }
  if (!to_read.empty()) {
    auto rows = store_.GetJobs(to_read);
    if (!rows.ok())
      return Status::Unavailable("cannot read dependencies: " + rows.status().message());
    for (JobRow& row : *rows) stored[row.id] = std::move(row);
  }
  std::vector<sched::DepCondition> conditions;
  for (const Dependency& d : spec.depends_on) {
    sched::DepCondition c{KindOf(d.kind), {}};
    for (int64_t id : d.ids) {
      sched::DepTarget t;
      t.id = id;
      if (d.groups) {
        t.group = true;
        auto counts = GroupCounts(id, read);
        if (!counts.ok()) {
          if (counts.status().code() != Code::kNotFound) return counts.status();
          return Status::NotFound(
              fmt::format("dependency {}: group {} does not exist", DependencyText(d), id));
        }
        if (counts->first != user && !any_owner)
          return Status::Forbidden(Owned(fmt::format("group {}", id), counts->first));
        t.total = 0;
        for (const auto& [status, n] : counts->second) {
          t.total += n;
          if (!IsTerminal(status)) continue;
          // A job that ended but whose processes still stop counts as ended: its status is final.
          t.ended += n;
          if (status != JobStatus::kSucceeded) t.not_ok += n;
        }
        if (t.not_ok > 0) t.first_not_ok = fmt::format("{} of its jobs did not succeed", t.not_ok);
      } else {
        const JobRow* row = nullptr;
        auto active = jobs_.find(id);
        if (active != jobs_.end()) {
          row = &active->second.row;
        } else if (auto it = stored.find(id); it != stored.end()) {
          row = &it->second;
        }
        if (row == nullptr) {
          return Status::NotFound(fmt::format(
              "dependency {}: job {} does not exist (a job can only wait for jobs submitted "
              "before it, so dependencies never form a cycle)",
              DependencyText(d), id));
        }
        if (row->user != user && !any_owner)
          return Status::Forbidden(Owned(fmt::format("job {}", id), row->user));
        if (IsTerminal(row->status)) {
          t.ended = 1;
          if (row->status != JobStatus::kSucceeded) {
            t.not_ok = 1;
            t.first_not_ok = sched::Dependencies::EndedText(row->status);
          }
        }
      }
      c.targets.push_back(std::move(t));
    }
    conditions.push_back(std::move(c));
  }
  return conditions;
}

Result<std::pair<std::string, std::map<JobStatus, int>>> Core::GroupCounts(
    int64_t group, const DependencyRows* read) {
  if (read) {
    auto info = read->groups.find(group);
    auto counts = read->counts.find(group);
    if (info != read->groups.end() && counts != read->counts.end()) {
      // Still true under the lock when as many of its jobs are active in memory as were in the
      // store then: none ended (or was applied) in between. A group's jobs have consecutive ids.
      int64_t active_then = 0;
      for (const auto& [status, n] : counts->second) active_then += IsTerminal(status) ? 0 : n;
      int64_t active_now = 0;
      for (auto it = jobs_.lower_bound(info->second.first_job);
           it != jobs_.end() && it->first <= info->second.last_job; ++it) {
        active_now += IsTerminal(it->second.row.status) ? 0 : 1;
      }
      if (active_now == active_then) return std::pair(info->second.user, counts->second);
    }
  }
  auto info = store_.GetGroup(group);
  if (!info.ok()) {
    if (info.status().code() == Code::kNotFound) return info.status();
    return Status::Unavailable("cannot read group: " + info.status().message());
  }
  auto counts = store_.GroupStatusCounts({group});
  if (!counts.ok()) return Status::Unavailable("cannot read group: " + counts.status().message());
  return std::pair(info->user, (*counts)[group]);
}

void Core::AddWaiter(Txn& txn, int64_t spec_id, std::vector<sched::DepCondition> conditions,
                     int64_t first, int64_t last, int live, TimeMs now) {
  sched::DepState state = waiters_.Add(spec_id, std::move(conditions), {first, last, live});
  txn.out.deps_changed.insert(spec_id);
  if (state == sched::DepState::kFailed) {
    txn.dep_failures.push_back(spec_id);
    DrainDependencyFailures(txn, now);
  }
}

void Core::DrainDependencyFailures(Txn& txn, TimeMs now) {
  if (txn.draining_deps) return;  // the outer call goes on with the list
  txn.draining_deps = true;
  while (!txn.dep_failures.empty()) {
    auto key = txn.dep_failures.back();
    txn.dep_failures.pop_back();
    const sched::Dependencies::Waiter* w = waiters_.Find(key);
    if (w != nullptr) CancelWaiters(txn, key, w->why, now);
  }
  txn.draining_deps = false;
}

void Core::RetryDependencyCancels() {
  if (waiters_.cancel_retries().empty()) return;
  Txn txn;
  TimeMs now = clock_.Now();
  for (auto key : waiters_.cancel_retries()) {
    const sched::Dependencies::Waiter* w = waiters_.Find(key);
    if (w != nullptr && w->state == sched::DepState::kFailed) txn.dep_failures.push_back(key);
  }
  DrainDependencyFailures(txn, now);
  if (Execute(txn).ok()) waiters_.CancelRetriesDone();
}

void Core::CancelWaiters(Txn& txn, sched::Dependencies::Key key, const std::string& why,
                         TimeMs now) {
  const DependencyWaiters::Jobs* range = waiters_.JobsOf(key);
  if (range == nullptr) return;
  const auto [first, last, live] = *range;
  for (auto it = jobs_.lower_bound(first); it != jobs_.end() && it->first <= last; ++it) {
    ActiveJob& job = it->second;
    if (job.row.spec_id != key || job.row.status != JobStatus::kPending) continue;
    EndJob(txn, job, JobStatus::kCancelled, why, std::nullopt, now);
  }
}

void Core::DependencyEnded(Txn& txn, const ActiveJob& job, TimeMs now) {
  if (waiters_.size() == 0) return;
  std::vector<sched::Dependencies::Key> keys = waiters_.Watching(job.row.id, job.row.group);
  if (keys.empty()) return;
  for (auto key : keys) {
    txn.journal.Save(waiters_, key);
    txn.out.deps_changed.insert(key);  // the reason names the dependency's status
  }
  for (const auto& change : waiters_.JobEnded(job.row.id, job.row.group, job.row.status)) {
    if (change.state == sched::DepState::kMet) {
      txn.out.kick = true;
    } else if (change.state == sched::DepState::kFailed) {
      txn.dep_failures.push_back(change.key);  // its jobs are cancelled, which may cascade
    }
  }
  DrainDependencyFailures(txn, now);
}

bool Core::Eligible(int64_t id, const PendingView& job, TimeMs now) const {
  if (job.not_before && *job.not_before > now) return false;
  if (!owed_cancels_.empty() && owed_cancels_.count(id)) return false;  // the commit is retried
  // A job placed before had its dependencies met, and they never stop holding.
  if (!job.awaits_dependencies) return true;
  // No waiter: its dependencies could not be read at start-up; it waits rather than run early.
  const sched::Dependencies::Waiter* w = waiters_.Find(job.job->row.spec_id);
  return w != nullptr && w->state == sched::DepState::kMet;
}

std::string Core::DependencyReason(sched::Dependencies::Key key) const {
  const sched::Dependencies::Waiter* w = waiters_.Find(key);
  if (w == nullptr || w->state != sched::DepState::kWaiting) return "";
  std::vector<std::string> jobs;
  std::vector<std::string> groups;
  for (const sched::DepCondition& c : w->conditions) {
    for (const sched::DepTarget& t : c.targets) {
      if (t.ended >= t.total) continue;
      if (t.group) {
        groups.push_back(fmt::format("group {} ({} of {} jobs ended)", t.id, t.ended, t.total));
        continue;
      }
      auto it = jobs_.find(t.id);
      std::string status =
          it == jobs_.end() ? "ended" : std::string(JobStatusName(it->second.row.status));
      jobs.push_back(fmt::format("{} ({})", t.id, status));
    }
  }
  std::vector<std::string> parts;
  if (!jobs.empty()) parts.push_back((jobs.size() == 1 ? "job " : "jobs ") + Join(jobs, ", "));
  parts.insert(parts.end(), groups.begin(), groups.end());
  if (parts.empty()) return "waiting for its dependencies";
  return "waiting for " + Join(parts, " and ");
}

void Core::WriteDependencyReasons(const std::set<sched::Dependencies::Key>& keys) {
  std::vector<std::pair<sched::Dependencies::Key, std::string>> texts;
  for (auto key : keys) texts.emplace_back(key, DependencyReason(key));
  for (auto& [key, text] : texts) {
    const DependencyWaiters::Jobs* range = waiters_.JobsOf(key);
    if (range == nullptr) continue;
    // "": met or failed, its jobs no longer wait for dependencies.
    waiting_.SetDependencyReason(key, range->first, range->last, std::move(text));
  }
}

std::optional<int> Core::GroupLimit(int64_t group) {
  HandlerLock lock(this);
  return group_limits_.Limit(group);
}

Status Core::SetGroupLimit(int64_t group, std::optional<int> max_running, const std::string& user,
                           bool any) {
  if (max_running && (*max_running < 1 || *max_running > kMaxRunning)) {
    return Status::Invalid(fmt::format("max_running must be between 1 and {}", kMaxRunning));
  }
  // The group's owner never changes: read before the lock (a round trip on PostgreSQL).
  auto info = store_.GetGroup(group);
  if (!info.ok()) return info.status();
  HandlerLock lock(this);
  if (info->user != user && !any) {
    return Status::Forbidden(
        fmt::format("group {} belongs to {}; changing another user's group needs the operator role",
                    group, info->user));
  }
  Txn txn;
  txn.by = user;
  txn.journal.Save(group_limits_, group);
  txn.batch.group_limits.emplace_back(group, max_running);
  AuditRow audit;
  audit.at = clock_.Now();
  audit.by = user;
  audit.action = "group update";
  audit.target = fmt::format("group {}", group);
  audit.detail = max_running ? fmt::format("max_running {}", *max_running) : "max_running none";
  txn.batch.audit.push_back(std::move(audit));
  group_limits_.Set(group, max_running);
  txn.out.kick = true;  // a higher limit may let more of its jobs start now
  Status st = Execute(txn);
  if (st.ok()) tallies_.SetLimit(group, max_running);  // read without the lock: once committed
  return st;
}

}  // namespace berth
