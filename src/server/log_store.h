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
// Timestamps: each log has a time index, another byte string of the backend holding a 16-byte
// record (offset of the first byte, wall ms) for each second in which bytes arrived, so that
// `berth logs --timestamps` can say when each line reached the server (agents ship output every
// round, so within a round of when it was printed). At most one record per second a log grows.
//
// Thread-safety: thread-safe; an internal mutex guards the cache and serializes appends.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/lru_cache.h"
#include "common/status.h"
#include "store/log_bytes.h"

namespace berth {

class LogStore {
 public:
  // Files under `dir`.
  explicit LogStore(std::string dir, const Clock& clock = SystemClock::Get());
  // Another backend (PostgreSQL).
  explicit LogStore(std::unique_ptr<LogBytes> bytes, const Clock& clock = SystemClock::Get());

  // Rank index of the interleaved log of a multi-node job: every rank's lines, each prefixed.
  static constexpr int kAllRanks = -1;
  // Logs whose size the cache remembers (a few hundred bytes each at most).
  static constexpr size_t kCachedLogs = 4096;
  // The backend's rank of a log's time index (rank >= kAllRanks; the result is below kAllRanks).
  static constexpr int TimesRank(int rank) { return -3 - rank; }
  // One record of a time index: two little-endian int64 (offset, wall ms).
  static constexpr int64_t kStampBytes = 16;

  // Appends `data`, which starts at byte `offset` of the log. Bytes already stored are skipped; a
  // gap (offset beyond the end) is refused with Conflict. Returns the log's size afterwards. With a
  // non-empty `prefix` (multi-node jobs), the new bytes also go to the kAllRanks log, each line
  // starting with `prefix`, in arrival order.
  Result<int64_t> Append(int64_t job, int attempt, int rank, int64_t offset, std::string_view data,
                         const std::string& prefix = "");

  // Up to `max_bytes` starting at `offset`; "" at or past the end.
  std::string Read(int64_t job, int attempt, int rank, int64_t offset, size_t max_bytes) const;
  // As Read, with every line that starts in the range prefixed by the time it arrived at the
  // server ("2026-12-02T03:28:46Z "); lines older than the time index have no prefix.
  // `*raw_bytes` is how many bytes of the log that covers.
  std::string ReadStamped(int64_t job, int attempt, int rank, int64_t offset, size_t max_bytes,
                          size_t* raw_bytes) const;
  int64_t Size(int64_t job, int attempt, int rank) const;
  // Logs the cache remembers now (for tests).
  size_t cached() const;

 private:
  struct Cached {
    int64_t size = 0;
    // Whether the last byte is not a newline (the next bytes continue a line, and get no prefix in
    // the interleaved log); read from the backend when first needed.
    std::optional<bool> mid_line;
    // The time index: its size and its last record's time, read when first needed; a size that
    // is not whole records (a torn write) stops stamping this log.
    std::optional<int64_t> times_size;
    TimeMs last_stamp = 0;
  };
  // The log's cache entry, filled from the backend when it is not cached. Requires mu_.
  Result<Cached*> CachedLocked(const LogKey& key) const;
  // Records in the time index of `key` that bytes from `at` arrived now, unless a record of this
  // second is there. Best effort: a failure leaves the output appended. Requires mu_.
  void StampLocked(const LogKey& key, Cached& log, int64_t at);
  // The time index's records from the last one at or before `offset` to the first past `end`.
  std::vector<std::pair<int64_t, TimeMs>> StampsCovering(const LogKey& key, int64_t offset,
                                                         int64_t end) const;

  std::unique_ptr<LogBytes> bytes_;
  const Clock& clock_;
  mutable std::mutex mu_;
  mutable LruCache<LogKey, Cached> cache_{kCachedLogs};  // guarded by mu_
};

}  // namespace berth
