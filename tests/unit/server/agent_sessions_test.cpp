// AgentSessions (server/core/agent_sessions.h): leases on monotonic time, heartbeats, specs sent
// once per session, gang setup failures, re-registration, fenced reports, audited drains, pull
// progress.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "common/json_util.h"
#include "core_fixture.h"
#include "spec/job_spec.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

// Leases run on monotonic time. The wall clock jumps an hour ahead (an NTP step): nothing expires.
// Then 30 s really pass without a heartbeat: the node is down and its job lost.
TEST_F(CoreTest, SteppedWallClockExpiresNoLease) {
  Register("n1");
  int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.StepWall(3'600'000);
  core_->agents().CheckLeases();
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning);
  EXPECT_TRUE(channel_.closes().empty());
  clock_.Advance(options_.lease_ms + 1);
  core_->agents().CheckLeases();
  EXPECT_EQ(Stored(job).status, JobStatus::kLost);
}

// A heartbeat renews the lease for another lease period of monotonic time.
TEST_F(CoreTest, HeartbeatRenewsTheLease) {
  std::string session = Register("n1");
  clock_.Advance(options_.lease_ms - 1);
  ASSERT_TRUE(core_->agents().Heartbeat("n1", session).ok());
  clock_.Advance(options_.lease_ms - 1);
  core_->agents().CheckLeases();
  EXPECT_TRUE(channel_.closes().empty());
  EXPECT_EQ(core_->agents().Heartbeat("n1", "not-the-session").status().code(), Code::kConflict);
}

// A node gets each spec on its watch stream once per session, before the first launch that uses it,
// so that its agent need not fetch it: a sweep of three jobs brings one spec message, a single job
// another. When the node registers again (its agent restarted, and lost what it was sent) the
// launches it no longer has go again, and so do their specs.
TEST_F(CoreTest, ANodeGetsEachSpecOnceASessionBeforeItsFirstLaunch) {
  Register("n1", 8);
  SubmitRequest sweep;
  sweep.spec = Spec();
  sweep.spec.run = "echo sweep";
  sweep.user = "alice";
  sweep.count = 3;
  sweep.as_group = true;
  auto swept = core_->admission().Submit(std::move(sweep));
  ASSERT_TRUE(swept.ok()) << swept.status().message();
  int64_t single = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());

  // Checks what n1 was sent since `from`: four launches, each after the spec it uses, and each spec
  // once. Returns where it ended.
  auto check = [&](size_t from) {
    std::map<int64_t, int> specs_sent;
    int launches = 0;
    auto sent = channel_.sent();
    for (size_t i = from; i < sent.size(); ++i) {
      if (const auto* spec = std::get_if<proto::SpecMessage>(&sent[i].message)) {
        ++specs_sent[spec->id];
        auto parsed = ParseJson(spec->text);
        EXPECT_TRUE(parsed.ok() && SpecFromJson(*parsed).ok()) << spec->text;
      } else if (const auto* launch = std::get_if<proto::LaunchMessage>(&sent[i].message)) {
        ++launches;
        EXPECT_EQ(specs_sent.count(launch->spec_id), 1u) << "job " << launch->job;
      }
    }
    EXPECT_EQ(launches, 4);
    EXPECT_EQ(specs_sent, (std::map<int64_t, int>{{Stored(swept->ids[0]).spec_id, 1},
                                                  {Stored(single).spec_id, 1}}));
    return sent.size();
  };
  size_t end = check(0);
  for (const auto& s : channel_.sent()) {
    const auto* spec = std::get_if<proto::SpecMessage>(&s.message);
    if (spec && spec->id == Stored(swept->ids[0]).spec_id) {
      EXPECT_NE(spec->text.find("echo sweep"), std::string::npos) << spec->text;
    }
  }

  Register("n1", 8);
  check(end);
}

// A 3-node gang: rank 1's setup fails while ranks 0 and 2 still set up. The job ends FAILED_SETUP
// at once, the other ranks are told to stop, and every node's CPUs come back when they report
// their processes gone.
TEST_F(CoreTest, GangWhoseSetupFailsOnOneRankFreesEveryNode) {
  for (const char* n : {"a", "b", "c"}) Register(n, 4);
  int64_t job = Submit(Spec(4, 0, 0, 3));
  ASSERT_TRUE(core_->scheduling().RunPass());
  JobRow row = Stored(job);
  ASSERT_EQ(row.placement.size(), 3u);
  std::map<int, std::string> node_of;
  for (const auto& g : row.placement) node_of[g.rank] = g.node;
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(Report(node_of[rank], {Entry(job, 1, rank, ReportEvent::kSettingUp)}).ok());
  }
  ASSERT_TRUE(Report(node_of[1], {Entry(job, 1, 1, ReportEvent::kExited, 3, "setup")}).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kFailedSetup);
  EXPECT_EQ(channel_.Stops(node_of[0]).size(), 1u);
  EXPECT_EQ(channel_.Stops(node_of[2]).size(), 1u);
  // The devices of a stopping job stay held until every rank is gone.
  int64_t next = Submit(Spec(4));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kPending) << "ranks 0 and 2 are still stopping";
  ASSERT_TRUE(Report(node_of[0], {Entry(job, 1, 0, ReportEvent::kExited, 143, "setup")}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kPending) << "rank 2 is still stopping";
  ASSERT_TRUE(Report(node_of[2], {Entry(job, 1, 2, ReportEvent::kExited, 143, "setup")}).ok());
  int64_t more = Submit(Spec(4));
  int64_t third = Submit(Spec(4));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(more).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(third).status, JobStatus::kStarting) << "all three nodes are free again";
}

