// LogStore: the server's copy of every job's output, one byte string per (job, attempt, rank), so
// that `berth logs` works while a job runs and after it ended, even when its node is gone. The
// bytes live in a LogBytes backend (store/log_bytes.h): by default one file per log under
// <state>/logs/<job>/; with several servers, in PostgreSQL. Appends are idempotent by byte offset
// (an agent that resends after a lost answer never duplicates output). Log files are private to
// the server (0600, in 0700 directories): a job's output is its owner's.
//
// Memory: what it caches per log (its size, whether its last byte ended a line) lives in an LRU of
// kCachedLogs entries; a log that fell out is asked of the backend again, so looping over attempts
// or jobs grows nothing.
//
// Thread-safety: thread-safe; an internal mutex guards the cache and serializes appends.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/lru_cache.h"
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
  // Logs whose size the cache remembers (a few hundred bytes each at most).
  static constexpr size_t kCachedLogs = 4096;

  // Appends `data`, which starts at byte `offset` of the log. Bytes already stored are skipped; a
  // gap (offset beyond the end) is refused with Conflict. Returns the log's size afterwards. With a
  // non-empty `prefix` (multi-node jobs), the new bytes also go to the kAllRanks log, each line
  // starting with `prefix`, in arrival order.
  Result<int64_t> Append(int64_t job, int attempt, int rank, int64_t offset, std::string_view data,
                         const std::string& prefix = "");

  // Up to `max_bytes` starting at `offset`; "" at or past the end.
  std::string Read(int64_t job, int attempt, int rank, int64_t offset, size_t max_bytes) const;
  int64_t Size(int64_t job, int attempt, int rank) const;
  // Logs the cache remembers now (for tests).
  size_t cached() const;

 private:
  struct Cached {
    int64_t size = 0;
    // Whether the last byte is not a newline (the next bytes continue a line, and get no prefix in
    // the interleaved log); read from the backend when first needed.
    std::optional<bool> mid_line;
  };
  // The log's cache entry, filled from the backend when it is not cached. Requires mu_.
  Result<Cached*> CachedLocked(const LogKey& key) const;

  std::unique_ptr<LogBytes> bytes_;
  mutable std::mutex mu_;
  mutable LruCache<LogKey, Cached> cache_{kCachedLogs};  // guarded by mu_
};

}  // namespace berth
