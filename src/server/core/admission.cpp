// Admission: submit (checked, group-committed, applied), cancel, requeue, group limits,
// dependencies named.
#include "server/core/admission.h"

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

// "cancelled by alice", or "cancelled by alice: local cluster stopped" with a reason.
std::string CancelReason(const CancelRequest& request) {
  std::string why = "cancelled by " + (request.user.empty() ? "user" : request.user);
  return request.why.empty() ? why : why + ": " + request.why;
}

// What a keyed submission asked for, to tell its retry (the same) from a reuse of its key.
std::string SubmitFingerprint(const std::string& spec_json, int count, bool as_group) {
  return net::Sha256Digest(fmt::format("{}\n{}\n{}", spec_json, count, as_group ? "group" : "one"));
}

// A job's placement.topology names levels of the cluster's, the preferred no coarser than the
// required (docs/topology.md).
Status CheckTopology(const JobSpec& spec, const std::vector<std::string>& levels) {
  auto index = [&](const std::string& name) {
    return std::find(levels.begin(), levels.end(), name) - levels.begin();
  };
  for (const auto& [field, name] : {std::pair{"required", &spec.topology_required},
                                    std::pair{"preferred", &spec.topology_preferred}}) {
    if (name->empty() || index(*name) < static_cast<std::ptrdiff_t>(levels.size())) continue;
    return Status::Invalid(fmt::format(
        "placement.topology.{}: '{}' is not a topology level of this cluster ({})", field, *name,
        levels.empty() ? "it defines none: berth server --topology-levels"
                       : "it has: " + fmt::format("{}", fmt::join(levels, ", "))));
  }
  if (!spec.topology_required.empty() && !spec.topology_preferred.empty() &&
      index(spec.topology_preferred) < index(spec.topology_required)) {
    return Status::Invalid(fmt::format(
        "placement.topology: preferred '{}' is coarser than required '{}' (levels, coarse to "
        "fine: {})",
        spec.topology_preferred, spec.topology_required, fmt::join(levels, ", ")));
  }
  return Status::Ok();
}

}  // namespace

Result<SubmitAnswer> Admission::Submit(SubmitRequest request) {
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
    auto found = s_.store.FindSubmission(request.user, request.key);
    if (!found.ok()) {
      return Status::Unavailable("the submission's idempotency key could not be looked up (" +
                                 found.status().message() + "); nothing was recorded, try again");
    }
    if (*found) return SubmitQueue::AnswerFrom(writer, **found);
  }
  {
    HandlerLock lock(s_);
    BERTH_RETURN_IF_ERROR(AdmitLocked(writer));
  }
  Result<SubmitAnswer> answer = CommitInGroup(writer);
  if (answer.ok()) answer->warnings = std::move(writer.warnings);
  return answer;
}

Status Admission::PrepareSubmission(SubmitRequest& request) const {
  if (request.count < 1) return Status::Invalid("num_jobs must be at least 1");
  if (request.count > s_.options.max_jobs_per_submit) {
    return Status::Invalid(fmt::format("num_jobs {} is over the limit of {} jobs per submission",
                                       request.count, s_.options.max_jobs_per_submit));
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
      s_.options.interactive_time_limit_ms > 0) {
    request.spec.time_limit = s_.options.interactive_time_limit_ms;
  }
  if (request.spec.max_running && !request.as_group) {
    return Status::Invalid("max_running limits a bulk group: submit it with --num-jobs N");
  }
  return Status::Ok();
}

