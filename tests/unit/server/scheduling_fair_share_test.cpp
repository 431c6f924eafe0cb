// Fair share in the Core (docs/fair-share.md): users' caps, teams' quotas and reclaims through real
// passes, usage recorded with each attempt's end (and only once it is committed), and everything
// surviving a restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core_fixture.h"
#include "fakes/fake_system_users.h"
#include "server/accounts.h"
#include "server/http/identity.h"

namespace berth::testing {
namespace {

using ::testing::HasSubstr;

class FairShareCoreTest : public CoreTest {
 protected:
  void Rules(std::vector<UserRow> users, std::vector<TeamRow> teams) {
    core_->scheduling().SetShareRules(users, teams);
  }
  static TeamRow Team(const std::string& name, MilliGpu quota_v100) {
    TeamRow t;
    t.name = name;
    if (quota_v100 > 0) t.quota["V100"] = quota_v100;
    return t;
  }
  static UserRow User(const std::string& name, const std::string& team) {
    UserRow u;
    u.name = name;
    u.team = team;
    return u;
  }
  void RunAll(const std::string& node, const std::vector<int64_t>& jobs) {
    for (int64_t id : jobs) {
      if (Stored(id).status == JobStatus::kStarting) Run(node, id, Stored(id).attempt);
    }
  }
};

TEST_F(FairShareCoreTest, SubmissionsBeyondMaxPendingJobsAreRefused) {
  Register("n1", 8, 0);
  UserRow alice = User("alice", "");
  alice.max_pending_jobs = 2;
  Rules({alice}, {});
  // No pass runs: the jobs stay pending.
  ASSERT_TRUE(core_->admission().Submit({.spec = Spec(1), .user = "alice", .count = 2}).ok());
  SubmitRequest more{.spec = Spec(1), .user = "alice", .count = 1};
  auto refused = core_->admission().Submit(std::move(more));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kForbidden);
  EXPECT_THAT(refused.status().message(), HasSubstr("max-pending-jobs"));
  EXPECT_THAT(refused.status().message(), HasSubstr("has 2 pending"));
  Submit(Spec(1), "bob");  // nobody else is limited
  // A job of hers that leaves the queue makes room for one more (the count is kept as jobs change).
  CancelRequest cancel{.all = true, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  EXPECT_TRUE(core_->admission().Submit({.spec = Spec(1), .user = "alice", .count = 2}).ok());
  EXPECT_FALSE(core_->admission().Submit({.spec = Spec(1), .user = "alice", .count = 1}).ok());
}

TEST_F(FairShareCoreTest, MaxRunningGpusHoldsJobsWithAReason) {
  Register("n1", 8, 4);
  UserRow alice = User("alice", "");
  alice.max_running_gpus = 2;
  Rules({alice}, {});
  const int64_t a = Submit(Spec(1, 2));
  const int64_t b = Submit(Spec(1, 1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(a).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(b).status, JobStatus::kPending);
  EXPECT_THAT(core_->reads().WaitingReason(b), HasSubstr("max-running-gpus is 2"));
}

// red and blue each have a quota of 2 of n1's 4 V100s. blue takes all four (two borrowed); red's
// first job reclaims one borrowed GPU; with one reclaim allowed per window, red's second job waits
// and says why. The victim's event names the reclaim; the waiting job's numbers are in its
// explanation.
TEST_F(FairShareCoreTest, ReclaimTakesBackBorrowedWorkAtTheRateLimit) {
  options_.reclaim_limit = 1;
  core_ = std::make_unique<Core>(options_, *store_, clock_, channel_);
  ASSERT_TRUE(core_->Load().ok());
  Register("n1", 8, 4);
  Rules({User("bob", "blue"), User("rita", "red")},
        {Team("blue", 2 * kMilliPerGpu), Team("red", 2 * kMilliPerGpu)});
  std::vector<int64_t> blue;
  for (int i = 0; i < 4; ++i) {
    blue.push_back(Submit(Spec(1, 1), "bob"));
    clock_.Advance(1000);
  }
  ASSERT_TRUE(core_->scheduling().RunPass());
  RunAll("n1", blue);
  for (int64_t id : blue) ASSERT_EQ(Stored(id).status, JobStatus::kRunning);

  const int64_t r1 = Submit(Spec(1, 1), "rita");
  const int64_t r2 = Submit(Spec(1, 1), "rita");
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(r1).status, JobStatus::kStarting);
  EXPECT_THAT(Stored(r1).reason, HasSubstr("by reclaiming its team's quota"));
  int requeued = 0;
  for (int64_t id : blue) {
    if (Stored(id).status != JobStatus::kPending) continue;
    ++requeued;
    EXPECT_THAT(Stored(id).reason, HasSubstr("reclaimed by team red for job"));
  }
  EXPECT_EQ(requeued, 1);
  EXPECT_EQ(Stored(r2).status, JobStatus::kPending);
  EXPECT_THAT(core_->reads().WaitingReason(r2), HasSubstr("reclaims allowed per 1m"));
  auto detail = core_->reads().WaitingDetailOf(r2);
  ASSERT_TRUE(detail && detail->explanation && detail->pass);
  EXPECT_EQ(detail->explanation->quota_state, sched::Explanation::Quota::kWithin);
  EXPECT_EQ(detail->pass->teams()[static_cast<size_t>(detail->explanation->team)], "red");
  EXPECT_EQ(detail->explanation->quota, 2 * kMilliPerGpu);

  // A minute later the window allows another reclaim.
  clock_.Advance(61'000);
  clock_.StepWall(61'000);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_NE(Stored(r2).status, JobStatus::kPending) << core_->reads().WaitingReason(r2);
}

// An attempt's usage is recorded with its end, in the same commit, and feeds fair share; a failed
// commit records nothing; a restarted server rebuilds the same usage from the rollup.
TEST_F(FairShareCoreTest, UsageIsRecordedWithTheAttemptsEnd) {
  Register("n1", 8, 4);
  Rules({User("alice", "vision")}, {Team("vision", 4 * kMilliPerGpu)});
  const TimeMs start = clock_.Now();
  const int64_t job = Submit(Spec(2, 2));
  clock_.StepWall(5'000);  // it waited 5 s
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.StepWall(3'600'000);  // and ran an hour on 2 GPUs

  store_->FailWrites(1);
  auto failed = Report("n1", {Entry(job, 1, 0, proto::ReportEvent::kExited, 0)});
  EXPECT_FALSE(failed.ok());
  auto none = store_->inner().QueryUsage({start - 3'600'000, clock_.Now() + 1, false});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << "a failed commit left usage behind";

  ASSERT_TRUE(Report("n1", {Entry(job, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  auto rows = store_->inner().QueryUsage({start - 3'600'000, clock_.Now() + 1, false});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1U);
  const UsageRow& r = rows->front();
  EXPECT_EQ(r.name, "alice");
  EXPECT_DOUBLE_EQ(r.gpu_seconds.at("V100"), 2 * 3600.0);
  EXPECT_DOUBLE_EQ(r.cpu_seconds, 2 * 3600.0);
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.waits, 1);
  EXPECT_DOUBLE_EQ(r.wait_seconds, 5.0);
  EXPECT_EQ(r.preemptions, 0);

  // 7200 GPU-seconds, decayed over one hour of a 7-day half-life while they were used.
  const double usage = core_->reads().TeamUsage("vision");
  EXPECT_NEAR(usage, 7200.0, 7200.0 * 0.01);
  EXPECT_LT(usage, 7200.0);
  FakeChannel channel;
  Core fresh(options_, store_->inner(), clock_, channel);
  ASSERT_TRUE(fresh.Load().ok());
  ASSERT_TRUE(fresh.scheduling().LoadUsage().ok());
  fresh.scheduling().SetShareRules({User("alice", "vision")}, {Team("vision", 4 * kMilliPerGpu)});
  EXPECT_NEAR(fresh.reads().TeamUsage("vision"), usage, usage * 0.01);
}

// Quotas and caps are written by Accounts and read back by a restarted server.
TEST_F(FairShareCoreTest, TeamsAndCapsSurviveARestart) {
  FakeSystemUsers sys;
  auto accounts = std::make_unique<Accounts>(*store_, clock_, Identity::BuiltinAdmins(sys));
  ASSERT_TRUE(accounts->Load().ok());
  Principal root = accounts->ForUser("root", "socket");
  TeamChange change{.name = "vision",
                    .quota = std::map<std::string, MilliGpu>{{"A100", 16000}, {"V100", 8000}},
                    .borrow_limit = std::map<std::string, MilliGpu>{{"A100", 8000}},
                    .weight = 2};
  ASSERT_TRUE(accounts->SetTeam(root, change).ok());
  ASSERT_TRUE(
      accounts->SetUser(root, {.name = "alice", .team = "vision", .max_running_gpus = 8}).ok());
  Principal alice = accounts->ForUser("alice", "socket");
  auto refused = accounts->SetTeam(alice, {.name = "vision", .weight = 9});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kForbidden);
  EXPECT_FALSE(accounts->SetTeam(root, {.name = "vision", .weight = 0}).ok());
  // Quotas are of GPU types: a slice counts as its share of its GPU's, and names no quota itself.
  auto slice = accounts->SetTeam(
      root, {.name = "vision", .quota = std::map<std::string, MilliGpu>{{"A100-3g.40gb", 2000}}});
  ASSERT_FALSE(slice.ok());
  EXPECT_EQ(slice.status().message(),
            "--gpus: 'A100-3g.40gb' is a MIG slice type: give A100 GPUs instead: each "
            "A100-3g.40gb counts as 3/7 of one");

  Accounts again(*store_, clock_, Identity::BuiltinAdmins(sys));
  ASSERT_TRUE(again.Load().ok());
  const std::vector<TeamRow> teams = again.Teams();
  ASSERT_EQ(teams.size(), 1U);
  const TeamRow& t = teams.front();
  EXPECT_EQ(t.quota.at("A100"), 16000);
  EXPECT_EQ(t.quota.at("V100"), 8000);
  EXPECT_EQ(t.borrow_limit.at("A100"), 8000);
  EXPECT_EQ(t.weight, 2);
  const auto users = again.Users();
  ASSERT_EQ(users.size(), 1U);
  EXPECT_EQ(users.front().max_running_gpus, 8);
  EXPECT_FALSE(users.front().max_pending_jobs);
}

}  // namespace
}  // namespace berth::testing
