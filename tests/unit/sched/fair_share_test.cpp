// Fair share, quotas and reclaim in Schedule(): properties the golden scenarios (fair_share.scn,
// quota.scn, reclaim.scn) cannot show in one story — above all, that teams never reclaim back and
// forth, over many random clusters and many passes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "sched/scheduler.h"
#include "sched_testing.h"

namespace berth::sched {
namespace {

using testing::Apply;
using testing::CheckInvariants;
using ::testing::ElementsAre;
using testing::FormatDecisions;
using ::testing::IsEmpty;
using testing::MakeJob;
using testing::MakeNode;

JobRequest UserJob(JobId id, const std::string& user, const std::string& gpus, int priority = 0) {
  JobRequest job = MakeJob(id, gpus, priority);
  job.user = user;
  return job;
}

// With one owner, the order is the plain one (priority, then id), quotas or not.
TEST(FairShareTest, OneUserKeepsSubmissionOrder) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 2)};
  s.users = {{.name = "a", .team = "t", .usage = 1e9}};
  s.teams = {{.name = "t", .quota = {{"V100", 1000}}}};
  s.pending = {UserJob(3, "a", "V100:1"), UserJob(1, "a", "V100:1"), UserJob(2, "a", "V100:1")};
  EXPECT_THAT(FormatDecisions(Schedule(s, Config{})),
              ElementsAre("place 1 on n1 gpus=0", "place 2 on n1 gpus=1",
                          "wait 3: waiting for resources: needs V100:1 on 1 node; no whole V100 "
                          "free on any node"));
}

// The admission charge interleaves equal users one job at a time, whatever the queue's size.
TEST(FairShareTest, EqualUsersAlternate) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 64, 256, "V100", 8)};
  for (JobId id = 1; id <= 20; ++id) s.pending.push_back(UserJob(id, "a", "V100:1"));
  for (JobId id = 21; id <= 40; ++id) s.pending.push_back(UserJob(id, "b", "V100:1"));
  PassResult r = Schedule(s, Config{});
  std::vector<JobId> placed;
  for (const PlaceDecision& d : r.placements) placed.push_back(d.job);
  EXPECT_THAT(placed, ElementsAre(1, 21, 2, 22, 3, 23, 4, 24));
  // Explanations: positions follow the pass's order; the first waiting job is a's job 5.
  ASSERT_EQ(r.waiting.size(), 32U);
  for (const auto& [id, reason] : r.waiting) {
    const std::optional<Explanation> explained = r.waiting.Explain(id);
    ASSERT_TRUE(explained);
    const Explanation& x = *explained;
    EXPECT_EQ(x.first_waiting, 5);
    if (id == 5) {
      EXPECT_EQ(x.position, 1);
    }
    if (id == 25) {
      EXPECT_EQ(x.position, 17);  // a's waiting jobs first: a did not move
    }
    ASSERT_GE(x.blocking, 0);
    EXPECT_EQ(r.waiting.blockings()[static_cast<size_t>(x.blocking)].resource, "V100");
    EXPECT_EQ(x.user_score, 4 * 3600.0);
  }
}

// Work without GPUs is borrowed too: a job within its team's quota that lacks CPUs reclaims them
// from another team's CPU-only job (no team holds more than its quota of any GPU type here, so the
// pass must not conclude from GPU holdings alone that nothing is borrowed).
TEST(FairShareTest, CpuOnlyWorkIsBorrowedAndReclaimed) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 4, 32, "V100", 2)};
  s.teams = {{.name = "x", .quota = {{"V100", 2000}}}};
  s.users = {{.name = "xu", .team = "x"}, {.name = "yu", .team = "y"}};
  RunningJob r;
  r.id = 1;
  r.user = "yu";
  r.per_node.cpus = 4 * kMilliPerCpu;
  r.placement = {{"n1", 0, {}}};
  ASSERT_EQ(testing::Hold(s, r), "");
  s.pending = {UserJob(2, "xu", "V100:1")};
  EXPECT_THAT(FormatDecisions(Schedule(s, Config{})),
              ElementsAre("reclaim 2 victims=1 on n1 gpus=0",
                          "wait 2: reclaiming team x's quota from other teams' borrowed job 1; "
                          "starts on n1 once it stops"));
  // Without it, nothing is borrowed and the job waits for a CPU.
  s.running.clear();
  s.nodes = {MakeNode("n1", 4, 32, "V100", 2)};
  r.user = "xu";
  ASSERT_EQ(testing::Hold(s, r), "");
  PassResult waits = Schedule(s, Config{});
  EXPECT_TRUE(waits.preemptions.empty());
  ASSERT_EQ(waits.waiting.size(), 1U);
  const std::optional<Explanation> x = waits.waiting.Explain(2);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->quota_state, Explanation::Quota::kWithin);
  EXPECT_EQ(waits.waiting.teams()[static_cast<size_t>(x->team)], "x");
  EXPECT_FALSE(waits.waiting.Explain(1));
}

