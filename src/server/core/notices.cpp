// Notices: notifications written with the changes they tell of.
#include "server/core/notices.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "common/json_util.h"
#include "common/log.h"
#include "common/strings.h"
#include "net/http_client.h"

namespace berth {

namespace {

constexpr size_t kMaxTargetBytes = 2048;

bool Failed(JobStatus status) {
  return status == JobStatus::kFailed || status == JobStatus::kFailedSetup ||
         status == JobStatus::kLost;
}

std::string JobEventId(const ActiveJob& job, const std::string& type) {
  return fmt::format("job-{}.{}.{}", job.row.id, job.row.attempt, type);
}

json::object JobPayload(const ActiveJob& job, const std::string& id, const std::string& type,
                        TimeMs now) {
  json::object o;
  o["version"] = 1;
  o["id"] = id;
  o["type"] = type;
  o["created_at"] = now;
  o["job"] = job.row.id;
  o["name"] = job.row.name;
  o["user"] = job.row.user;
  o["status"] = std::string(JobStatusName(job.row.status));
  o["reason"] = job.row.reason;
  o["attempt"] = job.row.attempt;
  if (job.row.group) {
    o["group"] = *job.row.group;
    if (job.row.rank) o["rank"] = *job.row.rank;
  }
  if (job.row.exit_code) o["exit_code"] = *job.row.exit_code;
  json::array nodes;
  for (const auto& grant : job.row.placement) nodes.emplace_back(grant.node);
  if (!nodes.empty()) o["nodes"] = std::move(nodes);
  return o;
}

// One notice per sink of `user` into the txn's batch.
void AddNotice(CoreState& s, Txn& txn, const std::string& user, const std::string& type,
               int64_t job, std::optional<int64_t> group, const json::object& payload, TimeMs now)
    REQUIRES(core_lock) {
  const std::vector<NotifySinkRow>* sinks = s.notices.SinksOf(user);
  if (sinks == nullptr) return;
  const std::string text = SerializeJson(payload);
  for (const NotifySinkRow& sink : *sinks) {
    NoticeRow row;
    row.event_id = json::value_to<std::string>(payload.at("id"));
    row.user = user;
    row.sink = sink.kind;
    row.type = type;
    row.job = job;
    row.group = group;
    row.created_at = now;
    row.payload = text;
    row.next_at = now;
    txn.batch.notices.push_back(std::move(row));
  }
  txn.out.notices = true;
}

// A group-wide event written once per group (the group's first `started`, its first `pending>`).
void AddGroupOnce(CoreState& s, Txn& txn, const ActiveJob& job, const std::string& type, TimeMs now)
    REQUIRES(core_lock) {
  const std::string id = fmt::format("group-{}.{}", *job.row.group, type);
  if (s.notices.told.count(id) > 0) return;
  txn.journal.SaveValue(s.notices.told);
  s.notices.told.insert(id);
  json::object payload = JobPayload(job, id, type, now);
  payload["group_size"] = job.group_size;
  AddNotice(s, txn, job.row.user, type, job.row.id, job.row.group, payload, now);
}

void AddJobNotice(CoreState& s, Txn& txn, const ActiveJob& job, const std::string& type, TimeMs now)
    REQUIRES(core_lock) {
  AddNotice(s, txn, job.row.user, type, job.row.id, job.row.group,
            JobPayload(job, JobEventId(job, type), type, now), now);
}

// The type an ended job's notice has: the most specific of those asked for that it is.
std::optional<std::string> EndType(const NotifyEvents& events, const ActiveJob& job) {
  const JobStatus status = job.row.status;
  if (events.oom && IsOutOfMemory(job.row.reason)) return "oom";
  if (events.fail && Failed(status)) return "fail";
  if (events.preempted && status == JobStatus::kPreempted) return "preempted";
  if (events.end) return "end";
  return std::nullopt;
}

}  // namespace

// --- NoticeBook ---

void NoticeBook::Load(std::vector<NotifySinkRow> sinks) {
  sinks_.clear();
  for (NotifySinkRow& row : sinks) SetSink(std::move(row));
}

const std::vector<NotifySinkRow>* NoticeBook::SinksOf(const std::string& user) const {
  auto it = sinks_.find(user);
  return it == sinks_.end() ? nullptr : &it->second;
}

void NoticeBook::SetSink(NotifySinkRow row) {
  row.secret.clear();
  auto& list = sinks_[row.user];
  std::erase_if(list, [&](const NotifySinkRow& r) { return r.kind == row.kind; });
  const std::string user = row.user;
  list.push_back(std::move(row));
  std::sort(list.begin(), list.end(),
            [](const NotifySinkRow& a, const NotifySinkRow& b) { return a.kind < b.kind; });
  NoteWatcher(user);
}

void NoticeBook::NoteWatcher(const std::string& user) {
  node_watchers_.erase(user);
  const std::vector<NotifySinkRow>* sinks = SinksOf(user);
  if (sinks == nullptr) return;
  for (const NotifySinkRow& sink : *sinks) {
    Result<NotifyEvents> events = ParseNotifyEvents(sink.events);
    if (events.ok() && events->nodes) node_watchers_.insert(user);
  }
}

void NoticeBook::RemoveSink(const std::string& user, const std::string& kind) {
  auto it = sinks_.find(user);
  if (it == sinks_.end()) return;
  std::erase_if(it->second, [&](const NotifySinkRow& r) { return r.kind == kind; });
  if (it->second.empty()) sinks_.erase(it);
  NoteWatcher(user);
}

std::optional<NotifyEvents> NoticeBook::EventsOf(const ActiveJob& job) const {
  const std::vector<NotifySinkRow>* sinks = SinksOf(job.row.user);
  if (sinks == nullptr || !job.spec) return std::nullopt;
  std::string text = job.spec->notify;
  if (text.empty()) {
    for (const NotifySinkRow& sink : *sinks) {
      if (!sink.events.empty()) text += (text.empty() ? "" : ",") + sink.events;
    }
  }
  if (text.empty()) return std::nullopt;
  Result<NotifyEvents> events = ParseNotifyEvents(text);
  if (!events.ok() || !events->any()) return std::nullopt;
  return *events;
}

std::optional<std::pair<TimeMs, int64_t>> NoticeBook::PendingKey(const ActiveJob& job) const {
  std::optional<NotifyEvents> events = EventsOf(job);
  if (!events || !events->pending_after) return std::nullopt;
  return std::make_pair(job.row.submitted_at + *events->pending_after, job.row.id);
}

void NoticeBook::Entered(ActiveJob& job) {
  if (job.row.status != JobStatus::kPending || job.row.attempt > 0) return;
  if (auto key = PendingKey(job)) pending_due.insert(*key);
}

void NoticeBook::Left(ActiveJob& job) {
  // Whatever its status now: a deadline outlives no job in memory.
  if (auto key = PendingKey(job)) pending_due.erase(*key);
}

// --- the hooks ---

void NoticeTransition(CoreState& s, Txn& txn, const ActiveJob& job, JobStatus from, TimeMs now) {
  const JobStatus to = job.row.status;
  if (to == from || !s.notices.HasSinks(job.row.user)) return;
  const bool started = to == JobStatus::kRunning;
  const bool ended = IsTerminal(to);
  if (!started && !ended) return;
  std::optional<NotifyEvents> events = s.notices.EventsOf(job);
  if (!events) return;
  const bool grouped = job.row.group.has_value() && !events->each;
  if (started) {
    if (!events->started) return;
    if (grouped) {
      AddGroupOnce(s, txn, job, "started", now);
    } else {
      AddJobNotice(s, txn, job, "started", now);
    }
    return;
  }
  if (grouped) {
    // Looked at once the txn's moves are counted: its summary, and the group-wide events written
    // for it forgotten once it is over.
    txn.notice_groups.emplace(*job.row.group, GroupNoticeAsk{job.row.user, job.row.name, job.row.id,
                                                             FormatNotifyEvents(*events)});
    return;
  }
  if (std::optional<std::string> type = EndType(*events, job)) {
    AddJobNotice(s, txn, job, *type, now);
  }
}

void NoticeRequeue(CoreState& s, Txn& txn, const ActiveJob& job, bool preempted,
                   const std::string& reason, TimeMs now) {
  if (!s.notices.HasSinks(job.row.user)) return;
  std::optional<NotifyEvents> events = s.notices.EventsOf(job);
  if (!events || (job.row.group && !events->each)) return;
  const bool oom = !preempted && IsOutOfMemory(reason);
  if (!(preempted && events->preempted) && !(oom && events->oom)) return;
  const std::string type = preempted ? "preempted" : "oom";
  json::object payload = JobPayload(job, JobEventId(job, type), type, now);
  payload["status"] = std::string(JobStatusName(JobStatus::kPending));
  payload["reason"] = reason;
  payload["requeued"] = true;
  AddNotice(s, txn, job.row.user, type, job.row.id, job.row.group, payload, now);
}

void NoticeNode(CoreState& s, Txn& txn, const std::string& node, const std::string& type,
                const std::string& status, const std::string& reason, TimeMs now) {
  if (s.notices.node_watchers().empty()) return;
  const std::string id = fmt::format("node-{}.{}.{}", node, type, now);
  json::object o;
  o["version"] = 1;
  o["id"] = id;
  o["type"] = type;
  o["created_at"] = now;
  o["job"] = nullptr;
  o["node"] = node;
  o["status"] = status;
  o["reason"] = reason;
  for (const std::string& user : s.notices.node_watchers()) {
    o["user"] = user;
    AddNotice(s, txn, user, type, 0, std::nullopt, o, now);
  }
}

void NoticeIdle(CoreState& s, Txn& txn, const ActiveJob& job, const std::string& warning,
                TimeMs now) {
  if (!s.notices.HasSinks(job.row.user)) return;
  std::optional<NotifyEvents> events = s.notices.EventsOf(job);
  if (!events || !events->idle || (job.row.group && !events->each)) return;
  json::object payload = JobPayload(job, JobEventId(job, "idle"), "idle", now);
  payload["reason"] = warning;
  AddNotice(s, txn, job.row.user, "idle", job.row.id, job.row.group, payload, now);
}

void AddGroupSummaries(CoreState& s, Txn& txn, TimeMs now) {
  // Each group's moves in this txn, counted once (a cancel of a 10,000-job group is one txn).
  std::map<int64_t, std::array<int64_t, GroupTallies::kStatuses>> deltas;
  for (const auto& [group, from, to] : txn.out.tally_moves) {
    if (txn.notice_groups.count(group) == 0) continue;
    auto& d = deltas[group];
    --d[static_cast<size_t>(from)];
    ++d[static_cast<size_t>(to)];
  }
  for (const auto& [group, ask] : txn.notice_groups) {
    std::optional<GroupTallies::Tally> tally = s.tallies.Find(group);
    if (!tally) continue;
    auto counts = tally->by_status;
    if (auto d = deltas.find(group); d != deltas.end()) {
      for (size_t i = 0; i < counts.size(); ++i) counts[i] += d->second[i];
    }
    int64_t active = 0;
    int64_t failed = 0;
    json::object by_status;
    for (size_t i = 0; i < counts.size(); ++i) {
      const auto status = static_cast<JobStatus>(i);
      if (counts[i] == 0) continue;
      if (!IsTerminal(status)) active += counts[i];
      if (Failed(status)) failed += counts[i];
      by_status[std::string(JobStatusName(status))] = counts[i];
    }
    if (active > 0) continue;
    for (const char* type : {"started", "pending"}) {  // the group is over: forget its events
      const std::string told = fmt::format("group-{}.{}", group, type);
      if (s.notices.told.count(told) == 0) continue;
      txn.journal.SaveValue(s.notices.told);
      s.notices.told.erase(told);
    }
    Result<NotifyEvents> events = ParseNotifyEvents(ask.events);
    if (!events.ok()) continue;
    const bool ends = events->end || events->fail || events->oom || events->preempted;
    if (!ends || (!events->end && failed == 0)) continue;  // no end asked, or no failure
    const std::string id = fmt::format("group-{}.end", group);
    json::object o;
    o["version"] = 1;
    o["id"] = id;
    o["type"] = "summary";
    o["created_at"] = now;
    o["job"] = ask.job;
    o["group"] = group;
    o["name"] = ask.name;
    o["user"] = ask.user;
    // Its worst ending: a failure, else a cancellation or preemption, else all succeeded.
    const auto count = [&](JobStatus st) { return counts[static_cast<size_t>(st)]; };
    o["status"] = failed > 0                         ? "FAILED"
                  : count(JobStatus::kCancelled) > 0 ? "CANCELLED"
                  : count(JobStatus::kPreempted) > 0 ? "PREEMPTED"
                                                     : "SUCCEEDED";
    o["group_size"] = tally->size;
    o["counts"] = std::move(by_status);
    AddNotice(s, txn, ask.user, "summary", ask.job, group, o, now);
  }
}

Status ValidateSink(const NotifySinkRow& row) {
  auto one_line = [](const std::string& v) {
    return std::none_of(v.begin(), v.end(),
                        [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  };
  if (row.target.empty() || row.target.size() > kMaxTargetBytes || !one_line(row.target)) {
    return Status::Invalid("notify: the " + row.kind + " must be one line of at most 2048 bytes");
  }
  if (row.kind == "email") {
    const size_t at = row.target.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == row.target.size() ||
        row.target.find_first_of(" <>,;\"") != std::string::npos) {
      return Status::Invalid("notify: '" + row.target +
                             "' is not an e-mail address like alice@example.com");
    }
  } else if (row.kind == "webhook") {
    Result<net::Url> url = net::ParseUrl(row.target);
    if (!url.ok() || (url->scheme != "https" && url->scheme != "http")) {
      return Status::Invalid("notify: the webhook must be an https:// URL, not '" + row.target +
                             "'");
    }
    if (url->scheme == "http" && !net::IsLoopbackHost(url->host)) {
      return Status::Invalid(
          "notify: the webhook must be https:// (plain http:// only to this "
          "machine's loopback, for tests), not '" +
          row.target + "'");
    }
    if (row.secret.size() < 16 || row.secret.size() > 512 || !one_line(row.secret)) {
      return Status::Invalid(
          "notify: a webhook needs a secret of 16 to 512 characters on one "
          "line (--secret-file), to sign its deliveries");
    }
    if (row.format != "json" && row.format != "slack") {
      return Status::Invalid("notify: format must be json or slack, not '" + row.format + "'");
    }
  } else {
    return Status::Invalid("notify: a sink is email or webhook, not '" + row.kind + "'");
  }
  if (!row.events.empty()) {
    Result<NotifyEvents> events = ParseNotifyEvents(row.events);
    if (!events.ok()) return events.status();
  }
  return Status::Ok();
}

// --- Notices ---

Status Notices::SetSink(NotifySinkRow row) {
  BERTH_RETURN_IF_ERROR(ValidateSink(row));
  if (!row.events.empty()) row.events = FormatNotifyEvents(*ParseNotifyEvents(row.events));
  CoreLock lock(s_);
  row.updated_at = s_.clock.Now();
  Txn txn;
  txn.by = row.user;
  txn.batch.notify_sinks.push_back(row);
  txn.batch.audit.push_back(AuditRow{.at = row.updated_at,
                                     .by = row.user,
                                     .action = "notify set",
                                     .target = row.user,
                                     .detail = row.kind + " " + row.target});
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  s_.notices.SetSink(std::move(row));
  return Status::Ok();
}

Status Notices::RemoveSink(const std::string& user, const std::string& kind) {
  CoreLock lock(s_);
  const std::vector<NotifySinkRow>* sinks = s_.notices.SinksOf(user);
  if (sinks == nullptr ||
      std::none_of(sinks->begin(), sinks->end(), [&](const auto& r) { return r.kind == kind; })) {
    return Status::NotFound("notify: " + user + " has no " + kind + " sink");
  }
  Txn txn;
  txn.by = user;
  txn.batch.notify_sink_deletes.emplace_back(user, kind);
  txn.batch.audit.push_back(AuditRow{
      .at = s_.clock.Now(), .by = user, .action = "notify unset", .target = user, .detail = kind});
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  s_.notices.RemoveSink(user, kind);
  return Status::Ok();
}

std::vector<NotifySinkRow> Notices::SinksOf(const std::string& user) {
  CoreLock lock(s_);
  const std::vector<NotifySinkRow>* sinks = s_.notices.SinksOf(user);
  return sinks == nullptr ? std::vector<NotifySinkRow>{} : *sinks;
}

Result<std::string> Notices::SendTest(const std::string& user) {
  CoreLock lock(s_);
  if (!s_.notices.HasSinks(user)) {
    return Status::Conflict("notify: " + user +
                            " has no sink; add one with `berth notify set --email ADDR` or "
                            "`berth notify set --webhook URL --secret-file FILE`");
  }
  const TimeMs now = s_.clock.Now();
  const std::string id = fmt::format("test-{}-{}", user, now);
  json::object o;
  o["version"] = 1;
  o["id"] = id;
  o["type"] = "test";
  o["created_at"] = now;
  o["job"] = 0;
  o["user"] = user;
  o["status"] = "TEST";
  Txn txn;
  txn.by = user;
  AddNotice(s_, txn, user, "test", 0, std::nullopt, o, now);
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  return id;
}

void Notices::SetBell(std::function<void()> bell) {
  CoreLock lock(s_);
  s_.notice_bell = std::move(bell);
}

void Notices::CheckPending() {
  CoreLock lock(s_);
  const TimeMs now = s_.clock.Now();
  if (s_.notices.pending_due.empty() || s_.notices.pending_due.begin()->first > now) return;
  Txn txn;
  txn.journal.SaveValue(s_.notices.pending_due);
  while (!s_.notices.pending_due.empty() && s_.notices.pending_due.begin()->first <= now) {
    const int64_t id = s_.notices.pending_due.begin()->second;
    s_.notices.pending_due.erase(s_.notices.pending_due.begin());
    auto found = s_.jobs.find(id);
    if (found == s_.jobs.end()) continue;
    const ActiveJob& job = found->second;
    if (job.row.status != JobStatus::kPending || job.row.attempt > 0) continue;
    std::optional<NotifyEvents> events = s_.notices.EventsOf(job);
    if (!events || !events->pending_after) continue;
    if (job.row.group && !events->each) {
      AddGroupOnce(s_, txn, job, "pending", now);
    } else {
      AddNotice(s_, txn, job.row.user, "pending", job.row.id, job.row.group,
                JobPayload(job, fmt::format("job-{}.pending", job.row.id), "pending", now), now);
    }
  }
  Status st = s_.Execute(txn);
  if (!st.ok()) LogError("pending notices are written at the next check: {}", st.message());
}

}  // namespace berth
