// GroupLimits (server/core/group_limits.h): bulk groups' max_running, kept while the group has jobs
// in memory.
#include "server/core/group_limits.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

// A job of `group` (the limits count the jobs that enter and leave the job table).
ActiveJob Of(int64_t group) {
  ActiveJob job;
  job.row.group = group;
  return job;
}

void Enter(GroupLimits& limits, int64_t group, int n) {
  ActiveJob job = Of(group);
  for (int i = 0; i < n; ++i) limits.Entered(job);
}

void Leave(GroupLimits& limits, int64_t group) {
  ActiveJob job = Of(group);
  limits.Left(job);
}

TEST(GroupLimitsTest, ALimitIsForgottenWithTheGroupsLastJob) {
  GroupLimits limits;
  Enter(limits, 7, 2);
  limits.Set(7, 1);
  EXPECT_EQ(limits.Limit(7), 1);
  EXPECT_TRUE(limits.Limited(7));
  Leave(limits, 7);
  EXPECT_EQ(limits.Limit(7), 1);  // one job left
  Leave(limits, 7);
  EXPECT_EQ(limits.Limit(7), std::nullopt);
  EXPECT_FALSE(limits.Limited(7));
  EXPECT_TRUE(limits.limits().empty());
  EXPECT_TRUE(limits.live().empty());
  Leave(limits, 7);  // a job of a group not counted: nothing to forget, nothing breaks
  EXPECT_TRUE(limits.live().empty());
  ActiveJob loose;  // a job in no group: not counted
  limits.Entered(loose);
  limits.Left(loose);
  EXPECT_TRUE(limits.live().empty());
}

TEST(GroupLimitsTest, AGroupWithoutJobsInMemoryKeepsNoLimitAndNoneLiftsIt) {
  GroupLimits limits;
  limits.Set(3, 5);  // its jobs all ended: the store keeps the limit, memory does not
  EXPECT_EQ(limits.Limit(3), std::nullopt);
  Enter(limits, 3, 1);
  limits.Set(3, 5);
  EXPECT_EQ(limits.Limit(3), 5);
  limits.Set(3, std::nullopt);
  EXPECT_EQ(limits.Limit(3), std::nullopt);
  EXPECT_EQ(limits.live().at(3), 1);  // lifting the limit does not forget the group's jobs
}

// Load takes the store's limits; Restore puts back what a failed commit's change replaced.
TEST(GroupLimitsTest, LoadAndRestore) {
  GroupLimits limits;
  limits.Load({{1, 2}, {4, 8}});
  Enter(limits, 1, 3);
  EXPECT_EQ(limits.Limit(4), 8);
  limits.Set(1, 6);
  limits.Restore(1, 2);
  EXPECT_EQ(limits.Limit(1), 2);
  limits.Set(1, std::nullopt);
  limits.Restore(1, 2);
  EXPECT_EQ(limits.Limit(1), 2);
  limits.Restore(4, std::nullopt);  // it had none before
  EXPECT_EQ(limits.Limit(4), std::nullopt);
  EXPECT_EQ(limits.limits(), (std::map<int64_t, int>{{1, 2}}));
}

}  // namespace
}  // namespace berth
