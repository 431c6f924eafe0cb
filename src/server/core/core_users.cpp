// The users' side of the core: submissions (group-committed), cancels, drains, node listings.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/json_util.h"
#include "common/log.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "net/tls.h"
#include "server/core/core.h"

namespace berth {

namespace {

// "cancelled by alice", or "cancelled by alice: local cluster stopped" with a reason.
std::string CancelReason(const CancelRequest& request) {
  std::string why = "cancelled by " + (request.user.empty() ? "user" : request.user);
  return request.why.empty() ? why : why + ": " + request.why;
}

// What a keyed submission asked for, to tell its retry (the same) from a reuse of its key.
std::string SubmitFingerprint(const std::string& spec_json, int count, bool as_group) {
  return net::Sha256Digest(fmt::format("{}\n{}\n{}", spec_json, count, as_group ? "group" : "one"));
}

}  // namespace

Result<SubmitAnswer> Core::Submit(SubmitRequest request) {
  BERTH_RETURN_IF_ERROR(PrepareSubmission(request));
  SubmitWriter writer;
  writer.request = &request;
  writer.user = request.user;
  writer.key = request.key;
  writer.count = request.count;
  writer.spec_json = SerializeJson(SpecToJson(request.spec));
  if (!request.spec.depends_on.empty()) writer.dependencies = ReadDependencyRows(request.spec);
  if (!request.key.empty()) {
    // Sent before? Then the answer is what it made, whatever has changed since (limits, nodes).
    writer.fingerprint = SubmitFingerprint(writer.spec_json, request.count, request.as_group);
    auto found = store_.FindSubmission(request.user, request.key);
    if (!found.ok()) {
      return Status::Unavailable("the submission's idempotency key could not be looked up (" +
                                 found.status().message() + "); nothing was recorded, try again");
    }
    if (*found) return SubmitQueue::AnswerFrom(writer, **found);
  }
  {
    HandlerLock lock(this);
    BERTH_RETURN_IF_ERROR(AdmitLocked(writer));
  }
  Result<SubmitAnswer> answer = CommitInGroup(writer);
  if (answer.ok()) answer->warnings = std::move(writer.warnings);
  return answer;
}

Status Core::PrepareSubmission(SubmitRequest& request) const {
  if (request.count < 1) return Status::Invalid("num_jobs must be at least 1");
  if (request.count > options_.max_jobs_per_submit) {
    return Status::Invalid(fmt::format("num_jobs {} is over the limit of {} jobs per submission",
                                       request.count, options_.max_jobs_per_submit));
  }
  if (request.spec.name.empty()) request.spec.name = "job";
  // `retry: never`: no attempt is ever started twice, so a preempted job or one whose node is lost
  // ends instead of going back to the queue. Said once here, in the stored spec, rather than at
  // every place that requeues.
  if (request.spec.retry.never) {
    request.spec.on_preemption = RecoveryAction::kFail;
    request.spec.on_node_lost = RecoveryAction::kFail;
    request.spec.on_node_fault = RecoveryAction::kFail;
  }
  // A forgotten shell must not hold its node for ever: the server's default time limit, in the
  // stored spec (so `berth show` says it).
  if (request.spec.interactive && !request.spec.time_limit &&
      options_.interactive_time_limit_ms > 0) {
    request.spec.time_limit = options_.interactive_time_limit_ms;
  }
  if (request.spec.max_running && !request.as_group) {
    return Status::Invalid("max_running limits a bulk group: submit it with --num-jobs N");
  }
  return Status::Ok();
}

Status Core::AdmitLocked(SubmitWriter& writer) {
  const SubmitRequest& request = *writer.request;
  writer.received_at_seq = cancel_.seq;
  JobRow row;
  row.num_nodes = request.spec.num_nodes;
  row.resources = request.spec.resources;
  const sched::JobRequest asked = RequestFor(row, request.spec);
  Status feasible = sched::CheckFeasible(nodes_.CapacityViews(), asked);
  if (request.spec.container) {
    BERTH_RETURN_IF_ERROR(CheckContainerPlacement(request.spec, feasible.ok()));
  }
  if (!feasible.ok()) {
    return Status::Infeasible("this job can never run here: " + feasible.message());
  }
  if (std::string w =
          UnenforcedLimits(sched::NodesThatCouldHold(nodes_.CapacityViews(), asked), request.spec);
      !w.empty()) {
    writer.warnings.push_back(std::move(w));
  }
  // A user's max-pending-jobs refuses what would take them over it (pending jobs are counted
  // per user as jobs change).
  // Submissions admitted but not yet recorded count too (reserved_pending_), so that concurrent
  // ones cannot together go past the cap.
  const UserRow* rules = shares_.RulesOf(request.user);
  const bool capped = rules != nullptr && rules->max_pending_jobs;
  if (capped) {
    auto reserved = reserved_pending_.find(request.user);
    const int64_t pending = counts_.Pending(request.user) +
                            (reserved == reserved_pending_.end() ? 0 : reserved->second);
    const int64_t limit = *rules->max_pending_jobs;
    if (pending + request.count > limit) {
      return Status::Forbidden(fmt::format(
          "user {} has {} pending job(s) and may have at most {} (max-pending-jobs); this "
          "submission of {} would exceed it",
          request.user, pending, limit, request.count));
    }
  }
  if (!request.spec.depends_on.empty()) {
    // Refused now if a dependency names something unknown or not theirs, or can never hold;
    // checked again when the jobs are recorded (a dependency may end in between).
    auto conditions = DependencyConditions(request.spec, request.user, request.depend_on_any,
                                           &writer.dependencies);
    if (!conditions.ok()) return conditions.status();
    sched::Dependencies check;
    if (check.Add(0, std::move(*conditions)) == sched::DepState::kFailed) {
      return Status::Invalid("this job could never start: " + check.Find(0)->why);
    }
  }
  // Every admitted submission is counted until it is applied (for a capped user, against their
  // cap): the users with submissions in flight are those a `cancel --all` must remember.
  reserved_pending_[request.user] += request.count;
  writer.reserved_pending = request.count;
  return Status::Ok();
}

// Group commit (server/core/submit_queue.h): the writer at the queue's front records everything
// queued behind it in one store transaction, outside the state lock, then applies it to memory.
Result<SubmitAnswer> Core::CommitInGroup(SubmitWriter& writer) {
  if (!submits_.Join(writer)) return std::move(writer.answer);
  const SubmitQueue::Group group = submits_.TakeGroup();
  const TimeMs now = clock_.Now();
  const std::vector<SubmitQueue::Entry*> writing = group.Writing();
  std::vector<Submission> subs = SubmissionsOf(writing, now);
  Result<std::vector<SubmitResult>> stored = std::vector<SubmitResult>();
  if (!subs.empty()) stored = store_.SubmitMany(subs);
  {
    HandlerLock lock(this);
    ApplyGroupLocked(group.entries, writing, stored, now);
  }
  submits_.Finish(group, stored, now);
  return std::move(writer.answer);
}

std::vector<Submission> Core::SubmissionsOf(const std::vector<SubmitQueue::Entry*>& writing,
                                            TimeMs now) {
  std::vector<Submission> subs;
  subs.reserve(writing.size());
  for (SubmitQueue::Entry* entry : writing) {
    auto* w = static_cast<SubmitWriter*>(entry);  // the core queues only SubmitWriters
    const JobSpec& spec = w->request->spec;
    Submission sub;
    sub.spec_json = std::move(w->spec_json);
    sub.key = w->request->key;
    sub.fingerprint = w->fingerprint;
    sub.name = spec.name;
    sub.user = w->request->user;
    sub.priority = spec.priority;
    sub.num_nodes = spec.num_nodes;
    sub.resources = spec.resources;
    sub.as_group = w->request->as_group;
    sub.max_running = spec.max_running;
    sub.count = w->request->count;
    sub.now = now;
    subs.push_back(std::move(sub));
  }
  return subs;
}

void Core::ApplyGroupLocked(const std::vector<SubmitQueue::Entry*>& group,
                            const std::vector<SubmitQueue::Entry*>& writing,
                            const Result<std::vector<SubmitResult>>& stored, TimeMs now) {
  // Recorded (counted in counts_ now) or refused: no longer reserved.
  for (SubmitQueue::Entry* entry : group) {
    auto* w = static_cast<SubmitWriter*>(entry);
    if (w->reserved_pending == 0) continue;
    auto reserved = reserved_pending_.find(w->request->user);
    if ((reserved->second -= w->reserved_pending) <= 0) reserved_pending_.erase(reserved);
    w->reserved_pending = 0;
  }
  for (size_t i = 0; i < writing.size(); ++i) {
    auto* w = static_cast<SubmitWriter*>(writing[i]);
    if (!stored.ok()) {
      w->answer = Status::Unavailable("the submission could not be recorded (" +
                                      stored.status().message() + "); try again" +
                                      (w->key.empty() ? "" : " with the same idempotency key"));
    } else {
      ApplySubmitted(*w, (*stored)[i], now);
    }
  }
  // A user with no submission in flight now needs no cancel --all epoch: it only catches
  // submissions received before it and applied after (cancel_.user_seq stays bounded by the users
  // with submissions in flight, whatever names a node may speak for).
  for (SubmitQueue::Entry* entry : group) {
    const std::string& user = static_cast<SubmitWriter*>(entry)->request->user;
    if (!reserved_pending_.count(user)) cancel_.user_seq.erase(user);
  }
  if (stored.ok() && !writing.empty()) RequestPassLocked();
}

void Core::ApplySubmitted(SubmitWriter& writer, const SubmitResult& stored, TimeMs now) {
  SubmitRequest& request = *writer.request;
  std::shared_ptr<const JobSpec> shared(new JobSpec(std::move(request.spec)));
  RememberSpec(stored.spec_id, shared);
  AddSubmittedJobs(request, stored, shared, now);
  if (stored.group && shared->max_running) group_limits_.Set(*stored.group, *shared->max_running);
  // What happened to the submission between its commit and now: cancels that caught it in flight,
  // dependencies that may have failed meanwhile.
  Txn txn;
  auto user_seq = cancel_.user_seq.find(request.user);
  const bool cancelled_in_flight =
      cancel_.all_users_seq > writer.received_at_seq ||
      (user_seq != cancel_.user_seq.end() && user_seq->second > writer.received_at_seq);
  std::vector<std::pair<int64_t, std::string>> cancelling =
      CancelOnArrival(txn, stored.ids, cancelled_in_flight, now);
  if (!shared->depends_on.empty() && !cancelled_in_flight) {
    auto conditions =
        DependencyConditions(*shared, request.user, /*any_owner=*/true, &writer.dependencies);
    if (!conditions.ok()) {
      // Checked before it was written: only the store can fail here. The jobs wait, as they would
      // after a restart that could not read their dependencies.
      LogError("jobs {}..{}: dependencies unreadable ({}); they wait", stored.ids.front(),
               stored.ids.back(), conditions.status().message());
    } else {
      AddWaiter(txn, stored.spec_id, std::move(*conditions), stored.ids.front(), stored.ids.back(),
                static_cast<int>(stored.ids.size()), now);
    }
  }
  if (!txn.batch.empty() || !txn.out.deps_changed.empty()) {
    Status st = Execute(txn);
    // The jobs stay pending, as recorded: the submission itself succeeded. The cancels promised
    // are owed: those jobs are never placed, and the cancels are retried until they are committed
    // (RetryOwedCancels), as are cancellations of jobs whose dependencies failed.
    if (!st.ok()) {
      LogError("after recording a submission: {}; its cancels are retried", st.message());
      if (!shared->depends_on.empty()) waiters_.RetryCancel(stored.spec_id);
      for (auto& [id, why] : cancelling) owed_cancels_[id] = std::move(why);
    } else {
      for (const auto& [id, why] : cancelling) owed_cancels_.erase(id);
    }
  }
  writer.answer = SubmitAnswer{.group = stored.group, .ids = stored.ids};
}

void Core::AddSubmittedJobs(const SubmitRequest& request, const SubmitResult& stored,
                            const std::shared_ptr<const JobSpec>& shared, TimeMs now) {
  // Every job of the submission has the same pool and owner: one count group for all.
  const uint32_t count_group = CountGroup(shared->pool, request.user);
  if (stored.group) {
    GroupTallies::Tally tally;
    tally.size = static_cast<int64_t>(stored.ids.size());
    tally.user = request.user;
    tally.max_running = shared->max_running;
    tally.by_status[static_cast<int>(JobStatus::kPending)] = tally.size;
    tally.live = tally.size;
    tallies_.Start(*stored.group, std::move(tally));
  }
  std::shared_ptr<const sched::JobRequest> shared_request;
  for (size_t i = 0; i < stored.ids.size(); ++i) {
    ActiveJob job;
    job.row.id = stored.ids[i];
    job.row.spec_id = stored.spec_id;
    job.row.group = stored.group;
    if (stored.group) job.row.rank = static_cast<int>(i);
    job.row.name = shared->name;
    job.row.user = request.user;
    job.row.priority = shared->priority;
    job.row.num_nodes = shared->num_nodes;
    job.row.resources = shared->resources;
    job.row.status = JobStatus::kPending;
    job.row.reason = "";  // as stored; the submission event says "submitted"
    job.row.submitted_at = now;
    job.queued_at = now;
    job.spec = shared;
    if (!shared_request) {
      shared_request = std::make_shared<const sched::JobRequest>(RequestFor(job.row, *shared));
    }
    job.request = shared_request;
    job.group_size = request.count;
    job.ranks.resize(static_cast<size_t>(shared->num_nodes));
    job.count_group = count_group;
    if (stored.group) job.tallied = JobStatus::kPending;
    jobs_.Enter(std::move(job));
  }
}

std::vector<std::pair<int64_t, std::string>> Core::CancelOnArrival(Txn& txn,
                                                                   const std::vector<int64_t>& ids,
                                                                   bool cancelled_in_flight,
                                                                   TimeMs now) {
  std::vector<std::pair<int64_t, std::string>> cancelling;  // (job, why)
  for (int64_t id : ids) {
    // Cancelled before it got here: by a cancel --all that arrived while it was submitted, or by
    // a cancel of its id between its commit and now (Cancel found it in the store only).
    std::string why;
    if (auto owed = owed_cancels_.find(id); owed != owed_cancels_.end()) {
      why = owed->second;
    } else if (cancelled_in_flight) {
      why = "cancelled by a cancel --all that arrived while it was submitted";
    }
    if (why.empty()) continue;
    EndJob(txn, jobs_.at(id), JobStatus::kCancelled, why, std::nullopt, now);
    cancelling.emplace_back(id, std::move(why));
  }
  return cancelling;
}

Result<CancelAnswer> Core::Cancel(const CancelRequest& request) {
  bool by_filter = request.all || request.all_users || request.group;
  if (request.ids.empty() && !by_filter) {
    return Status::Invalid("say which jobs: 'ids', 'group' or 'all'");
  }
  CancelAnswer answer;
  std::vector<int64_t> unknown;
  std::vector<int64_t> ids;
  // In chunks of pass_commit_chunk jobs, each one commit and one hold of the lock, so that reports,
  // heartbeats and submissions get in between (`cancel --all` of 100,000 jobs held the lock for
  // 0.8 s). The first chunk also takes the cancel epochs and the list of jobs, under one hold: a
  // submission applied after it is either listed or cancelled by its epoch on apply.
  for (size_t next = 0, chunk = 0; chunk == 0 || next < ids.size(); ++chunk) {
    // Requests that waited for the lock during the last chunk take it first: each waits for one
    // chunk at most, however many jobs the cancel ends.
    if (chunk > 0) LetWaitingHandlersIn();
    HandlerLock lock(this);
    TimeMs now = clock_.Now();
    Txn txn;
    txn.by = request.user;
    if (chunk == 0) {
      txn.journal.SaveValue(cancel_);
      if (request.all_users) cancel_.all_users_seq = ++cancel_.seq;
      // A user's epoch matters only to their submissions in flight (ApplyGroupLocked forgets it
      // with their last one).
      if (request.all && !request.all_users && reserved_pending_.count(request.user)) {
        cancel_.user_seq[request.user] = ++cancel_.seq;
      }
      ids = CancelTargets(request);
    }
    const size_t cancelled_before = answer.cancelled.size();
    const size_t end = std::min(ids.size(), next + std::max<size_t>(1, options_.pass_commit_chunk));
    for (; next < end; ++next) {
      const int64_t id = ids[next];
      auto it = jobs_.find(id);
      // Ended for the user (perhaps still stopping): reported as finished, never ended twice.
      if (it == jobs_.end() || it->second.terminating || IsTerminal(it->second.row.status)) {
        unknown.push_back(id);
        continue;
      }
      if (!request.cancel_any && it->second.row.user != request.user) {
        answer.forbidden.push_back(id);
        continue;
      }
      EndJob(txn, it->second, JobStatus::kCancelled, CancelReason(request), std::nullopt, now);
      answer.cancelled.push_back(id);
    }
    txn.out.reap = true;
    txn.out.kick = true;
    if (Status st = Execute(txn); !st.ok()) {
      if (chunk == 0) return st;
      return Status::Unavailable(fmt::format(
          "{} job(s) were cancelled, then the store failed ({}); run the same cancel again for the "
          "rest",
          cancelled_before, st.message()));
    }
  }
  if (!unknown.empty()) BERTH_RETURN_IF_ERROR(CancelUnknown(request, unknown, answer));
  return answer;
}

std::vector<int64_t> Core::CancelTargets(const CancelRequest& request) {
  std::vector<int64_t> ids;
  std::set<int64_t> seen;
  for (int64_t id : request.ids) {
    if (seen.insert(id).second) ids.push_back(id);
  }
  if (request.all || request.all_users || request.group) {
    for (const auto& [id, job] : jobs_) {
      if (job.terminating || IsTerminal(job.row.status)) continue;
      if (request.group && job.row.group != *request.group) continue;
      if (request.all && !request.all_users && job.row.user != request.user) continue;
      if (!seen.count(id)) ids.push_back(id);
    }
  }
  return ids;
}

Status Core::CancelUnknown(const CancelRequest& request, const std::vector<int64_t>& unknown,
                           CancelAnswer& answer) {
  auto rows = store_.GetJobs(unknown);
  if (!rows.ok()) {
    return Status::Unavailable(fmt::format(
        "{} job(s) cancelled, but whether jobs {} exist could not be read ({}); try again",
        answer.cancelled.size(), fmt::join(unknown, ", "), rows.status().message()));
  }
  std::map<int64_t, const JobRow*> stored;
  for (const JobRow& row : *rows) stored[row.id] = &row;
  std::vector<const JobRow*> just_submitted;
  for (int64_t id : unknown) {
    auto row = stored.find(id);
    if (row == stored.end()) {
      answer.not_found.push_back(id);
    } else if (IsTerminal(row->second->status)) {
      answer.already_finished.push_back(id);
    } else {
      just_submitted.push_back(row->second);  // committed, not yet applied when the cancel looked
    }
  }
  if (just_submitted.empty()) return Status::Ok();
  HandlerLock lock(this);
  TimeMs now = clock_.Now();
  const std::string why = CancelReason(request);
  Txn txn;
  txn.by = request.user;
  std::vector<int64_t> owed;
  for (const JobRow* row : just_submitted) {
    if (!request.cancel_any && row->user != request.user) {
      answer.forbidden.push_back(row->id);
      continue;
    }
    auto it = jobs_.find(row->id);
    if (it == jobs_.end()) {
      owed.push_back(row->id);  // its submission's apply cancels it
    } else if (it->second.terminating || IsTerminal(it->second.row.status)) {
      answer.already_finished.push_back(row->id);
      continue;
    } else {
      EndJob(txn, it->second, JobStatus::kCancelled, why, std::nullopt, now);
    }
    answer.cancelled.push_back(row->id);
  }
  txn.out.reap = true;
  txn.out.kick = true;
  BERTH_RETURN_IF_ERROR(Execute(txn));
  for (int64_t id : owed) owed_cancels_[id] = why;
  return Status::Ok();
}

void Core::RetryOwedCancels() {
  if (owed_cancels_.empty()) return;
  TimeMs now = clock_.Now();
  Txn txn;
  std::vector<int64_t> settled;
  for (const auto& [id, why] : owed_cancels_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;  // not applied yet: its submission's apply cancels it
    if (!it->second.terminating && !IsTerminal(it->second.row.status)) {
      EndJob(txn, it->second, JobStatus::kCancelled, why, std::nullopt, now);
    }
    settled.push_back(id);
  }
  txn.out.reap = true;
  if (Execute(txn).ok()) {
    for (int64_t id : settled) owed_cancels_.erase(id);
  }
}

Status Core::Requeue(int64_t id, const std::string& user, bool any) {
  HandlerLock lock(this);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.terminating || IsTerminal(it->second.row.status)) {
    return Status::Conflict(
        fmt::format("job {} is not active: only a queued or running job can be "
                    "requeued",
                    id));
  }
  ActiveJob& job = it->second;
  if (!any && job.row.user != user) {
    return Status::Forbidden(fmt::format(
        "job {} is not yours: requeueing another user's job needs the operator role", id));
  }
  if (job.row.status == JobStatus::kPending) {
    return Status::Conflict(fmt::format("job {} is queued already", id));
  }
  Txn txn;
  txn.by = user;
  ReturnToQueue(txn, job, "requeued by " + user, clock_.Now());
  return Execute(txn);
}

