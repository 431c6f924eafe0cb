// LeaderLease: which of several servers sharing one database leads (docs/ha.md). One lease, held by
// one server at a time for a bounded time and renewed by it; each new holder gets a larger fencing
// token, which the store checks on every write of the leader (PgStore::SetFence), so a deposed
// leader that still thinks it leads (paused, partitioned) cannot commit anything.
//
// Times are the database's own clock, so the servers' clocks need not agree.
//
// Thread-safety: implementations are thread-safe (methods may be called from any thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

struct LeaderInfo {
  std::string holder;         // the leading server's id ("" when none ever led)
  std::string url;            // where it serves
  int64_t token = 0;          // its fencing token
  TimeMs since = 0;           // when it took the lease (database clock, ms since the epoch)
  DurationMs expires_in = 0;  // until its lease runs out (<= 0: it has; anyone may take it)
};

class LeaderLease {
 public:
  virtual ~LeaderLease() = default;

  // Takes the lease for `lease_ms` if it is free (never held, expired, or held by `holder` with
  // `token`, i.e. a renewal), and answers the fencing token `holder` now holds; nullopt when
  // another server holds an unexpired lease. A new holder gets a token above every earlier one.
  virtual Result<std::optional<int64_t>> Acquire(const std::string& holder, const std::string& url,
                                                 DurationMs lease_ms) = 0;
  // Extends the lease of `holder` with `token` by `lease_ms` from now: false when it is no longer
  // theirs (another server took it after it expired).
  virtual Result<bool> Renew(const std::string& holder, int64_t token, DurationMs lease_ms) = 0;
  // Gives the lease up at once (a clean shutdown), so that another server takes over without
  // waiting for it to expire. Does nothing when it is no longer theirs.
  virtual Status Release(const std::string& holder, int64_t token) = 0;
  virtual Result<LeaderInfo> Current() = 0;
};

}  // namespace berth
