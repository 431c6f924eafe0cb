// Recurrence: when a reservation holds. A start time as the user writes it (RFC 3339 or
// now+DURATION), a repeat rule ("daily", "weekly" or a 5-field cron expression, all in UTC), and
// the window of a repeating reservation that holds at a given time or comes next.
//
// Everything here is pure: no clock is read (callers pass `now` in, as in clock.h), no I/O, no
// globals, so every function is thread-safe. Times are TimeMs (clock.h): milliseconds since the
// Unix epoch, UTC; calendar arithmetic is done on integers, never through the TZ environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.h"

namespace berth {

// Parses a start time: RFC 3339 with `Z` or a numeric offset ("2026-12-03T14:00:00Z",
// "2026-12-03T14:00:00+02:00", an optional fraction of a second, of which milliseconds are kept),
// or "now" / "now+DURATION" (ParseDuration's forms: now+2h, now+90m, now+1d) relative to `now`.
// On failure returns nullopt and, when `error` is not null, sets it to a sentence that says what
// forms are accepted.
std::optional<TimeMs> ParseWhen(const std::string& text, TimeMs now, std::string* error);

// The parsed fields of a cron expression: bit v of a mask is set when value v matches.
struct CronFields {
  uint64_t minutes = 0;        // bits 0-59
  uint64_t hours = 0;          // bits 0-23
  uint64_t days_of_month = 0;  // bits 1-31
  uint64_t months = 0;         // bits 1-12
  uint64_t days_of_week = 0;   // bits 0-6, 0 = Sunday (7 is folded into 0)
  // Whether the day-of-month / day-of-week field began with '*'. When neither did, a day matches
  // when EITHER field matches (standard cron); otherwise both must (a '*' field matches all days,
  // and "*/2" keeps its restriction).
  bool day_of_month_star = true;
  bool day_of_week_star = true;
};

struct Recurrence {
  enum class Kind { kNone, kDaily, kWeekly, kCron } kind = Kind::kNone;
  // "", "daily", "weekly", or the cron expression trimmed, its fields separated by single spaces.
  std::string text;
  CronFields cron;  // for kCron only
};

// "" (or blanks) -> kNone; "daily"; "weekly"; else a 5-field cron expression
// `minute hour day-of-month month day-of-week`, in UTC: `*`, numbers, lists `a,b`, ranges `a-b`,
// steps `*/n` and `a-b/n`, day-of-week 0-7 (0 and 7 are Sunday), and 3-letter month and day names
// in any case (jan, MON). On failure returns nullopt and, when `error` is not null, sets it to a
// sentence naming the field at fault ("invalid --repeat '0 25 * * *': field 2 (hour) '25' is out
// of range 0-23").
std::optional<Recurrence> ParseRecurrence(const std::string& text, std::string* error);

// "" for kNone, "daily", "weekly", "cron '0 9 * * 1-5'".
std::string DescribeRecurrence(const Recurrence& r);

// The first minute start >= `at_or_after` (rounded up to the minute) that `r`'s cron fields match;
// nullopt when `r` is not kCron or nothing matches within 8 years (enough to reach any February 29,
// e.g. from 2096 to 2104: 2100 is not a leap year).
std::optional<TimeMs> NextCronMatch(const Recurrence& r, TimeMs at_or_after);

// [start, end): one occurrence of a reservation.
struct Window {
  TimeMs start = 0;
  TimeMs end = 0;
  bool operator==(const Window&) const = default;
};

// The occurrence of a reservation that holds at `now` (start <= now < end; the latest such when
// occurrences overlap), else the next one to start after `now`. `first` is the first occurrence's
// start as the user gave it; each occurrence lasts `duration`.
//   kNone: the single window [first, first + duration).
//   kDaily / kWeekly: starts first + k * (1 day | 7 days), k >= 0.
//   kCron: starts at the matching minutes >= `first` (rounded up to the minute).
// Returns nullopt when none is left: a one-off whose end has passed, a cron with no match within
// NextCronMatch's horizon, or `duration` <= 0.
std::optional<Window> CurrentOrNextWindow(const Recurrence& r, TimeMs first, DurationMs duration,
                                          TimeMs now);

}  // namespace berth