Status Admission::AdmitLocked(SubmitWriter& writer) {
  const SubmitRequest& request = *writer.request;
  writer.received_at_seq = s_.cancel.seq;
  JobRow row;
  row.num_nodes = request.spec.num_nodes;
  row.resources = request.spec.resources;
  const sched::JobRequest asked = s_.RequestFor(row, request.spec);
  BERTH_RETURN_IF_ERROR(CheckTopology(request.spec, s_.options.topology_levels));
  // An exemption from the idle policy of the pool it asks for, else of its team, else the
  // cluster's (under the lock: teams change).
  const IdlePolicy* idle =
      s_.options.idle_policies.For(s_.shares.TeamOf(request.user), request.spec.pool);
  if (!request.spec.idle_ok.empty() && idle && !idle->exempt) {
    return Status::Invalid("idle_ok: the idle policy here allows no exemptions (" + idle->Format() +
                           ")");
  }
  Status feasible =
      sched::CheckFeasible(s_.nodes.CapacityViews(), asked, s_.options.topology_levels);
  if (request.spec.container) {
    BERTH_RETURN_IF_ERROR(CheckContainerPlacement(request.spec, feasible.ok()));
  }
  if (!feasible.ok()) {
    return Status::Infeasible("this job can never run here: " + feasible.message());
  }
  if (std::string w = UnenforcedLimits(sched::NodesThatCouldHold(s_.nodes.CapacityViews(), asked),
                                       request.spec);
      !w.empty()) {
    writer.warnings.push_back(std::move(w));
  }
  // A user's max-pending-jobs refuses what would take them over it (pending jobs are counted
  // per user as jobs change).
  // Submissions admitted but not yet recorded count too (reserved_pending_), so that concurrent
  // ones cannot together go past the cap.
  const UserRow* rules = s_.shares.RulesOf(request.user);
  const bool capped = rules != nullptr && rules->max_pending_jobs;
  if (capped) {
    auto reserved = s_.reserved_pending.find(request.user);
    const int64_t pending = s_.counts.Pending(request.user) +
                            (reserved == s_.reserved_pending.end() ? 0 : reserved->second);
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
  s_.reserved_pending[request.user] += request.count;
  writer.reserved_pending = request.count;
  return Status::Ok();
}

// Group commit (server/core/submit_queue.h): the writer at the queue's front records everything
// queued behind it in one store transaction, outside the state lock, then applies it to memory.
Result<SubmitAnswer> Admission::CommitInGroup(SubmitWriter& writer) {
  if (!s_.submits.Join(writer)) return std::move(writer.answer);
  const SubmitQueue::Group group = s_.submits.TakeGroup();
  const TimeMs now = s_.clock.Now();
  const std::vector<SubmitQueue::Entry*> writing = group.Writing();
  std::vector<Submission> subs = SubmissionsOf(writing, now);
  Result<std::vector<SubmitResult>> stored = std::vector<SubmitResult>();
  if (!subs.empty()) stored = s_.store.SubmitMany(subs);
  {
    HandlerLock lock(s_);
    ApplyGroupLocked(group.entries, writing, stored, now);
  }
  s_.submits.Finish(group, stored, now);
  return std::move(writer.answer);
}

std::vector<Submission> Admission::SubmissionsOf(const std::vector<SubmitQueue::Entry*>& writing,
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

void Admission::ApplyGroupLocked(const std::vector<SubmitQueue::Entry*>& group,
                                 const std::vector<SubmitQueue::Entry*>& writing,
                                 const Result<std::vector<SubmitResult>>& stored, TimeMs now) {
  // Recorded (counted in counts_ now) or refused: no longer reserved.
  for (SubmitQueue::Entry* entry : group) {
    auto* w = static_cast<SubmitWriter*>(entry);
    if (w->reserved_pending == 0) continue;
    auto reserved = s_.reserved_pending.find(w->request->user);
    if ((reserved->second -= w->reserved_pending) <= 0) s_.reserved_pending.erase(reserved);
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
    if (!s_.reserved_pending.count(user)) s_.cancel.user_seq.erase(user);
  }
  if (stored.ok() && !writing.empty()) s_.RequestPassLocked();
}

void Admission::ApplySubmitted(SubmitWriter& writer, const SubmitResult& stored, TimeMs now) {
  SubmitRequest& request = *writer.request;
  std::shared_ptr<const JobSpec> shared(new JobSpec(std::move(request.spec)));
  s_.RememberSpec(stored.spec_id, shared);
  AddSubmittedJobs(request, stored, shared, now);
  if (stored.group && shared->max_running) s_.group_limits.Set(*stored.group, *shared->max_running);
  // What happened to the submission between its commit and now: cancels that caught it in flight,
  // dependencies that may have failed meanwhile.
  Txn txn;
  auto user_seq = s_.cancel.user_seq.find(request.user);
  const bool cancelled_in_flight =
      s_.cancel.all_users_seq > writer.received_at_seq ||
      (user_seq != s_.cancel.user_seq.end() && user_seq->second > writer.received_at_seq);
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
      life_.AddWaiter(txn, stored.spec_id, std::move(*conditions), stored.ids.front(),
                      stored.ids.back(), static_cast<int>(stored.ids.size()), now);
    }
  }
  if (!txn.batch.empty() || !txn.out.deps_changed.empty()) {
    Status st = s_.Execute(txn);
    // The jobs stay pending, as recorded: the submission itself succeeded. The cancels promised
    // are owed: those jobs are never placed, and the cancels are retried until they are committed
    // (RetryOwedCancels), as are cancellations of jobs whose dependencies failed.
    if (!st.ok()) {
      LogError("after recording a submission: {}; its cancels are retried", st.message());
      if (!shared->depends_on.empty()) s_.waiters.RetryCancel(stored.spec_id);
      for (auto& [id, why] : cancelling) s_.owed_cancels[id] = std::move(why);
    } else {
      for (const auto& [id, why] : cancelling) s_.owed_cancels.erase(id);
    }
  }
  writer.answer = SubmitAnswer{.group = stored.group, .ids = stored.ids};
}

