// Clock: the only way berth code reads the time, so that tests can drive it (Envoy's TimeSource).
//
// Two readings: Now() is wall time, integer milliseconds since the Unix epoch — for what is stored
// and shown (submitted_at, events); Monotonic() is a monotonic reading in milliseconds — for
// leases, timeouts and intervals, which a step of the wall clock (NTP, an operator) must never
// shorten or stretch. Durations are integer milliseconds. Implementations are thread-safe. The pure
// scheduler never reads a clock: callers pass `now` in. tests/fakes/fake_clock.h drives both by
// hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace berth {

using TimeMs = int64_t;      // milliseconds since the Unix epoch, UTC
using DurationMs = int64_t;  // milliseconds

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall time (ms since the Unix epoch).
  virtual TimeMs Now() const = 0;
  // Monotonic time (ms since an arbitrary origin); never goes back. Not comparable across processes
  // of different boots, and never stored.
  virtual int64_t Monotonic() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimeMs Now() const override;
  int64_t Monotonic() const override;
  static const SystemClock& Get();
};

// SystemClock::Get().Monotonic(), for code that is not handed a Clock (the CLI, the supervisor).
int64_t MonotonicMs();

// "2026-11-22T05:02:03.123Z".
std::string FormatRfc3339(TimeMs t);
// Parses what FormatRfc3339 writes (and whole seconds without a fraction). nullopt on malformed
// input.
std::optional<TimeMs> ParseRfc3339(const std::string& s);

// "90m", "2h", "1h30m", "45s", "1d", or a bare number of minutes. nullopt on malformed input.
std::optional<DurationMs> ParseDuration(const std::string& s);
// "1h30m", "45s", "250ms".
std::string FormatDuration(DurationMs d);
// "10 mins ago", "just now", "3 hrs ago", for human listings.
std::string FormatAgo(TimeMs then, TimeMs now);

}  // namespace berth
