// Reservation times: start times as users write them, repeat rules, and the window that holds now
// or comes next. 2026-12-03 is a Thursday; every time here is UTC.
#include "common/recurrence.h"

#include <gtest/gtest.h>
#include <time.h>

#include <string>
#include <vector>

namespace berth {

void PrintTo(const Window& w, std::ostream* os) {
  *os << "[" << FormatRfc3339(w.start) << ", " << FormatRfc3339(w.end) << ")";
}

namespace {

constexpr DurationMs kMinute = 60'000;
constexpr DurationMs kHour = 60 * kMinute;
constexpr DurationMs kDay = 24 * kHour;

TimeMs T(const std::string& rfc3339) { return ParseRfc3339(rfc3339).value(); }

Recurrence Repeat(const std::string& text) {
  std::string error;
  std::optional<Recurrence> r = ParseRecurrence(text, &error);
  EXPECT_TRUE(r.has_value()) << error;
  return r.value_or(Recurrence{});
}

std::string RepeatError(const std::string& text) {
  std::string error;
  EXPECT_FALSE(ParseRecurrence(text, &error).has_value()) << text;
  return error;
}

std::optional<Window> At(const std::string& repeat, const std::string& first, DurationMs duration,
                         const std::string& now) {
  return CurrentOrNextWindow(Repeat(repeat), T(first), duration, T(now));
}

Window W(const std::string& start, DurationMs duration) {
  return Window{T(start), T(start) + duration};
}

TEST(Recurrence, ParseWhenTakesRfc3339WithZuluOrAnOffset) {
  std::string error;
  const TimeMs two_pm = T("2026-12-03T14:00:00Z");
  EXPECT_EQ(ParseWhen("2026-12-03T14:00:00Z", 0, &error), two_pm);
  EXPECT_EQ(ParseWhen("2026-12-03T16:00:00+02:00", 0, &error), two_pm);
  EXPECT_EQ(ParseWhen("2026-12-03T08:30:00-05:30", 0, &error), two_pm);
  EXPECT_EQ(ParseWhen("2026-12-04T00:30:00+10:30", 0, &error), two_pm);  // the day before in UTC
  EXPECT_EQ(ParseWhen("2026-12-03T14:00:00.5Z", 0, &error), two_pm + 500);
  EXPECT_EQ(ParseWhen("2026-12-03T14:00:00.123456Z", 0, &error), two_pm + 123);
  EXPECT_EQ(ParseWhen(" 2026-12-03T14:00:00Z\n", 0, &error), two_pm);
  EXPECT_EQ(ParseWhen("2028-02-29T00:00:00Z", 0, &error), T("2028-02-29T00:00:00Z"));
  EXPECT_EQ(ParseWhen("1969-12-31T23:59:59Z", 0, &error), -1000);
  EXPECT_EQ(error, "");
}

TEST(Recurrence, ParseWhenTakesNowPlusADuration) {
  const TimeMs now = T("2026-12-03T14:00:00Z");
  std::string error;
  EXPECT_EQ(ParseWhen("now", now, &error), now);
  EXPECT_EQ(ParseWhen("now+2h", now, &error), now + 2 * kHour);
  EXPECT_EQ(ParseWhen("now+90m", now, &error), now + 90 * kMinute);
  EXPECT_EQ(ParseWhen("now+1h30m", now, &error), now + 90 * kMinute);
  EXPECT_EQ(ParseWhen("now+1d", now, &error), now + kDay);
  EXPECT_EQ(error, "");
}

TEST(Recurrence, ParseWhenSaysWhatFormsItTakes) {
  std::string error;
  EXPECT_FALSE(ParseWhen("tomorrow", 0, &error));
  EXPECT_EQ(
      error,
      "invalid time 'tomorrow': use RFC 3339 (2026-12-03T14:00:00Z) or now+DURATION (now+2h)");
  EXPECT_FALSE(ParseWhen("now+soon", 0, &error));
  EXPECT_EQ(error,
            "invalid time 'now+soon': 'soon' is not a duration (use now+90m, now+2h or now+1d)");
  for (const char* bad :
       {"", "now+", "now-1h", "now +2h", "2026-12-03T14:00:00", "2026-12-03 14:00:00Z",
        "2026-12-03T14:00Z", "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
        "2026-12-03T24:00:00Z", "2026-12-03T14:60:00Z", "2026-12-03T14:00:60Z",
        "2026-12-03T14:00:00.Z", "2026-12-03T14:00:00+2:00", "2026-12-03T14:00:00+02:60",
        "2026-12-03T14:00:00+0200", "2026-12-03T14:00:00Zjunk", "26-12-03T14:00:00Z"}) {
    error.clear();
    EXPECT_FALSE(ParseWhen(bad, 0, &error)) << bad;
    EXPECT_NE(error, "") << bad;
  }
  EXPECT_FALSE(ParseWhen("garbage", 0, nullptr));  // no error wanted: none written
}

TEST(Recurrence, NamedRulesAndTheirDescriptions) {
  EXPECT_EQ(Repeat("").kind, Recurrence::Kind::kNone);
  EXPECT_EQ(Repeat("  ").kind, Recurrence::Kind::kNone);
  EXPECT_EQ(Repeat("daily").kind, Recurrence::Kind::kDaily);
  EXPECT_EQ(Repeat("Weekly").kind, Recurrence::Kind::kWeekly);
  EXPECT_EQ(DescribeRecurrence(Repeat("")), "");
  EXPECT_EQ(DescribeRecurrence(Repeat("daily")), "daily");
  EXPECT_EQ(DescribeRecurrence(Repeat("WEEKLY")), "weekly");
  EXPECT_EQ(DescribeRecurrence(Repeat(" 0  9 * *\t1-5 ")), "cron '0 9 * * 1-5'");
  EXPECT_EQ(Repeat("0 9 * * 1-5").kind, Recurrence::Kind::kCron);
}

TEST(Recurrence, CronFieldsParseIntoMasks) {
  const CronFields f = Repeat("*/15 9-17/4 1,15 jan-MAR mon-fri").cron;
  EXPECT_EQ(f.minutes, (1ull << 0) | (1ull << 15) | (1ull << 30) | (1ull << 45));
  EXPECT_EQ(f.hours, (1ull << 9) | (1ull << 13) | (1ull << 17));
  EXPECT_EQ(f.days_of_month, (1ull << 1) | (1ull << 15));
  EXPECT_EQ(f.months, 0b1110ull);
  EXPECT_EQ(f.days_of_week, 0b111110ull);
  EXPECT_FALSE(f.day_of_month_star);
  EXPECT_FALSE(f.day_of_week_star);
  EXPECT_EQ(Repeat("0 0 * * 7").cron.days_of_week, 1ull);  // 7 is Sunday, as 0 is
  EXPECT_EQ(Repeat("0 0 * * 5-7").cron.days_of_week, 0b1100001ull);
  EXPECT_EQ(Repeat("0 0 * * Sun").cron.days_of_week, 1ull);
  EXPECT_TRUE(Repeat("0 0 */2 * *").cron.day_of_month_star);  // begins with '*', as in cron
}

TEST(Recurrence, CronErrorsNameTheField) {
  EXPECT_EQ(RepeatError("0 25 * * *"),
            "invalid --repeat '0 25 * * *': field 2 (hour) '25' is out of range 0-23");
  EXPECT_EQ(RepeatError("hourly"),
            "invalid --repeat 'hourly': use daily, weekly or a 5-field "
            "cron expression ('0 9 * * 1-5')");
  EXPECT_EQ(RepeatError("0 9 * *"),
            "invalid --repeat '0 9 * *': use daily, weekly or a 5-field "
            "cron expression ('0 9 * * 1-5')");
  EXPECT_EQ(RepeatError("60 * * * *"),
            "invalid --repeat '60 * * * *': field 1 (minute) '60' is out of range 0-59");
  EXPECT_EQ(RepeatError("0 0 0 * *"),
            "invalid --repeat '0 0 0 * *': field 3 (day-of-month) '0' is out of range 1-31");
  EXPECT_EQ(RepeatError("0 0 * 13 *"),
            "invalid --repeat '0 0 * 13 *': field 4 (month) '13' is out of range 1-12");
  EXPECT_EQ(RepeatError("0 0 * * 8"),
            "invalid --repeat '0 0 * * 8': field 5 (day-of-week) '8' is out of range 0-7");
  EXPECT_EQ(RepeatError("*/0 * * * *"),
            "invalid --repeat '*/0 * * * *': field 1 (minute) '*/0' has a bad step: use */N or "
            "A-B/N with N from 1 to 59");
  EXPECT_EQ(RepeatError("0 */x * * *"),
            "invalid --repeat '0 */x * * *': field 2 (hour) '*/x' has a bad step: use */N or "
            "A-B/N with N from 1 to 23");
  EXPECT_EQ(RepeatError("5/2 * * * *"),
            "invalid --repeat '5/2 * * * *': field 1 (minute) '5/2' "
            "has a step but no range: use */N or A-B/N");
  EXPECT_EQ(RepeatError("0 17-9 * * *"),
            "invalid --repeat '0 17-9 * * *': field 2 (hour) '17-9' runs backwards");
  EXPECT_EQ(RepeatError("0 9 * foo *"),
            "invalid --repeat '0 9 * foo *': field 4 (month) 'foo' "
            "is not a number or a month name (jan-dec)");
  EXPECT_EQ(RepeatError("x 9 * * *"),
            "invalid --repeat 'x 9 * * *': field 1 (minute) 'x' is not a number");
  EXPECT_EQ(RepeatError("1,,2 9 * * *"),
            "invalid --repeat '1,,2 9 * * *': field 1 (minute) '1,,2' has an empty list item");
  for (const char* bad :
       {"-1 * * * *", "1- * * * *", "* * * * mon-", "0 9 * jan *x", "0 9 * * 1 2"}) {
    EXPECT_NE(RepeatError(bad), "") << bad;
  }
}

// A one-off reservation of 2 hours from 14:00: ahead, held, then gone for good.
TEST(Recurrence, OneOffHoldsOnceThenNothingIsLeft) {
  const Window once = W("2026-12-03T14:00:00Z", 2 * kHour);
  EXPECT_EQ(At("", "2026-12-03T14:00:00Z", 2 * kHour, "2026-12-01T00:00:00Z"), once);
  EXPECT_EQ(At("", "2026-12-03T14:00:00Z", 2 * kHour, "2026-12-03T15:59:59Z"), once);
  EXPECT_EQ(At("", "2026-12-03T14:00:00Z", 2 * kHour, "2026-12-03T16:00:00Z"), std::nullopt);
  EXPECT_EQ(At("", "2026-12-03T14:00:00Z", 0, "2026-12-01T00:00:00Z"), std::nullopt);
}

// Daily 14:00-16:00 from Thursday 2026-12-03.
TEST(Recurrence, DailyWindowsBeforeInsideBetweenAndLongAfter) {
  const std::string first = "2026-12-03T14:00:00Z";
  EXPECT_EQ(At("daily", first, 2 * kHour, "2026-11-01T15:00:00Z"), W(first, 2 * kHour));
  EXPECT_EQ(At("daily", first, 2 * kHour, "2026-12-03T14:00:00Z"), W(first, 2 * kHour));
  EXPECT_EQ(At("daily", first, 2 * kHour, "2026-12-04T15:30:00Z"),
            W("2026-12-04T14:00:00Z", 2 * kHour));
  EXPECT_EQ(At("daily", first, 2 * kHour, "2026-12-04T16:00:00Z"),  // ended: tomorrow's
            W("2026-12-05T14:00:00Z", 2 * kHour));
  EXPECT_EQ(At("daily", first, 2 * kHour, "2026-12-05T09:00:00Z"),
            W("2026-12-05T14:00:00Z", 2 * kHour));
  EXPECT_EQ(At("daily", first, 2 * kHour, "2029-03-01T14:30:00Z"),
            W("2029-03-01T14:00:00Z", 2 * kHour));
  // Longer than a day: occurrences overlap, and the latest one to start holds.
  EXPECT_EQ(At("daily", first, 30 * kHour, "2026-12-04T15:00:00Z"),
            W("2026-12-04T14:00:00Z", 30 * kHour));
}

// Weekly, Thursdays 14:00-16:00.
TEST(Recurrence, WeeklyWindowsStepBySevenDays) {
  const std::string first = "2026-12-03T14:00:00Z";
  EXPECT_EQ(At("weekly", first, 2 * kHour, "2026-12-02T00:00:00Z"), W(first, 2 * kHour));
  EXPECT_EQ(At("weekly", first, 2 * kHour, "2026-12-03T15:00:00Z"), W(first, 2 * kHour));
  EXPECT_EQ(At("weekly", first, 2 * kHour, "2026-12-04T15:00:00Z"),
            W("2026-12-10T14:00:00Z", 2 * kHour));
  EXPECT_EQ(At("weekly", first, 2 * kHour, "2027-01-07T14:59:00Z"),
            W("2027-01-07T14:00:00Z", 2 * kHour));
  EXPECT_EQ(At("weekly", first, 2 * kHour, "2030-01-01T00:00:00Z"),  // a Tuesday
            W("2030-01-03T14:00:00Z", 2 * kHour));
}

// Weekdays 09:00-10:00 from Thursday 2026-12-03; the weekend is skipped.
TEST(Recurrence, CronWeekdayMorningWindows) {
  const std::string first = "2026-12-03T00:00:00Z";
  EXPECT_EQ(At("0 9 * * 1-5", first, kHour, "2026-12-03T09:30:00Z"),
            W("2026-12-03T09:00:00Z", kHour));
  EXPECT_EQ(At("0 9 * * 1-5", first, kHour, "2026-12-03T10:00:00Z"),
            W("2026-12-04T09:00:00Z", kHour));
  EXPECT_EQ(At("0 9 * * 1-5", first, kHour, "2026-12-04T10:00:00Z"),  // Friday after: Monday
            W("2026-12-07T09:00:00Z", kHour));
  EXPECT_EQ(At("0 9 * * mon-fri", first, kHour, "2026-12-05T12:00:00Z"),
            W("2026-12-07T09:00:00Z", kHour));
  // Nothing before `first`, which is rounded up to the minute: 09:00 on the 3rd is not an
  // occurrence of a reservation whose first start is 09:00:30.
  EXPECT_EQ(At("0 9 * * 1-5", "2026-12-03T09:00:30Z", kHour, "2026-12-03T09:30:00Z"),
            W("2026-12-04T09:00:00Z", kHour));
  EXPECT_EQ(At("0 9 * * 1-5", first, kHour, "2026-11-01T00:00:00Z"),
            W("2026-12-03T09:00:00Z", kHour));
}

// A month-long hold from the 1st: the search back covers 30 days without walking each minute.
TEST(Recurrence, CronLongWindowIsFoundLookingBack) {
  EXPECT_EQ(At("0 0 1 * *", "2026-01-01T00:00:00Z", 30 * kDay, "2026-12-20T17:45:00Z"),
            W("2026-12-01T00:00:00Z", 30 * kDay));
  EXPECT_EQ(At("0 0 1 * *", "2026-01-01T00:00:00Z", 30 * kDay, "2026-12-31T00:00:00Z"),
            W("2027-01-01T00:00:00Z", 30 * kDay));
  EXPECT_EQ(At("*/5 * * * *", "2026-01-01T00:00:00Z", 30 * kDay, "2026-12-20T17:47:10Z"),
            W("2026-12-20T17:45:00Z", 30 * kDay));
}

// The 13th OR a Friday, when both day fields are restricted; both when one begins with '*'.
TEST(Recurrence, CronDayOfMonthOrDayOfWeek) {
  const Recurrence either = Repeat("0 12 13 * 5");
  EXPECT_EQ(NextCronMatch(either, T("2026-12-03T00:00:00Z")), T("2026-12-04T12:00:00Z"));  // Fri
  EXPECT_EQ(NextCronMatch(either, T("2026-12-11T12:01:00Z")), T("2026-12-13T12:00:00Z"));  // Sun
  EXPECT_EQ(NextCronMatch(either, T("2026-12-13T12:01:00Z")), T("2026-12-18T12:00:00Z"));
  EXPECT_EQ(NextCronMatch(Repeat("0 12 13 * *"), T("2026-12-03T00:00:00Z")),
            T("2026-12-13T12:00:00Z"));
  // Odd days AND Fridays: the 3rd is odd but a Thursday, the 4th a Friday but even.
  EXPECT_EQ(NextCronMatch(Repeat("0 12 */2 * 5"), T("2026-12-03T00:00:00Z")),
            T("2026-12-11T12:00:00Z"));
}

TEST(Recurrence, CronSundayIsZeroOrSeven) {
  const TimeMs thursday = T("2026-12-03T10:00:00Z");
  const TimeMs sunday_8am = T("2026-12-06T08:00:00Z");
  EXPECT_EQ(NextCronMatch(Repeat("0 8 * * 7"), thursday), sunday_8am);
  EXPECT_EQ(NextCronMatch(Repeat("0 8 * * 0"), thursday), sunday_8am);
  EXPECT_EQ(NextCronMatch(Repeat("0 8 * * SUN"), thursday), sunday_8am);
  EXPECT_EQ(NextCronMatch(Repeat("0 8 * * 6-7"), thursday), T("2026-12-05T08:00:00Z"));
}

TEST(Recurrence, CronCrossesMonthAndYearBoundaries) {
  EXPECT_EQ(NextCronMatch(Repeat("0 0 1 * *"), T("2026-12-15T00:00:00Z")),
            T("2027-01-01T00:00:00Z"));
  EXPECT_EQ(NextCronMatch(Repeat("30 23 31 12 *"), T("2026-12-31T23:30:01Z")),
            T("2027-12-31T23:30:00Z"));
  EXPECT_EQ(NextCronMatch(Repeat("0 0 31 * *"), T("2026-11-01T00:00:00Z")),
            T("2026-12-31T00:00:00Z"));  // November has no 31st
  // New Year's Eve 23:00 for 2 hours holds at half past midnight.
  EXPECT_EQ(At("0 23 31 12 *", "2026-01-01T00:00:00Z", 2 * kHour, "2027-01-01T00:30:00Z"),
            W("2026-12-31T23:00:00Z", 2 * kHour));
}

TEST(Recurrence, CronFebruary29WaitsForALeapYear) {
  const Recurrence leap_day = Repeat("0 0 29 2 *");
  EXPECT_EQ(NextCronMatch(leap_day, T("2026-03-01T00:00:00Z")), T("2028-02-29T00:00:00Z"));
  EXPECT_EQ(NextCronMatch(leap_day, T("2097-01-01T00:00:00Z")),  // 2100 is no leap year
            T("2104-02-29T00:00:00Z"));
}

TEST(Recurrence, CronThatNeverMatchesHasNoWindow) {
  EXPECT_EQ(NextCronMatch(Repeat("0 0 31 2 *"), T("2026-12-03T00:00:00Z")), std::nullopt);
  EXPECT_EQ(NextCronMatch(Repeat("0 0 30 2 *"), T("2026-12-03T00:00:00Z")), std::nullopt);
  EXPECT_EQ(At("0 0 31 2 *", "2026-12-03T00:00:00Z", kHour, "2026-12-03T00:00:00Z"), std::nullopt);
  EXPECT_EQ(NextCronMatch(Repeat("daily"), 0), std::nullopt);  // not a cron rule
}

// NextCronMatch and the held window agree with a minute-by-minute scan that breaks times down
// with gmtime_r, over six weeks from several starting points.
bool NaiveMatches(const CronFields& f, TimeMs t) {
  time_t secs = static_cast<time_t>(t / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  auto has = [](uint64_t mask, int v) { return ((mask >> v) & 1) != 0; };
  const bool dom = has(f.days_of_month, tm.tm_mday);
  const bool dow = has(f.days_of_week, tm.tm_wday);
  const bool day = (f.day_of_month_star || f.day_of_week_star) ? dom && dow : dom || dow;
  return has(f.minutes, tm.tm_min) && has(f.hours, tm.tm_hour) && has(f.months, tm.tm_mon + 1) &&
         day;
}

TEST(Recurrence, CronSearchAgreesWithAMinuteByMinuteScan) {
  const std::vector<std::string> rules = {"0 9 * * 1-5", "*/7 */5 * * *", "30 2 1,15 * 0",
                                          "0 0 29 2 *", "15 10-12 */3 jan,feb,dec sat"};
  const DurationMs duration = 3 * kDay + 7 * kMinute;
  int compared = 0;
  for (const std::string& rule : rules) {
    const Recurrence r = Repeat(rule);
    for (const char* start : {"2026-12-20T11:11:00Z", "2027-02-27T23:59:00Z"}) {
      const TimeMs from = T(start);
      TimeMs expected_next = -1;
      TimeMs expected_held = -1;
      for (TimeMs t = from - duration + kMinute; t <= from + 42 * kDay && expected_next < 0;
           t += kMinute) {
        if (!NaiveMatches(r.cron, t)) continue;
        if (t <= from) expected_held = t;
        if (t > from) expected_next = t;
      }
      if (expected_next < 0) continue;  // beyond the scan (the leap day)
      ++compared;
      EXPECT_EQ(NextCronMatch(r, from + 1), expected_next) << rule << " from " << start;
      const TimeMs want = expected_held >= 0 ? expected_held : expected_next;
      EXPECT_EQ(CurrentOrNextWindow(r, from - 60 * kDay, duration, from),
                (Window{want, want + duration}))
          << rule << " at " << start;
    }
  }
  EXPECT_EQ(compared, 7);  // not the leap day, nor the winter Saturdays from late February
}

}  // namespace
}  // namespace berth
