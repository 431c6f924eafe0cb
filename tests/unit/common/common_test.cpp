// The shared vocabulary: quantities, times, durations, CPU budget parsing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <random>

#include "common/clock.h"
#include "common/cpu_budget.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/quantity.h"
#include "common/resources.h"
#include "common/strings.h"

namespace berth {
namespace {

TEST(Quantity, ParsesDecimalsIntoThousandths) {
  EXPECT_EQ(ParseMilli("8"), 8000);
  EXPECT_EQ(ParseMilli("0.5"), 500);
  EXPECT_EQ(ParseMilli("8+"), 8000);
  EXPECT_EQ(ParseMilli(" 1.25 "), 1250);
  EXPECT_EQ(ParseMilli("1.500"), 1500);
}

TEST(Quantity, RefusesWhatIsNotANonNegativeDecimal) {
  EXPECT_FALSE(ParseMilli(""));
  EXPECT_FALSE(ParseMilli("-1"));
  EXPECT_FALSE(ParseMilli("lots"));
  EXPECT_FALSE(ParseMilli("1.0005"));  // finer than a thousandth
  EXPECT_FALSE(ParseMilli("99999999999999999"));
  EXPECT_FALSE(ParseMilli("."));
}

TEST(Quantity, FormatsShortly) {
  EXPECT_EQ(FormatMilli(500), "0.5");
  EXPECT_EQ(FormatMilli(4000), "4");
  EXPECT_EQ(FormatMib(32 * 1024), "32G");
  EXPECT_EQ(FormatMib(512), "512M");
  EXPECT_EQ(FormatGpus("T4", 500), "T4:0.5");
  EXPECT_EQ(FormatGpus("", 0), "-");
}

TEST(Clock, Rfc3339RoundTripsWithMilliseconds) {
  TimeMs t = 1'795'323'723'123;  // 2026-11-22T05:02:03.123Z
  EXPECT_EQ(FormatRfc3339(t), "2026-11-22T05:02:03.123Z");
  EXPECT_EQ(ParseRfc3339("2026-11-22T05:02:03.123Z"), t);
  EXPECT_EQ(ParseRfc3339("2026-11-22T05:02:03Z"), t - 123);
  EXPECT_FALSE(ParseRfc3339("yesterday"));
}

TEST(Clock, DurationsInSlurmAndSkyPilotForms) {
  EXPECT_EQ(ParseDuration("90m"), 90 * 60'000);
  EXPECT_EQ(ParseDuration("2h"), 2 * 3'600'000);
  EXPECT_EQ(ParseDuration("1h30m"), 90 * 60'000);
  EXPECT_EQ(ParseDuration("45s"), 45'000);
  EXPECT_EQ(ParseDuration("250ms"), 250);
  EXPECT_EQ(ParseDuration("30"), 30 * 60'000);  // a bare number is minutes
  EXPECT_FALSE(ParseDuration("soon"));
  EXPECT_FALSE(ParseDuration("5 x"));
  EXPECT_EQ(FormatDuration(90 * 60'000), "1h30m");
}

TEST(Clock, AgoReadsLikeAQueueListing) {
  EXPECT_EQ(FormatAgo(0, 1000), "just now");
  EXPECT_EQ(FormatAgo(0, 10 * 60'000), "10 mins ago");
  EXPECT_EQ(FormatAgo(0, 3 * 3'600'000), "3 hrs ago");
}

TEST(CpuBudget, ReadsCgroupV2Quota) {
  EXPECT_FALSE(ParseCgroupV2CpuMax("max 100000"));
  EXPECT_DOUBLE_EQ(*ParseCgroupV2CpuMax("150000 100000"), 1.5);
  EXPECT_FALSE(ParseCgroupV2CpuMax("garbage"));
  CpuBudget b = ReadCpuBudget();
  EXPECT_GE(b.usable, 1);
  EXPECT_LE(b.usable, b.affinity);
}

// Written over the old content (never truncated to empty first, see files.h), then cut to length.
TEST(Files, WriteInPlaceReplacesLongerAndShorterContent) {
  std::string path = ::testing::TempDir() + "/in-place-" + std::to_string(::getpid());
  ASSERT_TRUE(WriteFileInPlace(path, "a much longer first content\n", 0600));
  EXPECT_EQ(ReadFileOr(path), "a much longer first content\n");
  ASSERT_TRUE(WriteFileInPlace(path, "short\n", 0600));
  EXPECT_EQ(ReadFileOr(path), "short\n");
  ASSERT_TRUE(WriteFileInPlace(path, "", 0600));
  EXPECT_EQ(ReadFileOr(path, "gone"), "");
  ASSERT_TRUE(WriteFileInPlace(path, "longer again\n", 0600));
  EXPECT_EQ(ReadFileOr(path), "longer again\n");
  ::unlink(path.c_str());
}

TEST(Strings, NamesAndSplits) {
  EXPECT_TRUE(IsValidName("local-0"));
  EXPECT_FALSE(IsValidName("-x"));
  EXPECT_FALSE(IsValidName("a b"));
  EXPECT_EQ(Split("a,b,,c", ',').size(), 4u);
  EXPECT_EQ(Trim("  x \n"), "x");
  EXPECT_EQ(RandomHex(8).size(), 16u);
}

TEST(Strings, PathsUnderARoot) {
  EXPECT_TRUE(IsPathUnder("/data", "/data"));
  EXPECT_TRUE(IsPathUnder("/data/x/y", "/data"));
  EXPECT_TRUE(IsPathUnder("/anything", "/"));
  EXPECT_FALSE(IsPathUnder("/database", "/data"));
  EXPECT_FALSE(IsPathUnder("/dat", "/data"));
  EXPECT_FALSE(IsPathUnder("/other/data", "/data"));
}

TEST(Resources, AMigSlicesTypeSaysItsGpuAndItsShare) {
  EXPECT_EQ(SliceShareOf("A100-3g.40gb"), (SliceShare{"A100", 3}));
  EXPECT_EQ(SliceShareOf("H100-1g.10gb-me"), (SliceShare{"H100", 1}));
  EXPECT_EQ(SliceShareOf("H100-2c.3g.40gb"), (SliceShare{"H100", 2}));
  EXPECT_EQ(SliceShareOf("A100-7g.80gb"), (SliceShare{"A100", 7}));
  for (const char* not_a_slice : {"A100", "RTX4090", "-3g.40gb", "A100-8g.80gb", "A100-3g.40",
                                  "A100-3g.40gbx", "A100-g.40gb", "A100-3g.0gb", "V100-SXM2"}) {
    EXPECT_FALSE(SliceShareOf(not_a_slice).has_value()) << not_a_slice;
  }
  EXPECT_DOUBLE_EQ(GpuTypeWeight({{"A100", 2.0}}, "A100-3g.40gb"), 2.0 * 3 / 7);
  EXPECT_DOUBLE_EQ(GpuTypeWeight({{"A100", 2.0}}, "A100"), 2.0);
  EXPECT_DOUBLE_EQ(GpuTypeWeight({}, "T4"), 1.0);
}

TEST(Resources, CudaVisibleDevicesListsTheGrantedIndices) {
  NodeGrant g{"n1", 0, {{2, 1000}, {3, 1000}}};
  EXPECT_EQ(CudaVisibleDevices(g), "2,3");
}

// SerializeJson writes what boost::json::serialize writes (but for doubles, written shortest by
// fmt): every byte of a string escaped the same way, integers at their limits, nesting.
TEST(Json, SerializeWritesWhatBoostWrites) {
  std::string every_byte;
  for (int c = 0; c < 256; ++c) every_byte.push_back(static_cast<char>(c));
  std::mt19937 random(7);
  std::vector<json::value> values = {
      json::value(every_byte),
      json::value("plain"),
      json::value(""),
      json::value("a\"b\\c\u00e9\xff\x7f\x1f"),
      json::value(INT64_MIN),
      json::value(INT64_MAX),
      json::value(UINT64_MAX),
      json::value(0),
      json::value(true),
      json::value(nullptr),
      json::object{{"k\n", json::array{1, "x", nullptr, json::object{}}}, {"", json::array{}}},
  };
  for (int i = 0; i < 200; ++i) {
    std::string bytes(random() % 40, ' ');
    for (char& c : bytes) c = static_cast<char>(random() % 256);
    values.push_back(json::object{{bytes, bytes}, {"n", static_cast<int64_t>(random()) - 99}});
  }
  for (const json::value& v : values) EXPECT_EQ(SerializeJson(v), json::serialize(v));
  EXPECT_EQ(SerializeJson(json::value(0.25)), "0.25");
  EXPECT_EQ(SerializeJson(json::value(3.0)), "3");
  EXPECT_EQ(SerializeJson(json::value(std::nan(""))), "null");
}

TEST(Json, DepthIsBoundedWithTheLimitNamed) {
  std::string ok = std::string(60, '[') + std::string(60, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
  auto deep = ParseJson(std::string(100000, '[') + std::string(100000, ']'));
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("deeper than 64 levels"), std::string::npos)
      << deep.status().message();
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

TEST(ParseDecimalTest, DigitsOnlyWithinInt64) {
  EXPECT_EQ(ParseDecimal("0"), 0);
  EXPECT_EQ(ParseDecimal("42"), 42);
  EXPECT_EQ(ParseDecimal("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ParseDecimal("9223372036854775808"), std::nullopt);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1a", "0x10"}) {
    EXPECT_EQ(ParseDecimal(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace berth
