// UsageLedger (server/core/usage_ledger.h): weighted GPU usage, decayed with its half-life.
#include "server/core/usage_ledger.h"

#include <gtest/gtest.h>

#include <cmath>

namespace berth {
namespace {

constexpr TimeMs kHour = 3'600'000;

// Half-life one hour; an A100-second weighs 2. Ada holds 2 A100s for one hour, ending at t = 1h.
TEST(UsageLedgerTest, UsageIsWeightedAndHalvesEachHalfLife) {
  UsageLedger ledger(UsageConfig{.half_life_ms = kHour, .gpu_weights = {{"A100", 2.0}}});
  EXPECT_EQ(ledger.Weight("A100"), 2.0);
  EXPECT_EQ(ledger.Weight("T4"), 1.0);  // unnamed: 1
  UsageRecord r{.user = "ada", .team = "vision", .gpu_type = "A100", .gpu_milli = 2'000};
  r.placed_at = 0;
  r.ended_at = kHour;
  ledger.Add(r);
  // 2 GPUs x weight 2 x the integral of 2^(-(1h-s)/1h) over the hour = 4 x 3600 / (2 ln 2).
  const double at_end = 4 * 3600 / (2 * std::log(2.0));
  EXPECT_NEAR(ledger.User("ada", kHour), at_end, 1e-6);
  EXPECT_NEAR(ledger.Team("vision", kHour), at_end, 1e-6);
  EXPECT_NEAR(ledger.User("ada", 2 * kHour), at_end / 2, 1e-6);  // one half-life later
  EXPECT_NEAR(ledger.User("ada", 3 * kHour), at_end / 4, 1e-6);
  EXPECT_EQ(ledger.User("bob", kHour), 0);
  // A CPU-only attempt, or one that never ran, adds nothing.
  UsageRecord cpu{.user = "bob", .team = "", .gpu_type = "", .gpu_milli = 0, .cpu_milli = 4'000};
  cpu.placed_at = 0;
  cpu.ended_at = kHour;
  ledger.Add(cpu);
  EXPECT_EQ(ledger.User("bob", kHour), 0);
}

// With an idle charge (docs/idle.md), the GPU time an attempt's sampled GPUs sat idle costs that
// much more, at the attempt's end; an unsampled attempt, and a ledger without the charge, pay only
// their use. Rebuilt from the hourly rollup, the same.
TEST(UsageLedgerTest, IdleGpuTimeCostsTheIdleChargeMore) {
  const UsageConfig config{
      .half_life_ms = 1'000 * kHour, .gpu_weights = {{"A100", 2.0}}, .idle_charge = 1};
  UsageLedger charged(config);
  UsageLedger plain(UsageConfig{.half_life_ms = 1'000 * kHour, .gpu_weights = {{"A100", 2.0}}});
  UsageRecord r{.user = "ada", .team = "vision", .gpu_type = "A100", .gpu_milli = 2'000};
  r.placed_at = 0;
  r.ended_at = kHour;
  r.gpu_mean_sm = 10;
  r.gpu_idle_ms = kHour / 2;  // idle half the time
  charged.Add(r);
  plain.Add(r);
  // 2 GPUs x weight 2 x 1800 s idle, once more (barely decayed with a half-life of 1000 h).
  EXPECT_NEAR(charged.User("ada", kHour) - plain.User("ada", kHour), 2 * 2 * 1'800, 1e-6);
  UsageRecord unsampled = r;
  unsampled.user = "bob";
  unsampled.gpu_mean_sm.reset();
  charged.Add(unsampled);
  plain.Add(unsampled);
  EXPECT_NEAR(charged.User("bob", kHour), plain.User("bob", kHour), 1e-9);
  UsageLedger rebuilt(config);
  rebuilt.AddBucket(UsageBucket{.hour = 0,
                                .user = "ada",
                                .team = "vision",
                                .gpu_type = "A100",
                                .gpu_seconds = 2 * 3'600.0,
                                .idle_gpu_seconds = 2 * 1'800.0});
  // (A bucket decays from the middle of its hour: within a part in a thousand here.)
  EXPECT_NEAR(rebuilt.User("ada", kHour), charged.User("ada", kHour),
              1e-3 * charged.User("ada", kHour));
  // An hour that holds only idle time (an attempt that ended on its boundary) is charged too.
  UsageLedger boundary(config);
  boundary.AddBucket(
      UsageBucket{.hour = 0, .user = "cy", .gpu_type = "A100", .idle_gpu_seconds = 60});
  EXPECT_GT(boundary.User("cy", kHour), 0);
  EXPECT_FALSE(CheckUsageConfig(UsageConfig{.idle_charge = -1}).ok());
}

// A MIG slice weighs its share of its GPU: a 3g.40gb slice of an A100 is 3/7 of one,
// unless the operator weighs its type itself.
TEST(UsageLedgerTest, AMigSliceWeighsItsShareOfItsGpu) {
  UsageLedger ledger(
      UsageConfig{.half_life_ms = kHour, .gpu_weights = {{"A100", 2.0}, {"H100-1g.10gb", 0.5}}});
  EXPECT_DOUBLE_EQ(ledger.Weight("A100-3g.40gb"), 2.0 * 3 / 7);
  EXPECT_DOUBLE_EQ(ledger.Weight("A100-1c.3g.40gb"), 2.0 / 7);  // one compute slice of three
  EXPECT_DOUBLE_EQ(ledger.Weight("T4-2g.10gb"), 2.0 / 7);       // its GPU unnamed: 1
  EXPECT_DOUBLE_EQ(ledger.Weight("H100-1g.10gb"), 0.5);         // named: the operator's
  EXPECT_DOUBLE_EQ(ledger.Weight("RTX4090"), 1.0);
  UsageRecord whole{.user = "ada", .team = "", .gpu_type = "A100", .gpu_milli = 1'000};
  whole.ended_at = kHour;
  UsageRecord slice{.user = "bob", .team = "", .gpu_type = "A100-3g.40gb", .gpu_milli = 1'000};
  slice.ended_at = kHour;
  ledger.Add(whole);
  ledger.Add(slice);
  EXPECT_NEAR(ledger.User("bob", kHour), ledger.User("ada", kHour) * 3 / 7, 1e-6);
}

TEST(UsageLedgerTest, AHalfLifeOfZeroOrABadWeightIsRefused) {
  EXPECT_FALSE(CheckUsageConfig(UsageConfig{.half_life_ms = 0}).ok());
  EXPECT_FALSE(
      CheckUsageConfig(UsageConfig{.half_life_ms = kHour, .gpu_weights = {{"T4", -1}}}).ok());
  EXPECT_TRUE(
      CheckUsageConfig(UsageConfig{.half_life_ms = kHour, .gpu_weights = {{"T4", 0.5}}}).ok());
}

}  // namespace
}  // namespace berth
