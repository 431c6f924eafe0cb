// What running jobs' GPUs did, from the heartbeats (server/gpu_usage_table.h): a node's heartbeat
// replaces what it said before, a job's ranks on several nodes are summed up, and silent nodes
// are forgotten.
#include "server/gpu_usage_table.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

proto::GpuUsage Rank(int64_t job, int attempt, int rank, int mean_tenths, int64_t idle_for,
                     bool known = true) {
  return {.id = {job, attempt, rank},
          .known = known,
          .samples = 10,
          .mean_sm_tenths = mean_tenths,
          .p95_sm = mean_tenths / 10 + 5,
          .peak_memory_mib = 1'000,
          .idle_ms = idle_for,
          .idle_for_ms = idle_for};
}

TEST(GpuUsageTable, AJobsRanksAcrossNodesMakeOneUse) {
  GpuUsageTable t;
  const TimeMs now = 1'000'000;
  t.Update("a", {Rank(5, 1, 0, 0, 600'000), Rank(6, 1, 0, 900, 0)}, now);
  t.Update("b", {Rank(5, 1, 1, 20, 300'000, /*known=*/false)}, now + 1'000);
  std::optional<JobGpuUse> use = t.Of(5, 1, now + 2'000);
  ASSERT_TRUE(use);
  EXPECT_EQ(use->ranks, 2);
  EXPECT_FALSE(use->known);           // one rank's node could not sample
  EXPECT_DOUBLE_EQ(use->mean_sm, 1);  // (0 + 2) / 2
  EXPECT_EQ(use->peak_memory_mib, 2'000);
  EXPECT_EQ(use->idle_for_ms, 300'000);  // idle only as long as its least idle rank
  EXPECT_EQ(use->at, now);
  EXPECT_FALSE(t.Of(5, 2, now));  // another attempt
  EXPECT_EQ(t.All(now + 2'000).size(), 2u);
  // Node a's next heartbeat no longer mentions job 5: its rank there ended.
  t.Update("a", {Rank(6, 1, 0, 900, 0)}, now + 5'000);
  use = t.Of(5, 1, now + 5'000);
  ASSERT_TRUE(use);
  EXPECT_EQ(use->ranks, 1);
  t.Update("b", {}, now + 6'000);
  EXPECT_FALSE(t.Of(5, 1, now + 6'000));
  // A node that stopped sending heartbeats is forgotten.
  EXPECT_TRUE(t.Of(6, 1, now + 6'000));
  EXPECT_FALSE(t.Of(6, 1, now + 5'000 + GpuUsageTable::kStaleMs + 1));
  t.Update("c", {}, now + 5'000 + GpuUsageTable::kStaleMs + 1);
  EXPECT_TRUE(t.All(now).empty());
}

// A node's GPUs as it last sampled them are kept with its report, for kGpusNowMs.
TEST(GpuUsageTable, ANodesGpusAsLastSampled) {
  GpuUsageTable t;
  const TimeMs now = 1'000'000;
  t.Update("a", {}, now, {{0, 97, 40'000}, {1, 0, 0}});
  std::map<int, proto::GpuNow> gpus = t.GpusOf("a", now + 1'000);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].sm, 97);
  EXPECT_EQ(gpus[1].memory_mib, 0);
  EXPECT_TRUE(t.GpusOf("b", now).empty());
  EXPECT_TRUE(t.GpusOf("a", now + GpuUsageTable::kGpusNowMs + 1).empty());
  t.Update("a", {}, now + 2'000);  // sampling stopped
  EXPECT_TRUE(t.GpusOf("a", now + 2'000).empty());
}

}  // namespace
}  // namespace berth
