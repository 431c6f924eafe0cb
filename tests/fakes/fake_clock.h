// FakeClock: a Clock driven by the test. Both readings start at fixed values and move only when
// told: Advance() moves wall and monotonic time together (time passing); StepWall() moves only the
// wall clock (an NTP step or an operator's `date -s`), which must never expire a lease.
// Thread-safe.
#pragma once

#include <atomic>

#include "common/clock.h"

namespace berth::testing {

class FakeClock final : public Clock {
 public:
  static constexpr TimeMs kStartWall = 1'790'000'000'000;  // 2026-09-21
  static constexpr int64_t kStartMonotonic = 1'000'000;

  TimeMs Now() const override { return wall_.load(); }
  int64_t Monotonic() const override { return mono_.load(); }

  void Advance(DurationMs ms) {
    wall_ += ms;
    mono_ += ms;
  }
  void StepWall(DurationMs ms) { wall_ += ms; }

 private:
  std::atomic<TimeMs> wall_{kStartWall};
  std::atomic<int64_t> mono_{kStartMonotonic};
};

}  // namespace berth::testing
