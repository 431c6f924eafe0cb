#include "common/clock.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace berth {

TimeMs SystemClock::Now() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::Monotonic() const { return MonotonicMs(); }

const SystemClock& SystemClock::Get() {
  static const SystemClock clock;
  return clock;
}

int64_t MonotonicMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::string FormatRfc3339(TimeMs t) {
  time_t secs = static_cast<time_t>(t / 1000);
  int ms = static_cast<int>(t % 1000);
  if (ms < 0) {
    ms += 1000;
    secs -= 1;
  }
  struct tm tm {};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::optional<TimeMs> ParseRfc3339(const std::string& s) {
  struct tm tm {};
  int ms = 0;
  int n = 0;
  if (sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
             &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6) {
    return std::nullopt;
  }
  size_t pos = static_cast<size_t>(n);
  if (pos < s.size() && s[pos] == '.') {
    int digits = 0;
    ++pos;
    while (pos < s.size() && isdigit(static_cast<unsigned char>(s[pos]))) {
      if (digits < 3) ms = ms * 10 + (s[pos] - '0');
      ++digits;
      ++pos;
    }
    for (; digits < 3; ++digits) ms *= 10;
  }
  if (pos != s.size() - 1 || s[pos] != 'Z') return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t secs = timegm(&tm);
  return static_cast<TimeMs>(secs) * 1000 + ms;
}

std::optional<DurationMs> ParseDuration(const std::string& s) {
  if (s.empty()) return std::nullopt;
  DurationMs total = 0;
  size_t i = 0;
  bool any = false;
  while (i < s.size()) {
    size_t start = i;
    while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return std::nullopt;
    if (i - start > 9) return std::nullopt;
    int64_t value = std::stoll(s.substr(start, i - start));
    std::string unit;
    while (i < s.size() && isalpha(static_cast<unsigned char>(s[i]))) unit += s[i++];
    int64_t scale;
    if (unit.empty()) {
      if (any || i != s.size()) return std::nullopt;
      scale = 60'000;  // a bare number is minutes, as in Slurm's --time
    } else if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m" || unit == "min") {
      scale = 60'000;
    } else if (unit == "h") {
      scale = 3'600'000;
    } else if (unit == "d") {
      scale = 86'400'000;
    } else {
      return std::nullopt;
    }
    total += value * scale;
    any = true;
  }
  return total;
}

std::string FormatDuration(DurationMs d) {
  if (d < 1000) return fmt::format("{}ms", d);
  int64_t s = d / 1000;
  std::string out;
  if (s >= 86400) out += fmt::format("{}d", s / 86400), s %= 86400;
  if (s >= 3600) out += fmt::format("{}h", s / 3600), s %= 3600;
  if (s >= 60) out += fmt::format("{}m", s / 60), s %= 60;
  if (s > 0 || out.empty()) out += fmt::format("{}s", s);
  return out;
}

std::string FormatAgo(TimeMs then, TimeMs now) {
  int64_t s = (now - then) / 1000;
  if (s < 5) return "just now";
  if (s < 60) return fmt::format("{} secs ago", s);
  if (s < 3600) return s < 120 ? "1 min ago" : fmt::format("{} mins ago", s / 60);
  if (s < 86400) return s < 7200 ? "1 hr ago" : fmt::format("{} hrs ago", s / 3600);
  return s < 172800 ? "1 day ago" : fmt::format("{} days ago", s / 86400);
}

}  // namespace berth
