// NoticeSender: the outbox's delivery loop.
#include "server/notify/notice_sender.h"

#include <algorithm>

#include "common/log.h"
#include "server/notify/notice_text.h"

namespace berth {

NoticeSender::NoticeSender(Store& store, const Clock& clock, NoticeTransport& transport,
                           NoticeSenderOptions options)
    : store_(store), clock_(clock), transport_(transport), options_(options) {}

NoticeSender::~NoticeSender() { Stop(); }

void NoticeSender::Start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void NoticeSender::Stop() {
  stopping_ = true;
  Ring();
  if (thread_.joinable()) thread_.join();
}

void NoticeSender::Ring() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    rung_ = true;
  }
  cv_.notify_one();
}

void NoticeSender::Loop() {
  while (!stopping_) {
    const int tried = Drain();
    std::unique_lock<std::mutex> lock(mu_);
    // A full round may have left more due: go on at once.
    if (tried < options_.batch) {
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return rung_ || stopping_.load(); });
    }
    rung_ = false;
  }
}

int NoticeSender::Drain() {
  std::lock_guard<std::mutex> lock(drain_mu_);
  const TimeMs now = clock_.Now();
  Result<std::vector<NoticeRow>> due = store_.DueNotices(now, options_.batch);
  if (!due.ok()) {
    LogWarn("notifications: cannot read the outbox: {}", due.status().message());
    return 0;
  }
  if (due->empty()) return 0;
  Result<std::vector<NotifySinkRow>> sinks = store_.LoadNotifySinks();
  if (!sinks.ok()) {
    LogWarn("notifications: cannot read the sinks: {}", sinks.status().message());
    return 0;
  }
  std::erase_if(minute_, [now](const auto& entry) { return now - entry.second.start >= 60'000; });
  // A sink that failed in this round is not tried again in it: its other notices wait for the same
  // retry, so one receiver that hangs costs a round one timeout, not one per notice.
  std::map<std::pair<std::string, std::string>, NoticeUpdate> failed;
  for (const NoticeRow& row : *due) {
    if (stopping_) break;
    const auto sink = std::make_pair(row.user, row.sink);
    NoticeUpdate update;
    if (auto earlier = failed.find(sink); earlier != failed.end()) {
      update = NoticeUpdate{.seq = row.seq,
                            .state = "pending",
                            .attempts = row.attempts,
                            .next_at = earlier->second.next_at,
                            .last_error = "waiting: " + earlier->second.last_error,
                            .sent_at = std::nullopt};
    } else {
      update = Deliver(row, *sinks, clock_.Now());
      if (update.state == "pending" && update.attempts > row.attempts) failed[sink] = update;
    }
    Status st = store_.UpdateNotice(update);
    if (!st.ok()) LogWarn("notifications: notice {} not updated: {}", row.seq, st.message());
  }
  return static_cast<int>(due->size());
}

std::optional<TimeMs> NoticeSender::RateLimited(const std::string& user, TimeMs now) {
  Minute& m = minute_[user];
  if (now - m.start >= 60'000) m = Minute{.start = now};
  if (m.sent < options_.per_user_per_minute) {
    ++m.sent;
    return std::nullopt;
  }
  // The k-th notice over the limit waits for minute 1 + k / limit after this one.
  const int64_t later = 1 + m.deferred++ / options_.per_user_per_minute;
  return m.start + later * 60'000;
}

NoticeUpdate NoticeSender::Deliver(const NoticeRow& row, const std::vector<NotifySinkRow>& sinks,
                                   TimeMs now) {
  NoticeUpdate update{.seq = row.seq,
                      .state = "pending",
                      .attempts = row.attempts,
                      .next_at = row.next_at,
                      .last_error = row.last_error,
                      .sent_at = std::nullopt};
  auto sink = std::find_if(sinks.begin(), sinks.end(), [&](const NotifySinkRow& s) {
    return s.user == row.user && s.kind == row.sink;
  });
  if (sink == sinks.end()) {
    update.state = "failed";
    update.last_error = row.user + " has no " + row.sink + " sink any more";
    given_up_.Add({row.sink});
    return update;
  }
  if (std::optional<TimeMs> later = RateLimited(row.user, now)) {
    update.next_at = *later;
    update.last_error = "waiting: more than " + std::to_string(options_.per_user_per_minute) +
                        " notifications a minute for " + row.user;
    return update;
  }
  ++update.attempts;
  Status st = Send(row, *sink, now);
  if (st.ok()) {
    update.state = "sent";
    update.sent_at = clock_.Now();
    update.last_error.clear();
    sent_.Add({row.sink});
    return update;
  }
  failed_.Add({row.sink});
  update.last_error = st.message();
  const bool final = st.code() == Code::kInfeasible || st.code() == Code::kInvalidArgument;
  if (final || now - row.created_at >= options_.give_up_ms) {
    update.state = "failed";
    given_up_.Add({row.sink});
    LogWarn("notifications: gave up on {} to {}'s {}: {}", row.event_id, row.user, row.sink,
            st.message());
    return update;
  }
  const int shift = std::min(update.attempts - 1, 20);
  update.next_at = now + std::min<DurationMs>(options_.retry_cap_ms, 2'000LL << shift);
  return update;
}

Status NoticeSender::Send(const NoticeRow& row, const NotifySinkRow& sink, TimeMs now) {
  Result<json::value> parsed = ParseJson(row.payload);
  if (!parsed.ok() || !parsed->is_object()) {
    return Status::Invalid("notice " + row.event_id + " has no readable event");
  }
  json::object event = parsed->as_object();
  if (row.type == "summary" && row.group) {
    // The causes of a finished group's failures, read once it is over (its rows no longer change).
    Result<Store::GroupInfo> group = store_.GetGroup(*row.group);
    if (group.ok()) {
      std::vector<int64_t> ids;
      for (int64_t id = group->first_job; id <= group->last_job; ++id) ids.push_back(id);
      Result<std::vector<JobRow>> jobs = store_.GetJobs(ids);
      if (jobs.ok()) event["failures"] = FailureBreakdown(*jobs);
    }
  }
  if (sink.kind == "email") return transport_.SendMail(NoticeMail(event, sink.target));
  const std::string body = WebhookBody(event, sink.format);
  net::HttpHeaders headers = {
      {"Content-Type", "application/json"},
      {"X-Berth-Event", row.type},
      {"X-Berth-Delivery", row.event_id},
      {"X-Berth-Signature", SignatureHeader(sink.secret, now / 1000, body)},
  };
  return transport_.Post(sink.target, body, headers);
}

void NoticeSender::WriteMetrics(metrics::ExpositionWriter& out) const {
  sent_.Write(out);
  failed_.Write(out);
  given_up_.Write(out);
}

}  // namespace berth
