// LogStore: the server's copy of every job's output, one byte string per (job, attempt, rank), so
// that `berth logs` works while a job runs and after it ended, even when its node is gone. The
// bytes live in a LogBytes backend (store/log_bytes.h): by default one file per log under
// <state>/logs/<job>/; with several servers, in PostgreSQL. Appends are idempotent by byte offset
// (an agent that resends after a lost answer never duplicates output). Thread-safe: an internal
// mutex guards the size cache and serializes appends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

#include "common/status.h"
#include "store/log_bytes.h"

namespace berth {

class LogStore {
 public:
  // Files under `dir`.
  explicit LogStore(std::string dir);
  // Another backend (PostgreSQL).
  explicit LogStore(std::unique_ptr<LogBytes> bytes);

  // Rank index of the interleaved log of a multi-node job: every rank's lines, each prefixed.
  static constexpr int kAllRanks = -1;

  // Appends `data`, which starts at byte `offset` of the log. Bytes already stored are skipped; a
  // gap (offset beyond the end) is refused with Conflict. Returns the log's size afterwards. With a
  // non-empty `prefix` (multi-node jobs), the new bytes also go to the kAllRanks log, each line
  // starting with `prefix`, in arrival order.
  Result<int64_t> Append(int64_t job, int attempt, int rank, int64_t offset, std::string_view data,
                         const std::string& prefix = "");

  // Up to `max_bytes` starting at `offset`; "" at or past the end.
  std::string Read(int64_t job, int attempt, int rank, int64_t offset, size_t max_bytes) const;
  int64_t Size(int64_t job, int attempt, int rank) const;

 private:
  // The size, from the cache or the backend. Requires mu_.
  Result<int64_t> SizeLocked(const LogKey& key) const;

  std::unique_ptr<LogBytes> bytes_;
  mutable std::mutex mu_;
  mutable std::map<std::tuple<int64_t, int, int>, int64_t>
      sizes_;  // guarded by mu_; cache of sizes
  // guarded by mu_; ranks whose last appended byte ended mid-line (their next bytes get no prefix)
  std::map<std::tuple<int64_t, int, int>, bool> mid_line_;
};

}  // namespace berth
