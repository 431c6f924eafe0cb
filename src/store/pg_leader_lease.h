// PgLeaderLease: the LeaderLease in the PostgreSQL database the servers share (the one-row table
// berth_leader; store/pg_schema.cpp). Acquire and Renew are single UPDATEs compared against the
// database's clock_timestamp(); the fencing check that PgStore runs inside every write transaction
// (berth_fence(token)) takes a share lock on the same row, so a takeover waits for a write of the
// old leader already under way and every later write of the old leader fails.
//
// Thread-safety: one connection, guarded by mu_.
#pragma once

#include <memory>
#include <string>

#include "common/mutex.h"
#include "store/leader_lease.h"
#include "store/pg.h"

namespace berth {

class PgLeaderLease final : public LeaderLease {
 public:
  // Connects to `conninfo` (whose schema PgStore::Open has migrated).
  static Result<std::unique_ptr<PgLeaderLease>> Open(const std::string& conninfo);

  Result<std::optional<int64_t>> Acquire(const std::string& holder, const std::string& url,
                                         DurationMs lease_ms) override;
  Result<bool> Renew(const std::string& holder, int64_t token, DurationMs lease_ms) override;
  Status Release(const std::string& holder, int64_t token) override;
  Result<LeaderInfo> Current() override;

 private:
  explicit PgLeaderLease(std::unique_ptr<PgConn> db) : db_(std::move(db)) {}

  Mutex mu_;
  std::unique_ptr<PgConn> db_ GUARDED_BY(mu_);
};

}  // namespace berth
