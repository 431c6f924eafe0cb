// NodeJobs: the index of which jobs may be on each node (server/core/node_jobs.h).
#include "server/core/node_jobs.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

Placement On(std::initializer_list<const char*> nodes) {
  Placement p;
  int rank = 0;
  for (const char* n : nodes) p.push_back(NodeGrant{.node = n, .rank = rank++});
  return p;
}

TEST(NodeJobsTest, EachNodeHasItsJobsInIdOrderOnce) {
  NodeJobs index;
  index.Add(9, On({"a"}));
  index.Add(3, On({"a", "b"}));
  index.Add(9, On({"a"}));  // placed there again (after a requeue)
  EXPECT_EQ(index.Of("a"), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(index.Of("b"), (std::vector<int64_t>{3}));
  EXPECT_TRUE(index.Of("c").empty());
  EXPECT_EQ(index.entries(), 3u);  // the duplicate went for good
}

TEST(NodeJobsTest, StaleEntriesAreBoundedByARebuild) {
  NodeJobs index;
  EXPECT_FALSE(index.NeedsRebuild(0));
  // A job requeued and placed again and again leaves an entry per placement.
  for (int i = 0; i < static_cast<int>(NodeJobs::kFloor) + 10; ++i) {
    index.Add(1, On({i % 2 == 0 ? "a" : "b"}));
  }
  EXPECT_TRUE(index.NeedsRebuild(1));
  EXPECT_FALSE(index.NeedsRebuild(2000));
  index.Clear();
  EXPECT_FALSE(index.NeedsRebuild(1));
  index.MarkStale();
  EXPECT_TRUE(index.NeedsRebuild(1));
}

}  // namespace
}  // namespace berth