// A team's quota of one type says nothing of another: its T4 work is borrowed and may be reclaimed.
TEST(FairShareTest, QuotaIsPerGpuType) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "T4", 2)};
  s.teams = {{.name = "x", .quota = {{"V100", 8000}}}, {.name = "y", .quota = {{"T4", 2000}}}};
  s.users = {{.name = "xu", .team = "x"}, {.name = "yu", .team = "y"}};
  RunningJob r;
  r.id = 1;
  r.user = "xu";
  r.per_node.gpu_type = "T4";
  r.per_node.gpu_milli = 2000;
  r.placement = {{"n1", 0, {{0, 1000}, {1, 1000}}}};
  ASSERT_EQ(testing::Hold(s, r), "");
  s.pending = {UserJob(2, "yu", "T4:1")};
  EXPECT_THAT(FormatDecisions(Schedule(s, Config{})),
              ElementsAre("reclaim 2 victims=1 on n1 gpus=0",
                          "wait 2: reclaiming team y's quota from other teams' borrowed job 1; "
                          "starts on n1 once it stops"));
}

// A MIG slice counts against its GPU type's quota and a user's max_running_gpus by its share of its
// GPU: two 3g.40gb slices of an A100 (3/7 each) fit in a quota of one A100 with nothing to borrow;
// a third would not.
TEST(FairShareTest, SlicesCountAgainstTheirGpusQuotaByTheirShare) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "A100-3g.40gb", 4)};
  s.teams = {{.name = "x", .quota = {{"A100", 1000}}, .borrow_limit = {{"A100", 0}}}};
  s.users = {{.name = "xu", .team = "x"}};
  s.pending = {UserJob(1, "xu", "A100-3g.40gb:1"), UserJob(2, "xu", "A100-3g.40gb:1"),
               UserJob(3, "xu", "A100-3g.40gb:1")};
  EXPECT_THAT(FormatDecisions(Schedule(s, Config{})),
              ElementsAre("place 1 on n1 gpus=0", "place 2 on n1 gpus=1",
                          "wait 3: waiting: team x holds 0.856 A100 and this job needs 0.428 more; "
                          "its quota is 1 and it may borrow 0 beyond it"));
  // The same holds for jobs already running, and for a user's cap.
  s.teams.clear();
  s.users = {{.name = "xu", .team = "x", .max_running_gpus = 1000}};
  for (JobId id : {1, 2}) {
    RunningJob r;
    r.id = id;
    r.user = "xu";
    r.per_node.gpu_type = "A100-3g.40gb";
    r.per_node.gpu_milli = 1000;
    r.placement = {{"n1", 0, {{static_cast<int>(id) - 1, 1000}}}};
    ASSERT_EQ(testing::Hold(s, r), "");
  }
  s.pending = {UserJob(3, "xu", "A100-3g.40gb:1"), UserJob(4, "xu", "A100-1g.10gb:1")};
  testing::AddGpus(s.nodes[0], "A100-1g.10gb", 1);
  EXPECT_THAT(
      FormatDecisions(Schedule(s, Config{})),
      ElementsAre("place 4 on n1 gpus=4",
                  "wait 3: waiting: user xu's running jobs hold 0.856 GPUs and this job needs "
                  "0.428 more; the user's max-running-gpus is 1"));
}

