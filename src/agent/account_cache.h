// AccountCache: the unix accounts (uid, gid, groups, home) an agent looked up for its launches,
// each kept for `ttl_ms`, so that a 1000-job burst reads /etc/passwd and /etc/group once, not 1000
// times. Unknown users are not remembered (one may be added any moment); past `max` accounts the
// cache starts afresh.
//
// Thread-safe: its own lock, never held while looking an account up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "agent/job_account.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"

namespace berth {

class AccountCache {
 public:
  using Lookup = std::function<Result<JobAccount>(const std::string& user)>;
  AccountCache(Lookup lookup, DurationMs ttl_ms, size_t max)
      : lookup_(std::move(lookup)), ttl_ms_(ttl_ms), max_(max) {}

  // `user`'s account as of `now_ms` (monotonic): kept, or looked up (and kept when found).
  Result<JobAccount> Get(const std::string& user, int64_t now_ms) EXCLUDES(mu_);

 private:
  const Lookup lookup_;
  const DurationMs ttl_ms_;
  const size_t max_;
  Mutex mu_;
  std::map<std::string, std::pair<int64_t, JobAccount>> kept_ GUARDED_BY(mu_);  // (expires, it)
};

}  // namespace berth
