// PgStore: notifications' sinks and outbox (as store/sqlite_notify.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "store/pg_store.h"

namespace berth {

namespace {

constexpr const char* kPgNoticeColumns =
    "seq, event_id, \"user\", sink, type, job, grp, created_at, payload, state, attempts, "
    "next_at, last_error, sent_at";

NoticeRow ReadPgNotice(const PgResult& s, int r) {
  return NoticeRow{.seq = s.Int(r, 0),
                   .event_id = s.Text(r, 1),
                   .user = s.Text(r, 2),
                   .sink = s.Text(r, 3),
                   .type = s.Text(r, 4),
                   .job = s.Int(r, 5),
                   .group = s.OptInt(r, 6),
                   .created_at = s.Int(r, 7),
                   .payload = s.Text(r, 8),
                   .state = s.Text(r, 9),
                   .attempts = static_cast<int>(s.Int(r, 10)),
                   .next_at = s.Int(r, 11),
                   .last_error = s.Text(r, 12),
                   .sent_at = s.OptInt(r, 13)};
}

}  // namespace

void PgStore::AddNotificationCalls(const Batch& batch, std::vector<PgCall>& calls) {
  for (const NotifySinkRow& sink : batch.notify_sinks) {
    PgCall call;
    call.sql =
        "INSERT INTO notify_sinks(\"user\", kind, target, secret, format, events, updated_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (\"user\", kind) DO UPDATE SET "
        "target = excluded.target, secret = excluded.secret, format = excluded.format, "
        "events = excluded.events, updated_at = excluded.updated_at";
    call.params.Add(sink.user)
        .Add(sink.kind)
        .Add(sink.target)
        .Add(sink.secret)
        .Add(sink.format)
        .Add(sink.events)
        .Add(sink.updated_at);
    calls.push_back(std::move(call));
  }
  for (const auto& [user, kind] : batch.notify_sink_deletes) {
    PgCall call;
    call.sql = "DELETE FROM notify_sinks WHERE \"user\" = $1 AND kind = $2";
    call.params.Add(user).Add(kind);
    calls.push_back(std::move(call));
  }
  for (const NoticeRow& n : batch.notices) {
    PgCall call;
    call.sql =
        "INSERT INTO notices(event_id, \"user\", sink, type, job, grp, created_at, payload, "
        "state, attempts, next_at, last_error, sent_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) "
        "ON CONFLICT (event_id, sink) DO NOTHING";
    call.params.Add(n.event_id)
        .Add(n.user)
        .Add(n.sink)
        .Add(n.type)
        .Add(n.job)
        .Add(n.group)
        .Add(n.created_at)
        .Add(n.payload)
        .Add(n.state)
        .Add(n.attempts)
        .Add(n.next_at)
        .Add(n.last_error)
        .Add(n.sent_at);
    calls.push_back(std::move(call));
  }
  if (!batch.notices.empty()) {
    // The outbox keeps what was delivered (or given up on) for a week, for `berth notify ls`.
    PgCall call;
    call.sql = "DELETE FROM notices WHERE created_at < $1 AND state <> 'pending'";
    call.params.Add(batch.notices.front().created_at - kNoticeRetentionMs);
    calls.push_back(std::move(call));
  }
}

Result<std::vector<NotifySinkRow>> PgStore::LoadNotifySinks() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT \"user\", kind, target, secret, format, events, updated_at FROM notify_sinks "
      "ORDER BY \"user\" COLLATE \"C\", kind COLLATE \"C\"");
  if (!s.ok()) return s.status();
  std::vector<NotifySinkRow> sinks;
  for (int r = 0; r < s->rows(); ++r) {
    sinks.push_back(NotifySinkRow{.user = s->Text(r, 0),
                                  .kind = s->Text(r, 1),
                                  .target = s->Text(r, 2),
                                  .secret = s->Text(r, 3),
                                  .format = s->Text(r, 4),
                                  .events = s->Text(r, 5),
                                  .updated_at = s->Int(r, 6)});
  }
  return sinks;
}

Result<std::vector<NoticeRow>> PgStore::DueNotices(TimeMs now, int limit) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      std::string("SELECT ") + kPgNoticeColumns +
          " FROM notices WHERE state = 'pending' AND next_at <= $1 ORDER BY next_at, seq LIMIT $2",
      PgParams().Add(now).Add(limit));
  if (!s.ok()) return s.status();
  std::vector<NoticeRow> rows;
  for (int r = 0; r < s->rows(); ++r) rows.push_back(ReadPgNotice(*s, r));
  return rows;
}

Status PgStore::UpdateNotice(const NoticeUpdate& u) {
  MutexLock lock(mu_);
  Result<PgTransaction> txn = PgTransaction::Begin(*db_);
  if (!txn.ok()) return txn.status();
  BERTH_RETURN_IF_ERROR(CheckFence());
  BERTH_RETURN_IF_ERROR(db_->Run(
      "UPDATE notices SET state = $2, attempts = $3, next_at = $4, last_error = $5, sent_at = $6 "
      "WHERE seq = $1",
      PgParams()
          .Add(u.seq)
          .Add(u.state)
          .Add(u.attempts)
          .Add(u.next_at)
          .Add(u.last_error)
          .Add(u.sent_at)));
  return FinishCommit(*txn);
}

Result<std::vector<NoticeRow>> PgStore::ListNotices(const std::string& user,
                                                    std::optional<int64_t> job, int limit) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      std::string("SELECT ") + kPgNoticeColumns +
          " FROM notices WHERE ($1 = '' OR \"user\" = $1) AND ($2::BIGINT IS NULL OR job = $2 OR "
          "(grp IS NOT NULL AND grp = (SELECT group_id FROM jobs WHERE id = $2))) "
          "ORDER BY seq DESC LIMIT $3",
      PgParams().Add(user).Add(job).Add(limit > 0 ? limit : 100));
  if (!s.ok()) return s.status();
  std::vector<NoticeRow> rows;
  for (int r = 0; r < s->rows(); ++r) rows.push_back(ReadPgNotice(*s, r));
  return rows;
}

}  // namespace berth