Result<NodeStatus> Core::Drain(const std::string& name, bool drain, const std::string& by,
                               bool force) {
  HandlerLock lock(this);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::NotFound("no node named '" + name + "'");
  Txn txn;
  txn.by = by;
  const bool clear_health = !drain && force && !it->second.health.faults.empty();
  txn.batch.audit.push_back(AuditRow{
      .seq = 0,
      .at = clock_.Now(),
      .by = by,
      .action = drain ? "drain" : "undrain",
      .target = name,
      .detail =
          clear_health ? "--force: health faults cleared: " + it->second.health.NodeReason() : ""});
  NodeRuntime& node = nodes_.Edit(txn, it->second);
  node.row.draining = drain;
  ++node.sched_gen;
  if (clear_health) {
    // The agent forgets its faults too and probes afresh: a fault still there drains it again.
    node.health.faults.clear();
    if (!node.session.empty()) txn.out.sends.emplace_back(name, proto::HealthResetMessage{});
  }
  txn.batch.nodes.push_back(node.row);
  txn.out.kick = true;
  BERTH_RETURN_IF_ERROR(Execute(txn));
  nodes_.CapacityChanged();
  return StatusOf(node);
}

std::map<std::string, std::map<int, std::vector<Core::Holder>>> Core::DeviceHolders() {
  std::map<std::string, std::map<int, std::vector<Holder>>> out;
  HandlerLock lock(this);
  auto add = [&](int64_t id, const std::string& user, const Placement& placement) {
    for (const NodeGrant& grant : placement) {
      for (const GpuGrant& gpu : grant.gpus) out[grant.node][gpu.index].emplace_back(id, user);
    }
  };
  for (const auto& [id, job] : jobs_) {
    if (IsActive(job.row.status) || job.terminating) add(id, job.row.user, job.row.placement);
  }
  for (const auto& [key, dying] : dying_) {  // earlier attempts still stopping
    auto job = jobs_.find(key.first);
    add(key.first, job == jobs_.end() ? "" : job->second.row.user, dying.placement);
  }
  return out;
}

