// JobCounts (server/core/job_counts.h): jobs per state and (pool, team), and per user pending,
// moved as jobs change.
#include "server/core/job_counts.h"

#include <gtest/gtest.h>

#include "common/job_status.h"

namespace berth {
namespace {

constexpr int kPending = static_cast<int>(JobStatus::kPending);
constexpr int kRunning = static_cast<int>(JobStatus::kRunning);

// Ada (team vision) submits two jobs to pool "a100"; one starts running, the other is cancelled
// while pending; bob's job in the default pool ends and is still stopping.
TEST(JobCountsTest, CountsMoveWithTheirJobs) {
  JobCounts counts;
  const uint32_t vision = counts.Group("a100", "vision");
  const uint32_t plain = counts.Group("", "");
  EXPECT_EQ(counts.Group("a100", "vision"), vision);  // made once
  EXPECT_NE(vision, plain);
  EXPECT_EQ(counts.GroupNames(vision), (std::pair<std::string, std::string>{"a100", "vision"}));

  counts.Add({kPending, vision}, "ada");
  counts.Add({kPending, vision}, "ada");
  counts.Add({kPending, plain}, "bob");
  EXPECT_EQ(counts.Pending("ada"), 2);
  EXPECT_EQ(counts.Pending("bob"), 1);
  EXPECT_EQ(counts.Pending("cy"), 0);
  EXPECT_TRUE(counts.AnyPending());

  counts.Remove({kPending, vision}, "ada");  // one starts running
  counts.Add({kRunning, vision}, "ada");
  counts.Remove({kPending, vision}, "ada");  // the other cancelled: counted nowhere
  counts.Remove({kPending, plain}, "bob");   // bob's ends, still stopping
  counts.Add({JobCounts::kStoppingSlot, plain}, "bob");
  EXPECT_EQ(counts.Pending("ada"), 0);
  EXPECT_FALSE(counts.AnyPending());  // running and stopping jobs are not pending
  EXPECT_EQ(counts.counts()[vision][kRunning], 1);
  EXPECT_EQ(counts.counts()[vision][kPending], 0);
  JobCounts::Slots total = counts.Totals();
  EXPECT_EQ(total[kRunning], 1);
  EXPECT_EQ(total[JobCounts::kStoppingSlot], 1);
  EXPECT_EQ(total[kPending], 0);

  JobCounts copy = counts;
  EXPECT_TRUE(copy.SameCounts(counts));
  counts.Clear();
  EXPECT_FALSE(copy.SameCounts(counts));
  EXPECT_EQ(counts.Totals(), JobCounts::Slots{});
  EXPECT_EQ(counts.groups().size(), 2u);  // the groups stay
}

}  // namespace
}  // namespace berth
