// The core's memory tracks live work, not history (issue "Bounded and least-privilege"): nothing
// is kept per submission once its jobs have ended.
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <thread>
#include <variant>
#include <vector>

#include "core_fixture.h"

namespace berth::testing {
namespace {

// 1,000 submissions, each cancelled: the core remembered every one's spec for its lifetime (13 KB
// per finished submission measured through the API). Now it keeps only specs some job still holds,
// and the expired entries are swept once they outnumber the live ones.
TEST_F(CoreTest, SpecsOfEndedSubmissionsAreForgotten) {
  Register("n1", 8);
  int64_t blocker = Submit(Spec(/*cpus=*/8));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", blocker);
  int64_t live = Submit(Spec(/*cpus=*/8));  // waits for the blocker, holding its spec
  for (int i = 0; i < 1000; ++i) {
    int64_t id = Submit(Spec());
    CancelRequest cancel;
    cancel.ids = {id};
    cancel.user = "alice";
    ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  }
  EXPECT_LE(core_->reads().RememberedSpecsForTesting(), 130u);

  // The live job's spec is still at hand: placed once the blocker ended, it is sent with its
  // launch.
  ASSERT_TRUE(Report("n1", {Entry(blocker, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(live).status, JobStatus::kStarting);
  bool spec_sent = false;
  for (const auto& s : channel_.sent()) {
    if (const auto* spec = std::get_if<proto::SpecMessage>(&s.message)) {
      spec_sent |= spec->id == Stored(live).spec_id;
    }
  }
  EXPECT_TRUE(spec_sent);
}

// 500 submissions wait at once, then are cancelled: their entries outlive them until the map has
// doubled again, pinning heap pages (bench/README.md, session 26). The sweep before an idle heap
// trim forgets them; the running job's spec stays.
TEST_F(CoreTest, TheIdleSweepForgetsTheSpecsOfABurst) {
  Register("n1", 8);
  int64_t blocker = Submit(Spec(/*cpus=*/8));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", blocker);
  std::vector<int64_t> burst;
  for (int i = 0; i < 500; ++i) burst.push_back(Submit(Spec()));
  CancelRequest cancel;
  cancel.ids = burst;
  cancel.user = "alice";
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  EXPECT_GT(core_->reads().RememberedSpecsForTesting(), 500u);
  core_->ForgetUnheldSpecs();
  EXPECT_EQ(core_->reads().RememberedSpecsForTesting(), 1u);  // the blocker's
}

// A spec the core forgot is read from the store again when a job needs it (a restart's jobs).
TEST_F(CoreTest, AForgottenSpecIsReadAgainFromTheStore) {
  Register("n1", 8);
  int64_t id = Submit(Spec());
  Restart();
  Register("n1", 8);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(id).status, JobStatus::kStarting);
  EXPECT_GE(core_->reads().RememberedSpecsForTesting(), 1u);
}

}  // namespace
}  // namespace berth::testing

namespace berth::testing {
namespace {

// `cancel --all` of 100,000 jobs was one commit under the state lock (0.8 s, with reports,
// heartbeats and submissions waiting). It is chunked as passes are: 250 jobs in chunks of 100 are
// three commits. A chunk whose commit fails ends the call (Unavailable, saying how many were
// cancelled); the same cancel again does the rest.
TEST_F(CoreTest, CancelAllIsCommittedInChunks) {
  options_.pass_commit_chunk = 100;
  Restart();
  Register("n1", 8);
  SubmitRequest sweep{.spec = Spec(), .user = "alice", .count = 250, .as_group = true};
  ASSERT_TRUE(core_->admission().Submit(std::move(sweep)).ok());
  const int writes = store_->writes();
  CancelRequest all{.all = true, .user = "alice"};
  store_->FailWriteNumber(2);
  auto partial = core_->admission().Cancel(all);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.status().code(), Code::kUnavailable);
  EXPECT_NE(partial.status().message().find("100 job(s) were cancelled"), std::string::npos)
      << partial.status().message();
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  auto rest = core_->admission().Cancel(all);
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  EXPECT_EQ(rest->cancelled.size(), 150u);
  EXPECT_EQ(store_->writes() - writes, 2 + 2);  // two chunks, one failed; then two chunks
  auto rows = store_->inner().ListJobs(JobQuery{.all = true, .limit = 1000});
  ASSERT_TRUE(rows.ok());
  for (const JobRow& row : *rows) EXPECT_EQ(row.status, JobStatus::kCancelled) << row.id;
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// A 50,000-job `cancel --all` stalled requests that take the lock for up to 0.9 s on a busy host:
// between its chunks it took the lock straight back before they woke. Now requests waiting go
// first, so one asked during the cancel waits for a chunk or two, not for all of them. (Counted in
// commits, not timed: each chunk's commit is slowed to 20 ms so that the request surely arrives
// mid-cancel, and both threads share one CPU, the asker at the least priority: as on a busy host,
// a woken waiter does not run before the thread that woke it goes on.)
TEST_F(CoreTest, RequestsGetInBetweenTheChunksOfACancelAll) {
  options_.pass_commit_chunk = 100;
  Restart();
  Register("n1", 8);
  SubmitRequest sweep{.spec = Spec(), .user = "alice", .count = 1500, .as_group = true};
  ASSERT_TRUE(core_->admission().Submit(std::move(sweep)).ok());
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(all), &all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);  // this thread, and the one it starts
  store_->SetWriteDelayMs(20);
  const int before = store_->writes();
  std::thread cancel([&] {
    CancelRequest all{.all = true, .user = "alice"};
    EXPECT_TRUE(core_->admission().Cancel(all).ok());
  });
  while (store_->writes() < before + 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int asked = 0;
  int answered = 0;
  std::thread asker([&] {
    // The least of priorities: woken when the lock is free, it runs only once the canceller
    // sleeps or yields (as a woken waiter on a busy host waits for a CPU).
    sched_param idle{};
    ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle);
    asked = store_->writes();
    EXPECT_EQ(core_->reads().Nodes().size(), 1u);
    answered = store_->writes();
  });
  asker.join();
  cancel.join();
  ::sched_setaffinity(0, sizeof(all), &all);
  store_->SetWriteDelayMs(0);
  EXPECT_EQ(store_->writes() - before, 15) << "fifteen chunks";
  EXPECT_LE(answered - asked, 2) << "the request waited for " << answered - asked << " chunks";
}

// A node gone for good (down past the node retention) is forgotten by memory, and not loaded again
// by a restart; its row stays in the store. The table of nodes was never pruned.
TEST_F(CoreTest, ANodeDownPastItsRetentionIsForgotten) {
  options_.node_retention_ms = 60'000;
  options_.lease_ms = 1'000;
  Restart();
  Register("gone", 8);
  Register("here", 8);
  clock_.Advance(2'000);
  core_->agents().CheckLeases();  // both down: silent for two leases
  Register("here", 8);
  EXPECT_EQ(core_->agents().ForgetGoneNodes(), 0u) << "down for 1 s only";
  clock_.Advance(61'000);
  Register("here", 8);
  EXPECT_EQ(core_->agents().ForgetGoneNodes(), 1u);
  ASSERT_EQ(core_->reads().Nodes().size(), 1u);
  EXPECT_EQ(core_->reads().Nodes().front().row.name, "here");
  EXPECT_FALSE(core_->reads().NodeLastSeen("gone"));
  auto stored = store_->inner().LoadNodes();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 2u) << "kept in the store";
  Restart();
  EXPECT_EQ(core_->reads().Nodes().size(), 1u) << "not loaded again";
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// A node that speaks for any user ('*') could make the core remember a cancel --all epoch for every
// user name it made up. An epoch is kept only while the user has a submission in flight.
TEST_F(CoreTest, CancelEpochsAreKeptOnlyForUsersWithSubmissionsInFlight) {
  Register("n1", 8);
  for (int i = 0; i < 1000; ++i) {
    CancelRequest all{.all = true, .user = "made-up-" + std::to_string(i)};
    ASSERT_TRUE(core_->admission().Cancel(all).ok());
  }
  const std::string state = core_->reads().DebugState();
  EXPECT_EQ(state.find("made-up-"), std::string::npos) << "no epoch kept for a user with nothing";
  // A submission in flight is still caught by its user's cancel --all (core_commit_test holds one
  // in flight across a cancel), and the epoch goes with it.
  Submit(Spec(), "alice");
  CancelRequest all{.all = true, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(all).ok());
  EXPECT_EQ(core_->reads().DebugState().find("alice="), std::string::npos);
}

}  // namespace
}  // namespace berth::testing
