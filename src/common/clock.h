// Clock: the only way berth code reads the time, so that tests can drive it.
//
// Times are integer milliseconds since the Unix epoch (wall clock); durations are integer
// milliseconds. SystemClock is thread-safe. The pure scheduler never reads a clock: callers pass
// `now` in.
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
  virtual TimeMs Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimeMs Now() const override;
  static const SystemClock& Get();
};

// A monotonic reading in milliseconds, for measuring intervals (never stored).
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
