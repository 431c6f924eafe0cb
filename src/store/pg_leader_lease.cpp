#include "store/pg_leader_lease.h"

namespace berth {

Result<std::unique_ptr<PgLeaderLease>> PgLeaderLease::Open(const std::string& conninfo) {
  // A takeover must not hang behind a lock held by a paused server: give up after a while and
  // try again at the next tick (in the session options, so a reconnect keeps it).
  Result<std::unique_ptr<PgConn>> db = PgConn::Connect(conninfo, "-c lock_timeout=2s");
  if (!db.ok()) return db.status();
  return std::unique_ptr<PgLeaderLease>(new PgLeaderLease(std::move(*db)));
}

Result<std::optional<int64_t>> PgLeaderLease::Acquire(const std::string& holder,
                                                      const std::string& url, DurationMs lease_ms) {
  MutexLock lock(mu_);
  // Ours already (a renewal keeps the token), or free: a new token above every earlier one.
  Result<PgResult> r = db_->Query(
      "UPDATE berth_leader SET "
      "token = CASE WHEN holder = $1 AND expires_at > clock_timestamp() THEN token "
      "ELSE token + 1 END, "
      "since = CASE WHEN holder = $1 AND expires_at > clock_timestamp() THEN since "
      "ELSE (extract(epoch from clock_timestamp()) * 1000)::bigint END, "
      "holder = $1, url = $2, "
      "expires_at = clock_timestamp() + make_interval(secs => $3::double precision / 1000) "
      "WHERE one = 1 AND (holder = $1 OR expires_at <= clock_timestamp()) RETURNING token",
      PgParams().Add(holder).Add(url).Add(lease_ms));
  if (!r.ok()) return r.status();
  if (r->rows() == 0) return std::optional<int64_t>();
  return std::optional<int64_t>(r->Int(0, 0));
}

Result<bool> PgLeaderLease::Renew(const std::string& holder, int64_t token, DurationMs lease_ms) {
  MutexLock lock(mu_);
  Result<PgResult> r = db_->Query(
      "UPDATE berth_leader SET "
      "expires_at = clock_timestamp() + make_interval(secs => $3::double precision / 1000) "
      "WHERE one = 1 AND holder = $1 AND token = $2",
      PgParams().Add(holder).Add(token).Add(lease_ms));
  if (!r.ok()) return r.status();
  return r->Affected() == 1;
}

Status PgLeaderLease::Release(const std::string& holder, int64_t token) {
  MutexLock lock(mu_);
  return db_->Run(
      "UPDATE berth_leader SET expires_at = '-infinity' WHERE one = 1 AND holder = $1 AND "
      "token = $2",
      PgParams().Add(holder).Add(token));
}

Result<LeaderInfo> PgLeaderLease::Current() {
  MutexLock lock(mu_);
  Result<PgResult> r = db_->Query(
      "SELECT holder, url, token, since, CASE WHEN expires_at = '-infinity' THEN -1 ELSE "
      "(extract(epoch from (expires_at - clock_timestamp())) * 1000)::bigint END "
      "FROM berth_leader WHERE one = 1");
  if (!r.ok()) return r.status();
  if (r->rows() == 0) return Status::Internal(db_->where() + ": the berth_leader row is missing");
  return LeaderInfo{.holder = r->Text(0, 0),
                    .url = r->Text(0, 1),
                    .token = r->Int(0, 2),
                    .since = r->Int(0, 3),
                    .expires_in = r->Int(0, 4)};
}

}  // namespace berth
