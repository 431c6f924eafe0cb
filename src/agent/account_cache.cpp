#include "agent/account_cache.h"

namespace berth {

Result<JobAccount> AccountCache::Get(const std::string& user, int64_t now_ms) {
  {
    MutexLock lock(mu_);
    auto it = kept_.find(user);
    if (it != kept_.end() && now_ms < it->second.first) return it->second.second;
  }
  Result<JobAccount> found = lookup_(user);
  if (found.ok()) {
    MutexLock lock(mu_);
    if (kept_.size() >= max_) kept_.clear();
    kept_[user] = {now_ms + ttl_ms_, *found};
  }
  return found;
}

}  // namespace berth
