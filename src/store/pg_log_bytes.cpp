// PgLogBytes: jobs' output as chunks in PostgreSQL (table log_chunks, store/pg_schema.cpp): each
// append is one row keyed by (job, attempt, rank, start), so an append is one INSERT and a read a
// range of the primary key. Bytes travel hex-encoded (text parameters).
#include <optional>
#include <string_view>

#include "common/mutex.h"
#include "common/strings.h"
#include "store/log_bytes.h"
#include "store/pg.h"

namespace berth {
namespace {

class PgLogBytes final : public LogBytes {
 public:
  PgLogBytes(std::unique_ptr<PgConn> db, std::optional<int64_t> fence)
      : db_(std::move(db)), fence_(fence) {}

  Result<int64_t> Size(const LogKey& key) override {
    MutexLock lock(mu_);
    Result<PgResult> r = db_->Query(
        "SELECT COALESCE(max(start + length(data)), 0) FROM log_chunks "
        "WHERE job_id = $1 AND attempt = $2 AND rank = $3",
        PgParams().Add(key.job).Add(key.attempt).Add(key.rank));
    if (!r.ok()) return r.status();
    return r->Int(0, 0);
  }

  Status Append(const LogKey& key, int64_t at, std::string_view data) override {
    if (data.empty()) return Status::Ok();
    MutexLock lock(mu_);
    PgParams params;
    params.Add(key.job).Add(key.attempt).Add(key.rank).Add(at).Add(HexEncode(data));
    if (!fence_) {
      return db_->Run(
          "INSERT INTO log_chunks(job_id, attempt, rank, start, data) "
          "VALUES ($1, $2, $3, $4, decode($5, 'hex'))",
          params);
    }
    // A leader's appends carry its fencing token like its other writes (docs/ha.md).
    return db_->Run(
        "INSERT INTO log_chunks(job_id, attempt, rank, start, data) "
        "SELECT $1, $2, $3, $4, decode($5, 'hex') FROM (SELECT berth_fence($6)) AS fence",
        params.Add(*fence_));
  }

  std::string Read(const LogKey& key, int64_t offset, size_t max_bytes) override {
    MutexLock lock(mu_);
    const int64_t end = offset + static_cast<int64_t>(max_bytes);
    Result<PgResult> r = db_->Query(
        "SELECT start, encode(data, 'hex') FROM log_chunks WHERE job_id = $1 AND attempt = $2 "
        "AND rank = $3 AND start < $5 AND start + length(data) > $4 ORDER BY start",
        PgParams().Add(key.job).Add(key.attempt).Add(key.rank).Add(offset).Add(end));
    if (!r.ok()) return "";
    std::string out;
    for (int i = 0; i < r->rows() && out.size() < max_bytes; ++i) {
      const int64_t at = offset + static_cast<int64_t>(out.size());  // the next byte wanted
      const int64_t start = r->Int(i, 0);
      if (start > at) break;  // never past a gap
      const std::string chunk = PgUnhex(r->TextView(i, 1));
      const size_t from = static_cast<size_t>(at - start);
      if (from >= chunk.size()) continue;
      out.append(chunk, from, std::min(chunk.size() - from, max_bytes - out.size()));
    }
    return out;
  }

 private:
  Mutex mu_;
  std::unique_ptr<PgConn> db_ GUARDED_BY(mu_);
  const std::optional<int64_t> fence_;
};

}  // namespace

Result<std::unique_ptr<LogBytes>> OpenPgLogBytes(const std::string& conninfo,
                                                 std::optional<int64_t> fence) {
  // Appends do not wait for the WAL flush: a database crash may lose the last few chunks, which
  // the agents then ship again (an append answers the size the server holds; agents resend from
  // there, while they still have it). It makes an append about half as costly (bench/README.md).
  Result<std::unique_ptr<PgConn>> db = PgConn::Connect(conninfo, "-c synchronous_commit=off");
  if (!db.ok()) return db.status();
  return std::unique_ptr<LogBytes>(new PgLogBytes(std::move(*db), fence));
}

Result<int64_t> DeletePgLogsEndedBefore(const std::string& conninfo, TimeMs before,
                                        int64_t max_chunks) {
  Result<std::unique_ptr<PgConn>> db = PgConn::Connect(conninfo, "-c statement_timeout=1000");
  if (!db.ok()) return db.status();
  Result<PgResult> r = (*db)->Query(
      "DELETE FROM log_chunks WHERE ctid = ANY(ARRAY(SELECT c.ctid FROM log_chunks c "
      "JOIN jobs j ON c.job_id = j.id WHERE j.active = 0 AND j.ended_at < $1 LIMIT $2))",
      PgParams().Add(before).Add(max_chunks));
  if (!r.ok()) return r.status();
  return r->Affected();
}

}  // namespace berth
