// Job state transitions. Each one updates the in-memory job and adds its writes (job row, event,
// attempt) to a Batch that the caller commits in one transaction. Called with mu_ held.
#include "common/log.h"
#include "server/server.h"

namespace berth {

Status Server::CommitLocked(const Batch& batch) {
  if (batch.empty()) return Status::Ok();
  return store_->Commit(batch);
}

void Server::Transition(ActiveJob& job, JobStatus status, const std::string& reason, TimeMs now,
                        Batch& batch) {
  job.row.status = status;
  job.row.reason = reason;
  if (status == JobStatus::kRunning && !job.row.started_at) job.row.started_at = now;
  batch.jobs.push_back(job.row);
  batch.events.push_back({job.row.id, JobEvent{now, status, job.row.attempt, reason}});
  if (IsTerminal(status)) WakeLogWaiters(job.row.id);
}

void Server::EndJob(ActiveJob& job, JobStatus status, const std::string& reason,
                    std::optional<int> exit_code, TimeMs now, Batch& batch) {
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
    batch.attempts.push_back({job.row.id, attempt});
  }
  Transition(job, status, reason, now, batch);
  if (!holds_resources) return;
  bool all_exited = true;
  for (const auto& r : job.ranks) all_exited = all_exited && r.exited;
  if (all_exited) {
    Allocate(job.row, -1);
  } else {
    // The user sees the end at once; the devices stay held until every process is really gone, so
    // that no new job lands on a GPU that a dying one still uses.
    job.terminating = true;
    StopRanks(job, reason);
  }
}

void Server::Requeue(ActiveJob& job, const std::string& reason, TimeMs now, Batch& batch) {
  AttemptRow attempt;
  attempt.attempt = job.row.attempt;
  attempt.placement = job.row.placement;
  attempt.placed_at = job.placed_at;
  attempt.ended_at = now;
  attempt.outcome = JobStatus::kPending;
  attempt.reason = reason;
  batch.attempts.push_back({job.row.id, attempt});
  StopRanks(job, reason);
  DyingAttempt dying{job.row.placement, job.row.resources, {}};
  for (const auto& grant : job.row.placement) {
    auto node = nodes_.find(grant.node);
    bool exited =
        static_cast<size_t>(grant.rank) < job.ranks.size() && job.ranks[grant.rank].exited;
    bool node_down = node == nodes_.end() || node->second.row.state == NodeState::kDown;
    if (!exited && !node_down) dying.alive.insert(grant.rank);
  }
  if (dying.alive.empty()) {
    Allocate(job.row, -1);
  } else {
    // The old attempt keeps its resources until its processes are gone: no new job (nor this job's
    // next attempt) lands on devices it still uses.
    dying_[{job.row.id, job.row.attempt}] = std::move(dying);
  }
  job.row.placement.clear();
  job.row.started_at.reset();
  job.ranks.assign(job.ranks.size(), RankState{});
  Transition(job, JobStatus::kPending, reason, now, batch);
}

void Server::StopRanks(ActiveJob& job, const std::string& reason) {
  json::object stop{
      {"type", "stop"}, {"job", job.row.id}, {"attempt", job.row.attempt}, {"reason", reason}};
  for (const auto& grant : job.row.placement) {
    if (static_cast<size_t>(grant.rank) < job.ranks.size() && job.ranks[grant.rank].exited)
      continue;
    auto it = nodes_.find(grant.node);
    if (it == nodes_.end() || it->second.row.state == NodeState::kDown) continue;
    stop["rank"] = grant.rank;
    SendToNode(it->second, stop);
  }
}

void Server::Release(ActiveJob& job) {
  if (!job.terminating) return;
  Allocate(job.row, -1);
  job.terminating = false;
  // Followers of its logs were kept waiting while its processes stopped: now the log is complete.
  WakeLogWaiters(job.row.id);
  LaunchUnblocked(std::make_pair(job.row.id, job.row.attempt));
  pass_requested_ = true;
  sched_cv_.notify_one();
}

void Server::DyingRankGone(int64_t job, int attempt, int rank) {
  auto it = dying_.find({job, attempt});
  if (it == dying_.end()) return;
  it->second.alive.erase(rank);
  if (!it->second.alive.empty()) return;
  JobRow freed;
  freed.placement = it->second.placement;
  freed.resources = it->second.per_node;
  Allocate(freed, -1);
  dying_.erase(it);
  LaunchUnblocked(std::make_pair(job, attempt));
  pass_requested_ = true;
  sched_cv_.notify_one();
}

void Server::LaunchUnblocked(std::optional<std::pair<int64_t, int>> gone) {
  // Only the few jobs whose launch is held are looked at, not every active job: this runs on every
  // release of a stopped attempt.
  for (auto it = launch_held_.begin(); it != launch_held_.end();) {
    auto j = jobs_.find(*it);
    if (j == jobs_.end()) {
      it = launch_held_.erase(it);
      continue;
    }
    ActiveJob& job = j->second;
    if (gone) job.launch_after.erase(*gone);
    if (!job.launch_after.empty()) {
      ++it;
      continue;
    }
    it = launch_held_.erase(it);
    if (job.row.status != JobStatus::kStarting || job.terminating) continue;  // ended meanwhile
    for (const auto& grant : job.row.placement) {
      auto node = nodes_.find(grant.node);
      if (node != nodes_.end()) SendToNode(node->second, LaunchMessage(job, grant.rank));
    }
  }
}

void Server::ReapFinished() {
  std::lock_guard lock(waiting_mu_);
  std::erase_if(jobs_, [this](const auto& kv) {
    bool done = IsTerminal(kv.second.row.status) && !kv.second.terminating;
    if (done) waiting_.erase(kv.first);
    return done;
  });
}

}  // namespace berth
