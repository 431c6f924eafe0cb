#include "common/recurrence.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <sstream>
#include <string_view>
#include <vector>

#include "common/strings.h"

namespace berth {
namespace {

constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kHourMs = 60 * kMinuteMs;
constexpr int64_t kDayMs = 24 * kHourMs;
// How far NextCronMatch looks: 8 years reach any February 29 (2096's next is 2104's).
constexpr int64_t kCronHorizonMs = 8 * 366 * kDayMs;

// a / b rounded down (C++ rounds toward zero), for b > 0: times before 1970 are negative.
int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b < 0 ? 1 : 0); }

TimeMs FloorTo(TimeMs t, int64_t unit) { return FloorDiv(t, unit) * unit; }
TimeMs CeilTo(TimeMs t, int64_t unit) { return -FloorTo(-t, unit); }

// Days since 1970-01-01 of the proleptic Gregorian date y-m-d, by integer arithmetic over 400-year
// eras (each 146097 days), counting years from March so that February 29 falls last.
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = FloorDiv(y, 400);
  const int64_t year_of_era = y - era * 400;
  const int64_t day_of_year = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468;
}

int DaysInMonth(int64_t y, int m) {
  return static_cast<int>(DaysFromCivil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) -
                          DaysFromCivil(y, m, 1));
}

// A time broken down to the minute, in UTC.
struct Civil {
  int64_t year = 0;
  int month = 0, day = 0;    // 1-12, 1-31
  int hour = 0, minute = 0;  // 0-23, 0-59
  int weekday = 0;           // 0 = Sunday
};

// The inverse of DaysFromCivil, plus the time of day and the weekday.
Civil CivilFromTime(TimeMs t) {
  const int64_t minutes = FloorDiv(t, kMinuteMs);
  const int64_t days = FloorDiv(minutes, 24 * 60);
  Civil c;
  c.hour = static_cast<int>((minutes - days * 24 * 60) / 60);
  c.minute = static_cast<int>((minutes - days * 24 * 60) % 60);
  c.weekday = static_cast<int>((days % 7 + 11) % 7);  // 1970-01-01 was a Thursday (4)
  const int64_t z = days + 719468;
  const int64_t era = FloorDiv(z, 146097);
  const int64_t day_of_era = z - era * 146097;
  const int64_t year_of_era =
      (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  const int64_t day_of_year =
      day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  const int64_t month_from_march = (5 * day_of_year + 2) / 153;
  c.day = static_cast<int>(day_of_year - (153 * month_from_march + 2) / 5 + 1);
  c.month = static_cast<int>(month_from_march < 10 ? month_from_march + 3 : month_from_march - 9);
  c.year = year_of_era + era * 400 + (c.month <= 2 ? 1 : 0);
  return c;
}

std::nullopt_t Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

bool IsDigit(char c) { return isdigit(static_cast<unsigned char>(c)) != 0; }

bool ReadChar(std::string_view s, size_t* pos, char c) {
  if (*pos >= s.size() || s[*pos] != c) return false;
  ++*pos;
  return true;
}

// Reads `pattern` at `*pos`: each 'd' is a digit, any other character stands for itself and ends a
// number. The numbers go in order to `out`, which has room for them all, zeroed.
bool ReadPattern(std::string_view s, size_t* pos, std::string_view pattern, int* out) {
  if (s.size() - *pos < pattern.size()) return false;
  for (const char p : pattern) {
    const char c = s[(*pos)++];
    if (p == 'd' && IsDigit(c)) {
      *out = *out * 10 + (c - '0');
    } else if (p == 'd' || c != p) {
      return false;
    } else {
      ++out;
    }
  }
  return true;
}

// An optional ".digits"; milliseconds are kept, finer digits dropped.
bool ReadFraction(std::string_view s, size_t* pos, int* millis) {
  if (!ReadChar(s, pos, '.')) return true;
  const size_t begin = *pos;
  for (; *pos < s.size() && IsDigit(s[*pos]); ++*pos) {
    if (*pos - begin < 3) *millis = *millis * 10 + (s[*pos] - '0');
  }
  for (size_t digits = *pos - begin; digits < 3; ++digits) *millis *= 10;
  return *pos > begin;
}

// "Z", "+HH:MM" or "-HH:MM": the offset east of UTC.
bool ReadZone(std::string_view s, size_t* pos, int* offset_minutes) {
  if (ReadChar(s, pos, 'Z')) return true;
  const int sign = ReadChar(s, pos, '+') ? 1 : ReadChar(s, pos, '-') ? -1 : 0;
  int hm[2] = {};
  if (sign == 0 || !ReadPattern(s, pos, "dd:dd", hm) || hm[0] > 23 || hm[1] > 59) return false;
  *offset_minutes = sign * (hm[0] * 60 + hm[1]);
  return true;
}

std::optional<TimeMs> ParseRfc3339WithOffset(std::string_view s) {
  int f[6] = {};  // year, month, day, hour, minute, second
  int millis = 0;
  int offset_minutes = 0;
  size_t pos = 0;
  if (!ReadPattern(s, &pos, "dddd-dd-ddTdd:dd:dd", f) || !ReadFraction(s, &pos, &millis) ||
      !ReadZone(s, &pos, &offset_minutes) || pos != s.size()) {
    return std::nullopt;
  }
  if (f[1] < 1 || f[1] > 12 || f[2] < 1 || f[2] > DaysInMonth(f[0], f[1]) || f[3] > 23 ||
      f[4] > 59 || f[5] > 59) {
    return std::nullopt;
  }
  const int64_t seconds = DaysFromCivil(f[0], f[1], f[2]) * 86400 + f[3] * 3600 + f[4] * 60 + f[5] -
                          offset_minutes * 60;
  return seconds * 1000 + millis;
}

struct FieldSpec {
  const char* name;
  int min;
  int max;
  std::string_view names;  // 3-letter names of min, min+1, ... run together; "" when none
  const char* names_hint;
};

constexpr std::array<FieldSpec, 5> kFields = {{
    {"minute", 0, 59, "", ""},
    {"hour", 0, 23, "", ""},
    {"day-of-month", 1, 31, "", ""},
    {"month", 1, 12, "janfebmaraprmayjunjulaugsepoctnovdec", " or a month name (jan-dec)"},
    {"day-of-week", 0, 7, "sunmontuewedthufrisat", " or a day name (sun-sat)"},
}};

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return out;
}