// A restarted agent reports what it runs: a launch it never got is sent again; an attempt that is
// not current is told to stop.
TEST_F(CoreTest, ReRegistrationResendsMissingLaunchesAndStopsStaleAttempts) {
  Register("n1");
  int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_EQ(channel_.Launches("n1").size(), 1u);
  Register("n1", 8, 0, {{job + 100, 1, 0}});
  auto launches = channel_.Launches("n1");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].job, job);
  EXPECT_EQ(launches[1].attempt, 1);
  auto stops = channel_.Stops("n1");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].job, job + 100);
}

// Reports name (job, attempt, rank): a report from an earlier attempt is fenced (told to stop).
TEST_F(CoreTest, ReportOfAnEarlierAttemptIsToldToStop) {
  Register("n1");
  int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  auto results = Report("n1", {Entry(job, 7, 0, ReportEvent::kRunning)});
  ASSERT_TRUE(results.ok());
  EXPECT_EQ((*results)[0].action, proto::ReportAction::kStop);
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
}

// Draining is an administrative action: it lands in the audit log with who did it.
TEST_F(CoreTest, DrainIsAudited) {
  Register("n1");
  ASSERT_TRUE(core_->agents().Drain("n1", true, "olga").ok());
  auto audit = store_->ListAudit(10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ(audit->front().by, "olga");
  EXPECT_EQ(audit->front().action, "drain");
  EXPECT_EQ(audit->front().target, "n1");
}

// A container job's pull, as its reason shows it: "pulling image REF" when it starts, then how
// far the download got (each progress report replaces the last, in the job row only: the history
// keeps the start and the end of the pull, not every few seconds of it), then what it resolved to.
// A progress report after that changes nothing. The pull's time does not count toward time_limit.
TEST_F(CoreTest, PullProgressIsTheReasonWhileItLastsAndNotHistory) {
  proto::RegisterRequest node;
  node.name = "n1";
  node.node_id = "node-id-of-n1";
  node.address = "10.0.0.1";
  node.cpus_milli = 8000;
  node.memory_mib = 64 * 1024;
  node.labels[kContainerRuntimeLabel] = "podman";
  auto registered = core_->agents().Register(node, "127.0.0.1");
  ASSERT_TRUE(registered.ok()) << registered.status().message();
  sessions_["n1"] = registered->session;
  JobSpec spec = Spec(1);
  spec.container = ContainerSpec{.image = "reg:5000/bb:1"};
  spec.time_limit = 10'000;
  const int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  auto report = [&](proto::Report r) {
    r.job = job;
    r.attempt = 1;
    auto answer = Report("n1", {proto::ReportEntry{r.id(), r}});
    ASSERT_TRUE(answer.ok()) << answer.status().message();
  };
  const proto::AttemptRank rank{job, 1, 0};
  report(proto::Report::Event(rank, proto::ReportEvent::kAccepted));
  report(proto::Report::Event(rank, proto::ReportEvent::kPulling));
  EXPECT_EQ(Stored(job).reason, "pulling image reg:5000/bb:1");
  const size_t history = store_->GetEvents(job)->size();
  report(proto::Report::PullProgress(rank, "2 layers, 12.5 MB downloaded"));
  report(proto::Report::PullProgress(rank, "2 layers, 40.1 MB downloaded"));
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(job).reason, "pulling image reg:5000/bb:1: 2 layers, 40.1 MB downloaded");
  EXPECT_EQ(store_->GetEvents(job)->size(), history);
  report(proto::Report::Event(rank, proto::ReportEvent::kPulling, "reg:5000/bb@sha256:ab"));
  EXPECT_EQ(Stored(job).reason, "pulled image reg:5000/bb@sha256:ab");
  report(proto::Report::PullProgress(rank, "2 layers, 41 MB downloaded"));
  EXPECT_EQ(Stored(job).reason, "pulled image reg:5000/bb@sha256:ab");
  EXPECT_EQ(store_->GetEvents(job)->back().reason, "pulled image reg:5000/bb@sha256:ab");
  // The pull's time is not running time: a 10 s time_limit counts from RUNNING.
  clock_.Advance(30'000);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
  Run("n1", job);
  clock_.Advance(9'000);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning);
  EXPECT_TRUE(channel_.Stops("n1").empty());
  clock_.Advance(2'000);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(channel_.Stops("n1").size(), 1u) << "the time limit did not stop the job";
}

}  // namespace
}  // namespace berth::testing
