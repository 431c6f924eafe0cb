// FairShare (server/core/fair_share.h): the rules, ended and running usage, and the reclaim window,
// as a pass's snapshot carries them.
#include "server/core/fair_share.h"

#include <gtest/gtest.h>

#include <cmath>

namespace berth {
namespace {

constexpr TimeMs kHour = 3'600'000;
constexpr DurationMs kWindow = 60'000;

FairShare MakeShares() { return FairShare(UsageConfig{.half_life_ms = kHour}, kWindow); }

const sched::UserView* FindUser(const sched::Snapshot& snap, const std::string& name) {
  for (const sched::UserView& u : snap.users) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

const sched::TeamView* FindTeam(const sched::Snapshot& snap, const std::string& name) {
  for (const sched::TeamView& t : snap.teams) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(FairShareStateTest, RulesGiveEachUserATeamAndCapsAndAreReplacedWhole) {
  FairShare shares = MakeShares();
  shares.SetRules(
      {UserRow{.name = "ada", .team = "vision", .max_running_gpus = 3, .max_pending_jobs = 10}},
      {TeamRow{.name = "vision", .quota = {{"A100", 4'000}}, .weight = 2}});
  EXPECT_EQ(shares.TeamOf("ada"), "vision");
  EXPECT_EQ(shares.TeamOf("bob"), "");  // no rules: the default team
  ASSERT_NE(shares.RulesOf("ada"), nullptr);
  EXPECT_EQ(shares.RulesOf("ada")->max_pending_jobs, 10);
  EXPECT_EQ(shares.RulesOf("bob"), nullptr);

  sched::Snapshot snap;
  snap.now = kHour;
  shares.AddTo(snap, {});
  const sched::UserView* ada = FindUser(snap, "ada");
  ASSERT_NE(ada, nullptr);  // a user with rules is in the snapshot without any usage
  EXPECT_EQ(ada->team, "vision");
  EXPECT_EQ(ada->max_running_gpus, 3'000);  // whole GPUs as milli-GPUs
  EXPECT_EQ(ada->usage, 0);
  const sched::TeamView* vision = FindTeam(snap, "vision");
  ASSERT_NE(vision, nullptr);
  EXPECT_EQ(vision->quota.at("A100"), 4'000);
  EXPECT_EQ(vision->weight, 2);

  shares.SetRules({}, {});  // a later change replaces, not merges
  EXPECT_EQ(shares.TeamOf("ada"), "");
  sched::Snapshot after;
  after.now = kHour;
  shares.AddTo(after, {});
  EXPECT_TRUE(after.users.empty());
  EXPECT_TRUE(after.teams.empty());
}

// Ended usage decays; running usage is added to the user and to the team the user is in now.
TEST(FairShareStateTest, UsageIsEndedPlusRunningPerUserAndTeam) {
  FairShare shares = MakeShares();
  shares.SetRules({UserRow{.name = "ada", .team = "vision"}}, {});
  UsageRecord ended{.user = "ada", .team = "vision", .gpu_type = "A100", .gpu_milli = 1'000};
  ended.placed_at = 0;
  ended.ended_at = kHour;
  shares.AddEnded(ended);
  const double at_end = 3600 / std::log(2.0) / 2;  // one GPU for the hour, decayed to its end
  EXPECT_NEAR(shares.EndedTeamUsage("vision", kHour), at_end, 1e-6);
  EXPECT_NEAR(shares.EndedTeamUsage("vision", 2 * kHour), at_end / 2, 1e-6);

  const double running = shares.RunningUse("A100", 2'000, kHour, 2 * kHour);
  EXPECT_NEAR(running, 2 * at_end, 1e-6);  // two GPUs for an hour, up to now
  sched::Snapshot snap;
  snap.now = 2 * kHour;
  shares.AddTo(snap, {{.user = "ada", .used = running}, {.user = "bob", .used = 5}});
  ASSERT_NE(FindUser(snap, "ada"), nullptr);
  EXPECT_NEAR(FindUser(snap, "ada")->usage, at_end / 2 + running, 1e-6);
  EXPECT_NEAR(FindTeam(snap, "vision")->usage, at_end / 2 + running, 1e-6);
  ASSERT_NE(FindUser(snap, "bob"), nullptr);  // a user without rules who runs something
  EXPECT_EQ(FindUser(snap, "bob")->team, "");
  ASSERT_NE(FindTeam(snap, ""), nullptr);
  EXPECT_EQ(FindTeam(snap, "")->usage, 5);
}

// A reclaim counts for the window after it, then is forgotten (once: the second call finds none).
TEST(FairShareStateTest, ReclaimsCountWithinTheWindowOnly) {
  FairShare shares = MakeShares();
  shares.SetRules({}, {TeamRow{.name = "vision", .quota = {{"A100", 8'000}}}});
  shares.Reclaimed("vision", 1'000);
  shares.Reclaimed("vision", 30'000);
  EXPECT_FALSE(shares.ExpireReclaims(1'000 + kWindow - 1));
  sched::Snapshot snap;
  snap.now = 1'000 + kWindow - 1;
  shares.AddTo(snap, {});
  ASSERT_NE(FindTeam(snap, "vision"), nullptr);
  EXPECT_EQ(FindTeam(snap, "vision")->reclaims, (std::vector<TimeMs>{1'000, 30'000}));

  EXPECT_TRUE(shares.ExpireReclaims(1'000 + kWindow));
  EXPECT_FALSE(shares.ExpireReclaims(1'000 + kWindow));
  sched::Snapshot later;
  later.now = 30'000 + kWindow;  // AddTo forgets what left the window too
  shares.AddTo(later, {});
  EXPECT_TRUE(FindTeam(later, "vision")->reclaims.empty());
  EXPECT_FALSE(shares.ExpireReclaims(30'000 + kWindow));
}

}  // namespace
}  // namespace berth
