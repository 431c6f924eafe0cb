// LogBytes: where the server keeps the bytes of jobs' output, one growing byte string per (job,
// attempt, rank) (rank -1: a multi-node job's interleaved log). The server's LogStore
// (server/log_store.h) holds the logic on top (idempotent appends by offset, the interleaved
// log); a backend only stores bytes: in files on the server's disk (one server), or in
// PostgreSQL (PgLogBytes), where every server sharing the database serves them after a failover
// (docs/ha.md).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

struct LogKey {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  auto operator<=>(const LogKey&) const = default;
};

class LogBytes {
 public:
  virtual ~LogBytes() = default;
  // How many bytes the log holds (0 when it does not exist).
  virtual Result<int64_t> Size(const LogKey& key) = 0;
  // Appends `data` at byte `at`, which is the log's current size.
  virtual Status Append(const LogKey& key, int64_t at, std::string_view data) = 0;
  // Up to `max_bytes` from `offset`; "" at or past the end, or when it cannot be read.
  virtual std::string Read(const LogKey& key, int64_t offset, size_t max_bytes) = 0;
};

// The PostgreSQL backend (store/pg_log_bytes.cpp): chunks in the table log_chunks of the database
// at `conninfo`, whose schema PgStore::Open has migrated. With a `fence` (the leader's token), an
// append is refused (kUnavailable) once another server holds the lease, like PgStore's writes.
Result<std::unique_ptr<LogBytes>> OpenPgLogBytes(const std::string& conninfo,
                                                 std::optional<int64_t> fence = std::nullopt);
// Deletes the output of jobs that ended before `before` (wall ms) from that database: the logs'
// retention. At most `max_chunks` per call, and no statement runs over a second, so a caller that
// must stay responsive (the leader renewing its lease) calls it again while it answers max_chunks.
// Answers how many chunks went.
Result<int64_t> DeletePgLogsEndedBefore(const std::string& conninfo, TimeMs before,
                                        int64_t max_chunks = 10'000);

}  // namespace berth
