// LogFollowers (server/core/log_followers.h): each follower of a job is woken once.
#include "server/core/log_followers.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

TEST(LogFollowersTest, EachIsWokenOnceAndARemovedOneNever) {
  LogFollowers followers;
  int a = 0, b = 0, c = 0;
  followers.Add(1, [&] { ++a; });
  const uint64_t gone = followers.Add(1, [&] { ++b; });
  followers.Add(2, [&] { ++c; });
  followers.Remove(1, gone);
  followers.Remove(1, 999);  // unknown: nothing
  followers.Wake(1);
  followers.Wake(1);  // already woken and forgotten
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(c, 0);
  EXPECT_EQ(followers.size(), 1u);
  followers.Clear();
  followers.Wake(2);
  EXPECT_EQ(c, 0);
}

}  // namespace
}  // namespace berth