// One value of a field: a number within the field's range, or a name.
bool ParseValue(std::string_view token, const FieldSpec& spec, int* out, std::string* why) {
  const std::string lower = Lower(token);
  for (size_t i = 0; lower.size() == 3 && i * 3 < spec.names.size(); ++i) {
    if (spec.names.substr(i * 3, 3) == lower) {
      *out = spec.min + static_cast<int>(i);
      return true;
    }
  }
  const std::optional<int64_t> value = ParseDecimal(token);
  if (!value) {
    *why = Quote(token) + " is not a number" + spec.names_hint;
    return false;
  }
  if (*value < spec.min || *value > spec.max) {
    *why = Quote(token) + " is out of range " + std::to_string(spec.min) + "-" +
           std::to_string(spec.max);
    return false;
  }
  *out = static_cast<int>(*value);
  return true;
}

// The "a", "a-b" or "*" before an item's step.
bool ParseRange(std::string_view range, const FieldSpec& spec, int* lo, int* hi, std::string* why) {
  if (range == "*") {
    *lo = spec.min;
    *hi = spec.max;
    return true;
  }
  const size_t dash = range.find('-');  // none: "a" is the range a-a
  if (!ParseValue(range.substr(0, dash), spec, lo, why) ||
      !ParseValue(dash == std::string_view::npos ? range : range.substr(dash + 1), spec, hi, why)) {
    return false;
  }
  if (*lo > *hi) *why = Quote(range) + " runs backwards";
  return *lo <= *hi;
}