// Many random clusters of teams with quotas, users and priorities, run pass after pass with every
// decision applied (victims go back to the queue at once) and no job ending, so that only the
// scheduler moves work. Then:
// - no oscillation: once team A reclaimed from team B, B never reclaims from A;
// - every reclaim victim belonged to a team that still holds at least its quota without it, and
//   the reclaimer's team fits in its own quota with the job; so does every victim another team
//   evicts by priority;
// - the cluster comes to rest: passes stop preempting.
TEST(FairShareTest, RandomTeamsNeverReclaimBackAndForth) {
  int reclaims_seen = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    Snapshot s;
    const int nodes = pick(2, 6);
    int capacity = 0;
    for (int n = 0; n < nodes; ++n) {
      const int gpus = pick(2, 8);
      capacity += gpus;
      s.nodes.push_back(MakeNode("n" + std::to_string(n), 64, 256, "V100", gpus));
    }
    const int teams = pick(2, 6);
    std::vector<std::string> users;
    for (int t = 0; t < teams; ++t) {
      TeamView team{.name = "t" + std::to_string(t)};
      if (pick(0, 3) > 0) team.quota["V100"] = pick(1, capacity / teams + 2) * kMilliPerGpu;
      if (pick(0, 2) == 0) team.borrow_limit["V100"] = pick(0, 4) * kMilliPerGpu;
      team.weight = pick(1, 3);
      team.usage = pick(0, 100) * 3600.0;
      s.teams.push_back(team);
      for (int u = pick(1, 3); u > 0; --u) {
        users.push_back("u" + std::to_string(t) + "_" + std::to_string(u));
        s.users.push_back({.name = users.back(), .team = team.name, .usage = pick(0, 50) * 3600.0});
      }
    }
    std::map<std::string, std::string> team_of;
    for (const UserView& u : s.users) team_of[u.name] = u.team;
    std::map<std::string, MilliGpu> quota;
    for (const TeamView& t : s.teams)
      quota[t.name] = t.quota.count("V100") ? t.quota.at("V100") : 0;
    JobId next_id = 1;
    // Work arrives in waves, so that teams that came first borrow and later ones reclaim.
    std::set<std::pair<std::string, std::string>> reclaimed;  // (reclaimer, victim) teams
    Config config;
    config.reclaim_limit = pick(1, 3);
    int quiet = 0;
    for (int round = 0; round < 60; ++round) {
      if (round < 30 && round % 5 == 0) {
        for (int k = pick(2, 12); k > 0; --k) {
          const std::string& user = users[static_cast<size_t>(pick(0, int(users.size()) - 1))];
          JobRequest job =
              UserJob(next_id++, user, "V100:" + std::to_string(pick(1, 4)), pick(0, 2));
          job.submitted_at = s.now;
          s.pending.push_back(job);
        }
      }
      PassResult r = Schedule(s, config);
      ASSERT_THAT(CheckInvariants(s, r), IsEmpty());
      std::map<std::string, MilliGpu> held;
      for (const auto& j_view : s.running) {
        const RunningJob& j = *j_view;
        if (!j.stopping)
          held[team_of[j.user]] += j.per_node.gpu_milli * MilliGpu(j.placement.size());
      }
      for (const PreemptDecision& d : r.preemptions) {
        const JobRequest* preemptor = nullptr;
        for (const JobRequest& j : s.pending) {
          if (j.id == d.preemptor) preemptor = &j;
        }
        ASSERT_NE(preemptor, nullptr);
        const std::string& a = team_of[preemptor->user];
        if (d.reclaim) {
          ++reclaims_seen;
          EXPECT_EQ(a, d.team);
          EXPECT_LE(held[a] + preemptor->per_node.gpu_milli, quota[a]) << "reclaimer over quota";
        }
        for (JobId v : d.victims) {
          const RunningJob* victim = nullptr;
          for (const auto& j_view : s.running) {
            const RunningJob& j = *j_view;
            if (j.id == v) victim = &j;
          }
          ASSERT_NE(victim, nullptr);
          const std::string& b = team_of[victim->user];
          const MilliGpu gpus = victim->per_node.gpu_milli * MilliGpu(victim->placement.size());
          held[b] -= gpus;
          if (a == b) {
            EXPECT_FALSE(d.reclaim) << "job " << v << " reclaimed by its own team";
            continue;
          }
          EXPECT_GE(held[b], quota[b]) << "job " << v << " of " << b << " was not borrowed";
          if (!d.reclaim) continue;
          EXPECT_FALSE(reclaimed.count({b, a}))
              << "team " << a << " reclaims job " << v << " from " << b << ", which reclaimed "
              << "from " << a << " before";
          reclaimed.insert({a, b});
        }
        held[a] += preemptor->per_node.gpu_milli;
      }
      quiet = r.preemptions.empty() ? quiet + 1 : 0;
      Apply(s, r);
      s.now += 20'000;  // a third of the default reclaim window
    }
    EXPECT_GE(quiet, 5) << "still preempting after " << 60 << " passes";
  }
  EXPECT_GT(reclaims_seen, 20);  // the property was put to the test
}

}  // namespace
}  // namespace berth::sched
