// FakeLeaderLease: a LeaderLease in memory, with the lease's expiry on a FakeClock and a switch
// that makes every call fail as an unreachable database would. Thread-safe.
#pragma once

#include <mutex>
#include <string>

#include "fakes/fake_clock.h"
#include "store/leader_lease.h"

namespace berth::testing {

class FakeLeaderLease final : public LeaderLease {
 public:
  explicit FakeLeaderLease(const FakeClock& clock) : clock_(clock) {}

  Result<std::optional<int64_t>> Acquire(const std::string& holder, const std::string& url,
                                         DurationMs lease_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return Status::Unavailable("database down");
    const bool live = clock_.Monotonic() < expires_;
    if (live && holder != info_.holder) return std::optional<int64_t>();
    if (!live) {
      ++info_.token;
      info_.since = clock_.Now();
    }
    info_.holder = holder;
    info_.url = url;
    expires_ = clock_.Monotonic() + lease_ms;
    return std::optional<int64_t>(info_.token);
  }
  Result<bool> Renew(const std::string& holder, int64_t token, DurationMs lease_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return Status::Unavailable("database down");
    if (holder != info_.holder || token != info_.token) return false;
    expires_ = clock_.Monotonic() + lease_ms;
    return true;
  }
  Status Release(const std::string& holder, int64_t token) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return Status::Unavailable("database down");
    if (holder == info_.holder && token == info_.token) expires_ = 0;
    return Status::Ok();
  }
  Result<LeaderInfo> Current() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) return Status::Unavailable("database down");
    LeaderInfo info = info_;
    info.expires_in = expires_ - clock_.Monotonic();
    return info;
  }

  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
  }

 private:
  const FakeClock& clock_;
  std::mutex mu_;
  LeaderInfo info_;
  int64_t expires_ = 0;  // monotonic ms
  bool down_ = false;
};

}  // namespace berth::testing