// One item of a field's list: "*", "a", "a-b", "*/n" or "a-b/n".
bool ParseItem(std::string_view item, const FieldSpec& spec, uint64_t* mask, std::string* why) {
  const size_t slash = item.find('/');
  const std::string_view range = item.substr(0, slash);
  int64_t step = 1;
  if (slash != std::string_view::npos) {
    const std::optional<int64_t> n = ParseDecimal(item.substr(slash + 1));
    if (!n || *n < 1 || *n > spec.max) {
      *why = Quote(item) + " has a bad step: use */N or A-B/N with N from 1 to " +
             std::to_string(spec.max);
      return false;
    }
    if (range != "*" && range.find('-') == std::string_view::npos) {
      *why = Quote(item) + " has a step but no range: use */N or A-B/N";
      return false;
    }
    step = *n;
  }
  int lo = 0;
  int hi = 0;
  if (!ParseRange(range, spec, &lo, &hi, why)) return false;
  for (int64_t v = lo; v <= hi; v += step) *mask |= uint64_t{1} << v;
  return true;
}

bool ParseField(std::string_view field, const FieldSpec& spec, uint64_t* mask, std::string* why) {
  for (const std::string& item : Split(field, ',')) {
    if (item.empty()) {
      *why = Quote(field) + " has an empty list item";
      return false;
    }
    if (!ParseItem(item, spec, mask, why)) return false;
  }
  return true;
}

