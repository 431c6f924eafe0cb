// SqliteStore: notifications' sinks and outbox (docs/notifications.md).
#include <cstdint>
#include <string>
#include <vector>

#include "store/sqlite_store.h"

namespace berth {

namespace {

constexpr const char* kSqliteNoticeColumns =
    "seq, event_id, user, sink, type, job, grp, created_at, payload, state, attempts, next_at, "
    "last_error, sent_at";

NoticeRow ReadSqliteNotice(const Statement& s) {
  return NoticeRow{.seq = s.Int(0),
                   .event_id = s.Text(1),
                   .user = s.Text(2),
                   .sink = s.Text(3),
                   .type = s.Text(4),
                   .job = s.Int(5),
                   .group = s.OptInt(6),
                   .created_at = s.Int(7),
                   .payload = s.Text(8),
                   .state = s.Text(9),
                   .attempts = static_cast<int>(s.Int(10)),
                   .next_at = s.Int(11),
                   .last_error = s.Text(12),
                   .sent_at = s.OptInt(13)};
}

}  // namespace

Status SqliteStore::WriteNotifications(const Batch& batch) {
  for (const NotifySinkRow& sink : batch.notify_sinks) {
    Result<StatementRef> ref = db_->Cached(
        "INSERT INTO notify_sinks(user, kind, target, secret, format, events, updated_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(user, kind) DO UPDATE SET "
        "target = excluded.target, secret = excluded.secret, format = excluded.format, "
        "events = excluded.events, updated_at = excluded.updated_at");
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)
                              ->Bind(1, sink.user)
                              .Bind(2, sink.kind)
                              .Bind(3, sink.target)
                              .Bind(4, sink.secret)
                              .Bind(5, sink.format)
                              .Bind(6, sink.events)
                              .Bind(7, sink.updated_at)
                              .Run());
  }
  for (const auto& [user, kind] : batch.notify_sink_deletes) {
    Result<StatementRef> ref =
        db_->Cached("DELETE FROM notify_sinks WHERE user = ?1 AND kind = ?2");
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)->Bind(1, user).Bind(2, kind).Run());
  }
  if (batch.notices.empty()) return Status::Ok();
  for (const NoticeRow& n : batch.notices) {
    Result<StatementRef> ref = db_->Cached(
        "INSERT OR IGNORE INTO notices(event_id, user, sink, type, job, grp, created_at, payload, "
        "state, attempts, next_at, last_error, sent_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)
                              ->Bind(1, n.event_id)
                              .Bind(2, n.user)
                              .Bind(3, n.sink)
                              .Bind(4, n.type)
                              .Bind(5, n.job)
                              .Bind(6, n.group)
                              .Bind(7, n.created_at)
                              .Bind(8, n.payload)
                              .Bind(9, n.state)
                              .Bind(10, int64_t{n.attempts})
                              .Bind(11, n.next_at)
                              .Bind(12, n.last_error)
                              .Bind(13, n.sent_at)
                              .Run());
  }
  // The outbox keeps what was delivered (or given up on) for a week, for `berth notify ls`.
  Result<StatementRef> ref =
      db_->Cached("DELETE FROM notices WHERE created_at < ?1 AND state != 'pending'");
  if (!ref.ok()) return ref.status();
  return (*ref)->Bind(1, batch.notices.front().created_at - kNoticeRetentionMs).Run();
}

Result<std::vector<NotifySinkRow>> SqliteStore::LoadNotifySinks() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT user, kind, target, secret, format, events, updated_at FROM notify_sinks "
      "ORDER BY user, kind");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  std::vector<NotifySinkRow> sinks;
  Status read = s.ForEachRow([&]() -> Status {
    sinks.push_back(NotifySinkRow{.user = s.Text(0),
                                  .kind = s.Text(1),
                                  .target = s.Text(2),
                                  .secret = s.Text(3),
                                  .format = s.Text(4),
                                  .events = s.Text(5),
                                  .updated_at = s.Int(6)});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return sinks;
}

Result<std::vector<NoticeRow>> SqliteStore::DueNotices(TimeMs now, int limit) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      std::string("SELECT ") + kSqliteNoticeColumns +
      " FROM notices WHERE state = 'pending' AND next_at <= ?1 ORDER BY next_at, seq LIMIT ?2");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, now).Bind(2, int64_t{limit});
  std::vector<NoticeRow> rows;
  Status read = s.ForEachRow([&]() -> Status {
    rows.push_back(ReadSqliteNotice(s));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return rows;
}

Status SqliteStore::UpdateNotice(const NoticeUpdate& u) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<StatementRef> ref = db_->Cached(
      "UPDATE notices SET state = ?2, attempts = ?3, next_at = ?4, last_error = ?5, sent_at = ?6 "
      "WHERE seq = ?1");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, u.seq)
      .Bind(2, u.state)
      .Bind(3, int64_t{u.attempts})
      .Bind(4, u.next_at)
      .Bind(5, u.last_error)
      .Bind(6, u.sent_at)
      .Run();
}

Result<std::vector<NoticeRow>> SqliteStore::ListNotices(const std::string& user,
                                                        std::optional<int64_t> job, int limit) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref =
      read_db_->Cached(std::string("SELECT ") + kSqliteNoticeColumns +
                       " FROM notices WHERE (?1 = '' OR user = ?1) AND (?2 IS NULL OR job = ?2 OR "
                       "(grp IS NOT NULL AND grp = (SELECT group_id FROM jobs WHERE id = ?2))) "
                       "ORDER BY seq DESC LIMIT ?3");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, user).Bind(2, job).Bind(3, int64_t{limit > 0 ? limit : 100});
  std::vector<NoticeRow> rows;
  Status read = s.ForEachRow([&]() -> Status {
    rows.push_back(ReadSqliteNotice(s));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return rows;
}

}  // namespace berth