void Admission::AddSubmittedJobs(const SubmitRequest& request, const SubmitResult& stored,
                                 const std::shared_ptr<const JobSpec>& shared, TimeMs now) {
  // Every job of the submission has the same pool and owner: one count group for all.
  const uint32_t count_group = books_.CountGroup(shared->pool, request.user);
  if (stored.group) {
    GroupTallies::Tally tally;
    tally.size = static_cast<int64_t>(stored.ids.size());
    tally.user = request.user;
    tally.max_running = shared->max_running;
    tally.by_status[static_cast<int>(JobStatus::kPending)] = tally.size;
    tally.live = tally.size;
    s_.tallies.Start(*stored.group, std::move(tally));
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
      shared_request = std::make_shared<const sched::JobRequest>(s_.RequestFor(job.row, *shared));
    }
    job.request = shared_request;
    job.group_size = request.count;
    job.ranks.resize(static_cast<size_t>(shared->num_nodes));
    job.count_group = count_group;
    if (stored.group) job.tallied = JobStatus::kPending;
    s_.jobs.Enter(std::move(job));
  }
}

std::vector<std::pair<int64_t, std::string>> Admission::CancelOnArrival(
    Txn& txn, const std::vector<int64_t>& ids, bool cancelled_in_flight, TimeMs now) {
  std::vector<std::pair<int64_t, std::string>> cancelling;  // (job, why)
  for (int64_t id : ids) {
    // Cancelled before it got here: by a cancel --all that arrived while it was submitted, or by
    // a cancel of its id between its commit and now (Cancel found it in the store only).
    std::string why;
    if (auto owed = s_.owed_cancels.find(id); owed != s_.owed_cancels.end()) {
      why = owed->second;
    } else if (cancelled_in_flight) {
      why = "cancelled by a cancel --all that arrived while it was submitted";
    }
    if (why.empty()) continue;
    life_.EndJob(txn, s_.jobs.at(id), JobStatus::kCancelled, why, std::nullopt, now);
    cancelling.emplace_back(id, std::move(why));
  }
  return cancelling;
}