bool ParseCronFields(const std::vector<std::string>& fields, CronFields* cron, std::string* why) {
  uint64_t* masks[] = {&cron->minutes, &cron->hours, &cron->days_of_month, &cron->months,
                       &cron->days_of_week};
  for (size_t i = 0; i < kFields.size(); ++i) {
    if (!ParseField(fields[i], kFields[i], masks[i], why)) {
      *why = "field " + std::to_string(i + 1) + " (" + kFields[i].name + ") " + *why;
      return false;
    }
  }
  if (cron->days_of_week & (uint64_t{1} << 7)) cron->days_of_week |= 1;  // 7 is Sunday too
  cron->days_of_week &= 0x7f;
  cron->day_of_month_star = fields[2][0] == '*';
  cron->day_of_week_star = fields[4][0] == '*';
  return true;
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

bool Has(uint64_t mask, int value) { return (mask >> value) & 1; }

bool DayMatches(const CronFields& f, const Civil& c) {
  const bool dom = Has(f.days_of_month, c.day);
  const bool dow = Has(f.days_of_week, c.weekday);
  return (f.day_of_month_star || f.day_of_week_star) ? dom && dow : dom || dow;
}

TimeMs StartOfMonth(const Civil& c) { return DaysFromCivil(c.year, c.month, 1) * kDayMs; }

TimeMs StartOfNextMonth(const Civil& c) {
  return StartOfMonth(c) + DaysInMonth(c.year, c.month) * kDayMs;
}

// The first matching minute in [from, limit]: skips whole months, days and hours that cannot
// match, so a year's search costs a few hundred steps, not half a million.
std::optional<TimeMs> ForwardMatch(const CronFields& f, TimeMs from, TimeMs limit) {
  for (TimeMs t = CeilTo(from, kMinuteMs); t <= limit;) {
    const Civil c = CivilFromTime(t);
    const uint64_t later_minutes = f.minutes >> c.minute;
    if (!Has(f.months, c.month)) {
      t = StartOfNextMonth(c);
    } else if (!DayMatches(f, c)) {
      t = FloorTo(t, kDayMs) + kDayMs;
    } else if (!Has(f.hours, c.hour) || later_minutes == 0) {
      t = FloorTo(t, kHourMs) + kHourMs;
    } else {
      return t + std::countr_zero(later_minutes) * kMinuteMs;
    }
  }
  return std::nullopt;
}

// The last matching minute in [lower, at_or_before]: ForwardMatch run backwards.
std::optional<TimeMs> BackwardMatch(const CronFields& f, TimeMs at_or_before, TimeMs lower) {
  for (TimeMs t = FloorTo(at_or_before, kMinuteMs); t >= lower;) {
    const Civil c = CivilFromTime(t);
    const uint64_t earlier_minutes = f.minutes & ((uint64_t{2} << c.minute) - 1);
    if (!Has(f.months, c.month)) {
      t = StartOfMonth(c) - kMinuteMs;
    } else if (!DayMatches(f, c)) {
      t = FloorTo(t, kDayMs) - kMinuteMs;
    } else if (!Has(f.hours, c.hour) || earlier_minutes == 0) {
      t = FloorTo(t, kHourMs) - kMinuteMs;
    } else {
      const TimeMs match =
          FloorTo(t, kHourMs) + (63 - std::countl_zero(earlier_minutes)) * kMinuteMs;
      return match >= lower ? std::optional<TimeMs>(match) : std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<Window> PeriodicWindow(DurationMs period, TimeMs first, DurationMs duration,
                                     TimeMs now) {
  if (now < first) return Window{first, first + duration};
  const TimeMs latest = first + (now - first) / period * period;
  if (now < latest + duration) return Window{latest, latest + duration};
  return Window{latest + period, latest + period + duration};
}

std::optional<Window> CronWindow(const Recurrence& r, TimeMs first, DurationMs duration,
                                 TimeMs now) {
  const TimeMs start = CeilTo(first, kMinuteMs);
  if (auto held = BackwardMatch(r.cron, now, std::max(start, now - duration + 1))) {
    return Window{*held, *held + duration};
  }
  const std::optional<TimeMs> next = NextCronMatch(r, std::max(start, now + 1));
  if (!next) return std::nullopt;
  return Window{*next, *next + duration};
}

}  // namespace

std::optional<TimeMs> ParseWhen(const std::string& text, TimeMs now, std::string* error) {
  const std::string s = Trim(text);
  if (s == "now") return now;
  if (StartsWith(s, "now+")) {
    if (std::optional<DurationMs> d = ParseDuration(s.substr(4))) return now + *d;
    return Fail(error, "invalid time " + Quote(text) + ": " + Quote(s.substr(4)) +
                           " is not a duration (use now+90m, now+2h or now+1d)");
  }
  if (std::optional<TimeMs> t = ParseRfc3339WithOffset(s)) return t;
  return Fail(error, "invalid time " + Quote(text) +
                         ": use RFC 3339 (2026-12-03T14:00:00Z) or now+DURATION (now+2h)");
}

std::optional<Recurrence> ParseRecurrence(const std::string& text, std::string* error) {
  const std::vector<std::string> fields = Words(text);
  Recurrence r;
  if (fields.empty()) return r;
  const std::string prefix = "invalid --repeat " + Quote(text) + ": ";
  if (fields.size() == 1 && (Lower(fields[0]) == "daily" || Lower(fields[0]) == "weekly")) {
    r.text = Lower(fields[0]);
    r.kind = r.text == "daily" ? Recurrence::Kind::kDaily : Recurrence::Kind::kWeekly;
    return r;
  }
  if (fields.size() != kFields.size()) {
    return Fail(error, prefix + "use daily, weekly or a 5-field cron expression ('0 9 * * 1-5')");
  }
  std::string why;
  if (!ParseCronFields(fields, &r.cron, &why)) return Fail(error, prefix + why);
  r.kind = Recurrence::Kind::kCron;
  r.text = Join(fields, " ");
  return r;
}

std::string DescribeRecurrence(const Recurrence& r) {
  return r.kind == Recurrence::Kind::kCron ? "cron " + Quote(r.text) : r.text;
}

std::optional<TimeMs> NextCronMatch(const Recurrence& r, TimeMs at_or_after) {
  if (r.kind != Recurrence::Kind::kCron) return std::nullopt;
  return ForwardMatch(r.cron, at_or_after, CeilTo(at_or_after, kMinuteMs) + kCronHorizonMs);
}

std::optional<Window> CurrentOrNextWindow(const Recurrence& r, TimeMs first, DurationMs duration,
                                          TimeMs now) {
  if (duration <= 0) return std::nullopt;
  switch (r.kind) {
    case Recurrence::Kind::kNone:
      if (now >= first + duration) return std::nullopt;
      return Window{first, first + duration};
    case Recurrence::Kind::kDaily:
      return PeriodicWindow(kDayMs, first, duration, now);
    case Recurrence::Kind::kWeekly:
      return PeriodicWindow(7 * kDayMs, first, duration, now);
    case Recurrence::Kind::kCron:
      return CronWindow(r, first, duration, now);
  }
  return std::nullopt;
}

}  // namespace berth
