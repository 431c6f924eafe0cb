// DyingAttempts (server/core/dying_attempts.h): an earlier attempt is held until its last live rank
// is gone, and an entry is put back after a failed commit.
#include "server/core/dying_attempts.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

// Job 4's attempt 1: ranks 0 and 1 on n1, rank 2 on n2; rank 1 had exited already.
DyingAttempt TwoNodeAttempt() {
  DyingAttempt a;
  a.placement = {NodeGrant{.node = "n1", .rank = 0}, NodeGrant{.node = "n1", .rank = 1},
                 NodeGrant{.node = "n2", .rank = 2}};
  a.per_node.cpus = 2'000;
  a.alive = {0, 2};
  return a;
}

TEST(DyingAttemptsTest, AnAttemptIsHeldUntilItsLastLiveRankIsGone) {
  DyingAttempts dying;
  dying.Add({4, 1}, TwoNodeAttempt());
  using Rank = std::tuple<int64_t, int, int>;
  EXPECT_EQ(dying.AliveOn("n1"), (std::vector<Rank>{{4, 1, 0}}));  // rank 1 exited before
  EXPECT_EQ(dying.AliveOn("n2"), (std::vector<Rank>{{4, 1, 2}}));
  EXPECT_TRUE(dying.AliveOn("n3").empty());
  EXPECT_EQ(dying.RankGone({4, 1}, 0), std::nullopt);  // rank 2 still runs
  EXPECT_EQ(dying.RankGone({4, 1}, 0), std::nullopt);  // reported twice: nothing more
  EXPECT_EQ(dying.count({4, 1}), 1u);
  std::optional<DyingAttempt> ended = dying.RankGone({4, 1}, 2);
  ASSERT_TRUE(ended.has_value());  // the last: its resources are the caller's to free
  EXPECT_EQ(ended->placement.size(), 3u);
  EXPECT_EQ(ended->per_node.cpus, 2'000);
  EXPECT_EQ(dying.count({4, 1}), 0u);
  EXPECT_EQ(dying.RankGone({4, 1}, 2), std::nullopt);  // unknown now
}

TEST(DyingAttemptsTest, SaveAndRestoreUndoAChange) {
  DyingAttempts dying;
  EXPECT_EQ(dying.Save({4, 1}), std::nullopt);
  dying.Add({4, 1}, TwoNodeAttempt());
  std::optional<DyingAttempt> before = dying.Save({4, 1});
  dying.RankGone({4, 1}, 0);
  dying.RankGone({4, 1}, 2);
  EXPECT_EQ(dying.size(), 0u);
  dying.Restore({4, 1}, before);  // the commit of those reports failed
  ASSERT_EQ(dying.count({4, 1}), 1u);
  EXPECT_EQ(dying.find({4, 1})->second.alive, (std::set<int>{0, 2}));
  dying.Restore({4, 1}, std::nullopt);  // it did not exist before the failed change
  EXPECT_EQ(dying.size(), 0u);
}

}  // namespace
}  // namespace berth
