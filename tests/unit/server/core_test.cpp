// The core's state machine without HTTP: time, passes racing with changes, group commit, gangs.
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

// Job 1 has a 1-minute time limit. The wall clock jumps two hours: it keeps running. A minute of
// monotonic time later it is stopped, FAILED for its time limit.
TEST_F(CoreTest, TimeLimitsRunOnMonotonicTime) {
  Register("n1");
  JobSpec spec = Spec();
  spec.time_limit = 60'000;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.StepWall(2 * 3'600'000);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning);
  clock_.Advance(60'001);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kFailed);
  EXPECT_NE(Stored(job).reason.find("time limit"), std::string::npos);
  ASSERT_EQ(channel_.Stops("n1").size(), 1u);
}

// Where a user attaches (server/http/terminal_bridges.h): only to a running interactive job, each
// rank on its own node; the refusals say why. A port-forward reaches any running job.
TEST_F(CoreTest, TerminalOfARunningInteractiveJobNamesItsRanksNode) {
  Register("n1");
  Register("n2");
  EXPECT_EQ(core_->reads().TerminalOf(99, 0).status().code(), Code::kNotFound);
  JobSpec batch = Spec();
  int64_t plain = Submit(batch);
  JobSpec spec = Spec(1, 0, 0, 2);
  spec.interactive = true;
  int64_t job = Submit(spec);
  auto waiting = core_->reads().TerminalOf(job, 0);
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), Code::kConflict);
  EXPECT_NE(waiting.status().message().find("PENDING, not RUNNING yet"), std::string::npos)
      << waiting.status().message();
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run(Stored(plain).placement.at(0).node, plain);
  auto refused = core_->reads().TerminalOf(plain, 0);
  EXPECT_EQ(refused.status().code(), Code::kConflict);
  EXPECT_NE(refused.status().message().find("not interactive"), std::string::npos);
  // A port of any running job may be forwarded, interactive or not.
  auto port = core_->reads().PortOf(plain, 0);
  ASSERT_TRUE(port.ok()) << port.status().message();
  EXPECT_EQ(port->node, Stored(plain).placement.at(0).node);
  EXPECT_EQ(core_->reads().PortOf(plain, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(core_->reads().PortOf(99, 0).status().code(), Code::kNotFound);
  const Placement placed = Stored(job).placement;
  ASSERT_EQ(placed.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) Run(placed[rank].node, job, 1, rank);
  for (int rank = 0; rank < 2; ++rank) {
    auto target = core_->reads().TerminalOf(job, rank);
    ASSERT_TRUE(target.ok()) << target.status().message();
    EXPECT_EQ(target->node, placed[rank].node);
    EXPECT_EQ(target->row.user, "alice");
    EXPECT_EQ(target->row.attempt, 1);
  }
  EXPECT_EQ(core_->reads().TerminalOf(job, 2).status().code(), Code::kInvalidArgument);
}

// An interactive job without a time limit gets the server's default; one with its own keeps it,
// and a batch job gets none.
TEST_F(CoreTest, AnInteractiveJobGetsTheDefaultTimeLimit) {
  Register("n1");
  JobSpec shell = Spec();
  shell.interactive = true;
  int64_t defaulted = Submit(shell);
  shell.time_limit = 600'000;
  int64_t own = Submit(shell);
  int64_t batch = Submit(Spec());
  auto limit_of = [&](int64_t job) {
    auto row = core_->reads().ActiveJobRow(job);
    EXPECT_TRUE(row.has_value());
    auto spec = store_->inner().GetSpec(row->first.spec_id);
    EXPECT_TRUE(spec.ok());
    auto parsed = SpecFromJson(json::parse(*spec));
    EXPECT_TRUE(parsed.ok());
    return parsed.ok() ? parsed->time_limit : std::nullopt;
  };
  EXPECT_EQ(limit_of(defaulted), options_.interactive_time_limit_ms);
  EXPECT_EQ(options_.interactive_time_limit_ms, 24 * 3'600'000);
  EXPECT_EQ(limit_of(own), 600'000);
  EXPECT_EQ(limit_of(batch), std::nullopt);
}

// With --interactive-idle-limit 10m, a running interactive job ends once no session was seen for
// 10 minutes: not counting from before it ran, nor from before the caller began to watch (a server
// just started), and a session seen later starts the count again. Batch jobs never end for it.
TEST_F(CoreTest, AnInteractiveJobNobodyAttachesToEndsAfterTheIdleLimit) {
  options_.interactive_idle_limit_ms = 600'000;
  options_.interactive_time_limit_ms = 0;
  Restart();
  Register("n1");
  const int64_t watching_since = clock_.Monotonic();
  JobSpec spec = Spec();
  spec.interactive = true;
  int64_t idle = Submit(spec);
  int64_t attached = Submit(spec);
  int64_t batch = Submit(Spec());
  clock_.Advance(3'600'000);  // an hour pending counts for nothing
  ASSERT_TRUE(core_->scheduling().RunPass());
  for (int64_t job : {idle, attached, batch}) Run("n1", job);
  clock_.Advance(300'000);
  std::map<int64_t, int64_t> seen{{attached, clock_.Monotonic()}};
  clock_.Advance(300'001);
  core_->lifecycle().EndIdleInteractive(seen, watching_since);
  EXPECT_EQ(Stored(idle).status, JobStatus::kFailed);
  EXPECT_NE(Stored(idle).reason.find("idle limit 10m exceeded"), std::string::npos)
      << Stored(idle).reason;
  EXPECT_EQ(Stored(attached).status, JobStatus::kRunning) << "seen 5 minutes ago";
  clock_.Advance(300'000);
  // A server that began to watch a minute ago gives every job the whole limit.
  core_->lifecycle().EndIdleInteractive(seen, clock_.Monotonic() - 60'000);
  EXPECT_EQ(Stored(attached).status, JobStatus::kRunning);
  core_->lifecycle().EndIdleInteractive(seen, watching_since);
  EXPECT_EQ(Stored(attached).status, JobStatus::kFailed);
  EXPECT_EQ(Stored(batch).status, JobStatus::kRunning);
  ASSERT_EQ(channel_.Stops("n1").size(), 2u);
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

// The scheduler decides without the lock. While it decides to place job 1, the user cancels it:
// the decision is dropped (no attempt recorded, nothing launched, nothing held on n1).
TEST_F(CoreTest, PassDropsThePlacementOfAJobCancelledWhileItDecided) {
  Register("n1", 1);
  int64_t job = Submit(Spec(1));
  core_->scheduling().SetPassHookForTesting([&] {
    CancelRequest cancel;
    cancel.ids = {job};
    cancel.user = "alice";
    ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  });
  ASSERT_TRUE(core_->scheduling().RunPass());
  core_->scheduling().SetPassHookForTesting(nullptr);
  EXPECT_EQ(Stored(job).status, JobStatus::kCancelled);
  EXPECT_EQ(Stored(job).attempt, 0);
  EXPECT_TRUE(channel_.Launches().empty());
  // n1's CPU is free: another job takes it.
  int64_t next = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kStarting);
}

// While the scheduler places job 1 on n1, an operator drains n1: the decision is dropped and job 1
// waits (and a new pass is requested to decide again).
TEST_F(CoreTest, PassDropsAPlacementOnANodeDrainedWhileItDecided) {
  Register("n1");
  int64_t job = Submit(Spec());
  core_->scheduling().SetPassHookForTesting(
      [&] { ASSERT_TRUE(core_->agents().Drain("n1", true).ok()); });
  ASSERT_TRUE(core_->scheduling().RunPass());
  core_->scheduling().SetPassHookForTesting(nullptr);
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);
  EXPECT_TRUE(channel_.Launches().empty());
  EXPECT_TRUE(core_->scheduling().WaitForPassRequest(0));
}

// A pass that decides nothing (n1's one GPU held, GPU jobs waiting) paces the next: it starts no
// sooner than three times that pass's length after it ended (CoreOptions::fruitless_pass_pacing),
// and the requests made meanwhile are kept, not lost. A pass that places a job paces nothing, and
// a long fruitless pass paces the next by at most max_pass_pacing_ms.
TEST_F(CoreTest, APassThatDecidedNothingPacesTheNext) {
  Register("n1", 8, 1);
  int64_t held = Submit(Spec(1, 1));
  ASSERT_TRUE(core_->scheduling().WaitForPassRequest(0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(held).status, JobStatus::kStarting);
  int64_t waiting = Submit(Spec(1, 1));
  EXPECT_TRUE(core_->scheduling().WaitForPassRequest(0))
      << "a pass that placed a job paces nothing";

  core_->scheduling().SetPassHookForTesting([&] { clock_.Advance(40); });  // a pass of 40 ms
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(waiting).status, JobStatus::kPending);
  Submit(Spec(1, 1));
  EXPECT_FALSE(core_->scheduling().WaitForPassRequest(0)) << "paced for 3 x 40 ms after the pass";
  clock_.Advance(119);
  EXPECT_FALSE(core_->scheduling().WaitForPassRequest(0));
  clock_.Advance(1);
  EXPECT_TRUE(core_->scheduling().WaitForPassRequest(0))
      << "the request was kept through the pacing";
  EXPECT_FALSE(core_->scheduling().WaitForPassRequest(0)) << "and taken once";
  EXPECT_EQ(core_->metrics().passes.Value({"decided"}), 1);
  EXPECT_EQ(core_->metrics().passes.Value({"nothing"}), 1);

  // A fruitless pass of 10 s paces the next by the cap, 1 s, not 30 s.
  core_->scheduling().SetPassHookForTesting([&] { clock_.Advance(10'000); });
  ASSERT_TRUE(core_->scheduling().RunPass());
  core_->scheduling().SetPassHookForTesting(nullptr);
  core_->scheduling().RequestPass();
  clock_.Advance(options_.max_pass_pacing_ms - 1);
  EXPECT_FALSE(core_->scheduling().WaitForPassRequest(0));
  clock_.Advance(1);
  EXPECT_TRUE(core_->scheduling().WaitForPassRequest(0));

  // While paced, a wait with a timeout sleeps (monotonic time stands still here): it returns
  // false after its timeout, or at once when the core shuts down.
  core_->scheduling().SetPassHookForTesting([&] { clock_.Advance(100); });
  ASSERT_TRUE(core_->scheduling().RunPass());
  core_->scheduling().SetPassHookForTesting(nullptr);
  core_->scheduling().RequestPass();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(core_->scheduling().WaitForPassRequest(30));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_FALSE(core_->scheduling().WaitForPassRequest(60'000));
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  core_->scheduling().RequestPass();  // no wake-up: a request is pending already
  core_->Shutdown();
  waiter.join();
  EXPECT_TRUE(returned);
}

// While the scheduler places job 2 on n1's last free CPU, n1 re-registers with fewer CPUs: the
// decision (made on the old capacity) is dropped.
TEST_F(CoreTest, PassDropsAPlacementOnANodeThatChangedWhileItDecided) {
  Register("n1", 2);
  int64_t job = Submit(Spec(2));
  core_->scheduling().SetPassHookForTesting([&] { Register("n1", 1); });
  ASSERT_TRUE(core_->scheduling().RunPass());
  core_->scheduling().SetPassHookForTesting(nullptr);
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);
}

// A job that finishes on n1 while the scheduler decides frees resources: that does not invalidate
// a placement elsewhere on n1 (freeing never makes a decision unsafe).
TEST_F(CoreTest, PassKeepsAPlacementWhenResourcesWereOnlyFreedMeanwhile) {
  Register("n1", 2);
  int64_t first = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", first);
  int64_t second = Submit(Spec(1));
  core_->scheduling().SetPassHookForTesting(
      [&] { ASSERT_TRUE(Report("n1", {Entry(first, 1, 0, ReportEvent::kExited, 0)}).ok()); });
  ASSERT_TRUE(core_->scheduling().RunPass());
  core_->scheduling().SetPassHookForTesting(nullptr);
  EXPECT_EQ(Stored(second).status, JobStatus::kStarting);
}

// Sixteen users submit while the store's first write is held: the submissions queue behind it and
// are written together in one more transaction (LevelDB's group commit). The write is held, not
// slowed, so the grouping does not depend on the machine's speed.
TEST_F(CoreTest, ConcurrentSubmissionsAreGroupCommitted) {
  Register("n1");
  store_->HoldWrites(true);
  std::vector<std::thread> users;
  std::vector<int64_t> ids(16);
  for (int i = 0; i < 16; ++i) {
    users.emplace_back([&, i] { ids[i] = Submit(Spec(), "user" + std::to_string(i)); });
  }
  while (core_->admission().QueuedSubmissionsForTesting() < 16) std::this_thread::yield();
  const int calls_before = store_->submit_calls();
  store_->HoldWrites(false);
  for (auto& t : users) t.join();
  std::set<int64_t> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), 16u);
  EXPECT_EQ(distinct.count(0), 0u);
  EXPECT_EQ(calls_before, 1);            // the front writer's, held
  EXPECT_EQ(store_->submit_calls(), 2);  // it, then the fifteen queued behind it at once
  for (int64_t id : ids) EXPECT_EQ(Stored(id).status, JobStatus::kPending);
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

// A user cancels only their own jobs: another user's are answered "forbidden" and left alone; an
// operator (cancel_any) may cancel anyone's. Each cancel's event records who asked.
TEST_F(CoreTest, UsersCancelOnlyTheirOwnJobsAndEventsSayWhoDid) {
  Register("n1", 4);
  int64_t alices = Submit(Spec(1), "alice");
  int64_t bobs = Submit(Spec(1), "bob");
  CancelRequest by_bob;
  by_bob.ids = {alices, bobs};
  by_bob.user = "bob";
  auto answer = core_->admission().Cancel(by_bob);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->cancelled, std::vector<int64_t>{bobs});
  EXPECT_EQ(answer->forbidden, std::vector<int64_t>{alices});
  EXPECT_EQ(Stored(alices).status, JobStatus::kPending);
  // --all of a user touches only theirs.
  int64_t alices2 = Submit(Spec(1), "alice");
  CancelRequest all_of_bob;
  all_of_bob.all = true;
  all_of_bob.user = "bob";
  ASSERT_TRUE(core_->admission().Cancel(all_of_bob).ok());
  EXPECT_EQ(Stored(alices2).status, JobStatus::kPending);

  CancelRequest by_operator;
  by_operator.ids = {alices};
  by_operator.user = "olga";
  by_operator.cancel_any = true;
  answer = core_->admission().Cancel(by_operator);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->cancelled, std::vector<int64_t>{alices});
  auto events = store_->GetEvents(alices);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->front().by, "alice");  // submitted by
  EXPECT_EQ(events->back().status, JobStatus::kCancelled);
  EXPECT_EQ(events->back().by, "olga");
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

// Requeue: a user puts their own running job back in the queue (its agent is told to stop it, the
// attempt is recorded, the event says who); another user's is forbidden unless an operator asks;
// a queued job is refused; a failed commit changes nothing.
TEST_F(CoreTest, RequeueIsTheOwnersOrAnOperators) {
  Register("n1", 1);
  int64_t job = Submit(Spec(1), "alice");
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  EXPECT_EQ(core_->admission().Requeue(job, "bob", false).code(), Code::kForbidden);
  std::string before = core_->reads().DebugState();
  store_->FailWrites(1);
  EXPECT_EQ(core_->admission().Requeue(job, "alice", false).code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_TRUE(channel_.Stops("n1").empty());

  ASSERT_TRUE(core_->admission().Requeue(job, "alice", false).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);
  ASSERT_EQ(channel_.Stops("n1").size(), 1u);
  auto events = store_->GetEvents(job);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().by, "alice");
  EXPECT_EQ(events->back().reason, "requeued by alice");
  EXPECT_EQ(core_->admission().Requeue(job, "alice", false).code(),
            Code::kConflict);  // queued already

  int64_t other = Submit(Spec(1), "bob");
  EXPECT_EQ(core_->admission().Requeue(other, "olga", false).code(), Code::kForbidden);
  EXPECT_EQ(core_->admission().Requeue(other, "olga", true).code(),
            Code::kConflict);  // pending: nothing to do
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