std::vector<NodeStatus> Core::Nodes() {
  HandlerLock lock(this);
  std::vector<NodeStatus> out;
  out.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    out.push_back(StatusOf(node));
  }
  return out;
}

std::map<std::string, Mib> Core::JobMemoryDefaults(const Placement& placement) {
  std::map<std::string, Mib> out;
  HandlerLock lock(this);
  for (const NodeGrant& grant : placement) {
    auto it = nodes_.find(grant.node);
    if (it != nodes_.end()) out[grant.node] = it->second.job_memory_default;
  }
  return out;
}

std::string Core::UnenforcedLimits(const std::vector<std::string>& candidates,
                                   const JobSpec& spec) const {
  // The nodes among them that say they isolate nothing ("none: REASON"), with the first reason.
  std::vector<std::string> open;
  std::string why;
  for (const std::string& name : candidates) {
    auto node = nodes_.find(name);
    if (node == nodes_.end() || !node->second.isolation.starts_with("none")) continue;
    open.push_back(name);
    if (why.empty()) why = node->second.isolation;
  }
  if (open.empty()) return "";
  std::vector<std::string> asked;
  if (spec.resources.memory > 0)
    asked.push_back("memory (" + FormatMib(spec.resources.memory) + ")");
  asked.push_back("CPUs (" + FormatMilli(spec.resources.cpus) + ")");
  if (spec.resources.wants_gpu()) asked.push_back("GPU devices");
  std::string what = asked.back();
  if (asked.size() > 1) {
    what = Join(std::vector<std::string>(asked.begin(), asked.end() - 1), ", ") + " and " + what;
  }
  constexpr size_t kNamed = 5;
  std::string names = Join(
      std::vector<std::string>(open.begin(), open.begin() + std::min(open.size(), kNamed)), ", ");
  if (open.size() > kNamed) names += fmt::format(" and {} more", open.size() - kNamed);
  if (open.size() == candidates.size()) {
    return fmt::format(
        "limits not enforced: the node{} that can run this job ({}) isolate{} nothing ({}), so "
        "its {} are not enforced there",
        candidates.size() == 1 ? "" : "s", names, candidates.size() == 1 ? "s" : "", why, what);
  }
  return fmt::format(
      "limits may not be enforced: {} of the {} nodes that can run this job ({}) isolate nothing "
      "({}); there its {} are not enforced",
      open.size(), candidates.size(), names, why, what);
}

Status Core::CheckContainerPlacement(const JobSpec& spec, bool feasible) {
  const std::string& pool = spec.pool;
  size_t in_pool = 0, with_runtime = 0;
  Status refused;
  bool mounts_allowed = spec.container->mounts.empty();
  for (const auto& [name, node] : nodes_) {
    if (!pool.empty() && node.row.pool != pool) continue;
    ++in_pool;
    if (!node.row.labels.count(kContainerRuntimeLabel)) continue;
    ++with_runtime;
    // Its mounts: some node that runs containers must allow them all (the one it is placed on
    // checks again at launch).
    Status st = CheckContainerMounts(*spec.container, node.container_mounts, name);
    mounts_allowed = mounts_allowed || st.ok();
    if (!st.ok() && refused.ok()) refused = st;
  }
  if (!feasible && in_pool > 0 && with_runtime == 0) {
    // Said by the field the user wrote, not by the label it became.
    return Status::Infeasible(
        "this job can never run here: resources.image_id: no node" +
        (pool.empty() ? std::string() : " in pool '" + pool + "'") +
        " runs containers (their agents found no podman, or run with --containers off)");
  }
  if (with_runtime > 0 && !mounts_allowed) return refused;
  return Status::Ok();
}

}  // namespace berth