Result<CancelAnswer> Admission::Cancel(const CancelRequest& request) {
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
    if (chunk > 0) s_.LetWaitingHandlersIn();
    HandlerLock lock(s_);
    TimeMs now = s_.clock.Now();
    Txn txn;
    txn.by = request.user;
    if (chunk == 0) {
      txn.journal.SaveValue(s_.cancel);
      if (request.all_users) s_.cancel.all_users_seq = ++s_.cancel.seq;
      // A user's epoch matters only to their submissions in flight (ApplyGroupLocked forgets it
      // with their last one).
      if (request.all && !request.all_users && s_.reserved_pending.count(request.user)) {
        s_.cancel.user_seq[request.user] = ++s_.cancel.seq;
      }
      ids = CancelTargets(request);
    }
    const size_t cancelled_before = answer.cancelled.size();
    const size_t end =
        std::min(ids.size(), next + std::max<size_t>(1, s_.options.pass_commit_chunk));
    for (; next < end; ++next) {
      const int64_t id = ids[next];
      auto it = s_.jobs.find(id);
      // Ended for the user (perhaps still stopping): reported as finished, never ended twice.
      if (it == s_.jobs.end() || it->second.terminating || IsTerminal(it->second.row.status)) {
        unknown.push_back(id);
        continue;
      }
      if (!request.cancel_any && it->second.row.user != request.user) {
        answer.forbidden.push_back(id);
        continue;
      }
      life_.EndJob(txn, it->second, JobStatus::kCancelled, CancelReason(request), std::nullopt,
                   now);
      answer.cancelled.push_back(id);
    }
    txn.out.reap = true;
    txn.out.kick = true;
    if (Status st = s_.Execute(txn); !st.ok()) {
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

std::vector<int64_t> Admission::CancelTargets(const CancelRequest& request) {
  std::vector<int64_t> ids;
  std::set<int64_t> seen;
  for (int64_t id : request.ids) {
    if (seen.insert(id).second) ids.push_back(id);
  }
  if (request.all || request.all_users || request.group) {
    for (const auto& [id, job] : s_.jobs) {
      if (job.terminating || IsTerminal(job.row.status)) continue;
      if (request.group && job.row.group != *request.group) continue;
      if (request.all && !request.all_users && job.row.user != request.user) continue;
      if (!seen.count(id)) ids.push_back(id);
    }
  }
  return ids;
}

Status Admission::CancelUnknown(const CancelRequest& request, const std::vector<int64_t>& unknown,
                                CancelAnswer& answer) {
  auto rows = s_.store.GetJobs(unknown);
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
  HandlerLock lock(s_);
  TimeMs now = s_.clock.Now();
  const std::string why = CancelReason(request);
  Txn txn;
  txn.by = request.user;
  std::vector<int64_t> owed;
  for (const JobRow* row : just_submitted) {
    if (!request.cancel_any && row->user != request.user) {
      answer.forbidden.push_back(row->id);
      continue;
    }
    auto it = s_.jobs.find(row->id);
    if (it == s_.jobs.end()) {
      owed.push_back(row->id);  // its submission's apply cancels it
    } else if (it->second.terminating || IsTerminal(it->second.row.status)) {
      answer.already_finished.push_back(row->id);
      continue;
    } else {
      life_.EndJob(txn, it->second, JobStatus::kCancelled, why, std::nullopt, now);
    }
    answer.cancelled.push_back(row->id);
  }
  txn.out.reap = true;
  txn.out.kick = true;
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  for (int64_t id : owed) s_.owed_cancels[id] = why;
  return Status::Ok();
}

Status Admission::Requeue(int64_t id, const std::string& user, bool any) {
  HandlerLock lock(s_);
  auto it = s_.jobs.find(id);
  if (it == s_.jobs.end() || it->second.terminating || IsTerminal(it->second.row.status)) {
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
  life_.ReturnToQueue(txn, job, "requeued by " + user, s_.clock.Now());
  return s_.Execute(txn);
}

std::string Admission::UnenforcedLimits(const std::vector<std::string>& candidates,
                                        const JobSpec& spec) const {
  // The nodes among them that say they isolate nothing ("none: REASON"), with the first reason.
  std::vector<std::string> open;
  std::string why;
  for (const std::string& name : candidates) {
    auto node = s_.nodes.find(name);
    if (node == s_.nodes.end() || !node->second.isolation.starts_with("none")) continue;
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

Status Admission::CheckContainerPlacement(const JobSpec& spec, bool feasible) {
  const std::string& pool = spec.pool;
  size_t in_pool = 0, with_runtime = 0;
  Status refused;
  bool mounts_allowed = spec.container->mounts.empty();
  for (const auto& [name, node] : s_.nodes) {
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

size_t Admission::QueuedSubmissionsForTesting() { return s_.submits.QueuedForTesting(); }

Admission::DependencyRows Admission::ReadDependencyRows(const JobSpec& spec) {
  DependencyRows out;
  std::vector<int64_t> job_ids;
  for (const Dependency& d : spec.depends_on) {
    if (!d.groups) {
      job_ids.insert(job_ids.end(), d.ids.begin(), d.ids.end());
      continue;
    }
    for (int64_t id : d.ids) {
      auto info = s_.store.GetGroup(id);
      auto counts = info.ok() ? s_.store.GroupStatusCounts({id}) : info.status();
      if (!counts.ok()) continue;  // asked again under the lock, which says what is wrong
      out.groups.emplace(id, std::move(*info));
      out.counts.emplace(id, std::move((*counts)[id]));
    }
  }
  if (!job_ids.empty()) {
    auto rows = s_.store.GetJobs(job_ids);
    if (rows.ok()) {
      for (JobRow& row : *rows) out.jobs.emplace(row.id, std::move(row));
    }
  }
  return out;
}

Result<std::vector<sched::DepCondition>> Admission::DependencyConditions(
    const JobSpec& spec, const std::string& user, bool any_owner, const DependencyRows* read) {
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
    if (s_.jobs.count(id)) continue;
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
    auto rows = s_.store.GetJobs(to_read);
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
        auto active = s_.jobs.find(id);
        if (active != s_.jobs.end()) {
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

Result<std::pair<std::string, std::map<JobStatus, int>>> Admission::GroupCounts(
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
      for (auto it = s_.jobs.lower_bound(info->second.first_job);
           it != s_.jobs.end() && it->first <= info->second.last_job; ++it) {
        active_now += IsTerminal(it->second.row.status) ? 0 : 1;
      }
      if (active_now == active_then) return std::pair(info->second.user, counts->second);
    }
  }
  auto info = s_.store.GetGroup(group);
  if (!info.ok()) {
    if (info.status().code() == Code::kNotFound) return info.status();
    return Status::Unavailable("cannot read group: " + info.status().message());
  }
  auto counts = s_.store.GroupStatusCounts({group});
  if (!counts.ok()) return Status::Unavailable("cannot read group: " + counts.status().message());
  return std::pair(info->user, (*counts)[group]);
}

std::optional<int> Admission::GroupLimit(int64_t group) {
  HandlerLock lock(s_);
  return s_.group_limits.Limit(group);
}

Status Admission::SetGroupLimit(int64_t group, std::optional<int> max_running,
                                const std::string& user, bool any) {
  if (max_running && (*max_running < 1 || *max_running > kMaxRunning)) {
    return Status::Invalid(fmt::format("max_running must be between 1 and {}", kMaxRunning));
  }
  // The group's owner never changes: read before the lock (a round trip on PostgreSQL).
  auto info = s_.store.GetGroup(group);
  if (!info.ok()) return info.status();
  HandlerLock lock(s_);
  if (info->user != user && !any) {
    return Status::Forbidden(
        fmt::format("group {} belongs to {}; changing another user's group needs the operator role",
                    group, info->user));
  }
  Txn txn;
  txn.by = user;
  txn.journal.Save(s_.group_limits, group);
  txn.batch.group_limits.emplace_back(group, max_running);
  AuditRow audit;
  audit.at = s_.clock.Now();
  audit.by = user;
  audit.action = "group update";
  audit.target = fmt::format("group {}", group);
  audit.detail = max_running ? fmt::format("max_running {}", *max_running) : "max_running none";
  txn.batch.audit.push_back(std::move(audit));
  s_.group_limits.Set(group, max_running);
  txn.out.kick = true;  // a higher limit may let more of its jobs start now
  Status st = s_.Execute(txn);
  if (st.ok()) s_.tallies.SetLimit(group, max_running);  // read without the lock: once committed
  return st;
}

}  // namespace berth
