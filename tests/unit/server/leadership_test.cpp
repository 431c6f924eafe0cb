// The Elector against an in-memory lease on a fake clock: who leads, when a leader steps down,
// and that a deposed leader's token is never handed out again.
#include "server/leadership.h"

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/fake_leader_lease.h"

namespace berth {
namespace {

using testing::FakeClock;
using testing::FakeLeaderLease;
using Action = Elector::Action;

constexpr DurationMs kLease = 3'000;

class ElectorTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  FakeLeaderLease lease_{clock_};
  Elector a_{{.holder = "a", .url = "http://a", .lease_ms = kLease}, lease_, clock_};
  Elector b_{{.holder = "b", .url = "http://b", .lease_ms = kLease}, lease_, clock_};
};

TEST_F(ElectorTest, FirstToAskLeadsAndTheOtherFollows) {
  EXPECT_EQ(a_.Tick(), Action::kLead);
  EXPECT_TRUE(a_.leading());
  EXPECT_EQ(b_.Tick(), Action::kNone);
  EXPECT_FALSE(b_.leading());
  Result<LeaderInfo> info = lease_.Current();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->holder, "a");
  EXPECT_EQ(info->url, "http://a");
  EXPECT_EQ(info->token, a_.token());
  EXPECT_EQ(a_.tick_ms(), kLease / 3);
  EXPECT_EQ(b_.tick_ms(), kLease / 4);
}

TEST_F(ElectorTest, RenewingLeaderKeepsItsTokenForever) {
  ASSERT_EQ(a_.Tick(), Action::kLead);
  const int64_t token = a_.token();
  for (int i = 0; i < 100; ++i) {
    clock_.Advance(a_.tick_ms());
    EXPECT_EQ(a_.Tick(), Action::kNone);
    EXPECT_EQ(b_.Tick(), Action::kNone);
  }
  EXPECT_TRUE(a_.leading());
  EXPECT_EQ(a_.token(), token);
}

TEST_F(ElectorTest, DeadLeaderIsReplacedAfterItsLeaseWithAHigherToken) {
  ASSERT_EQ(a_.Tick(), Action::kLead);
  const int64_t old_token = a_.token();
  // a stops ticking (killed): b takes over once the lease ran out, not before.
  clock_.Advance(kLease - 1);
  EXPECT_EQ(b_.Tick(), Action::kNone);
  clock_.Advance(1);
  EXPECT_EQ(b_.Tick(), Action::kLead);
  EXPECT_GT(b_.token(), old_token);
}

TEST_F(ElectorTest, PausedLeaderStepsDownWhenItWakes) {
  ASSERT_EQ(a_.Tick(), Action::kLead);
  clock_.Advance(kLease + 1);  // SIGSTOP past the lease
  ASSERT_EQ(b_.Tick(), Action::kLead);
  EXPECT_EQ(a_.Tick(), Action::kStepDown);  // SIGCONT: its renewal finds the lease taken
  EXPECT_FALSE(a_.leading());
  EXPECT_EQ(a_.last_error(), "the lease was taken by another server");
  EXPECT_EQ(a_.Tick(), Action::kNone);  // a follower now
  EXPECT_TRUE(b_.leading());
}

TEST_F(ElectorTest, ShortDatabaseOutageKeepsTheLeaderLongOneStepsItDown) {
  ASSERT_EQ(a_.Tick(), Action::kLead);
  const int64_t token = a_.token();
  lease_.SetDown(true);
  clock_.Advance(kLease / 3);
  EXPECT_EQ(a_.Tick(), Action::kNone);
  EXPECT_NE(a_.last_error(), "");
  clock_.Advance(kLease / 3);
  EXPECT_EQ(a_.Tick(), Action::kNone);
  lease_.SetDown(false);  // back within the lease: nothing happened
  clock_.Advance(kLease / 3);
  EXPECT_EQ(a_.Tick(), Action::kNone);
  EXPECT_EQ(a_.token(), token);
  EXPECT_EQ(a_.last_error(), "");

  lease_.SetDown(true);  // now for a whole lease: it steps down when one has passed
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(kLease / 3);
    EXPECT_EQ(a_.Tick(), Action::kNone) << i;
  }
  clock_.Advance(kLease / 3);
  EXPECT_EQ(a_.Tick(), Action::kStepDown);
  EXPECT_FALSE(a_.leading());
}

TEST_F(ElectorTest, ReleaseLetsAFollowerTakeOverAtOnce) {
  ASSERT_EQ(a_.Tick(), Action::kLead);
  a_.Release();
  EXPECT_FALSE(a_.leading());
  EXPECT_EQ(b_.Tick(), Action::kLead);
}

}  // namespace
}  // namespace berth
