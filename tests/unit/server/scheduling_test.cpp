// Scheduling (server/core/scheduling.h): passes decide without the lock, and their decisions are
// dropped when what they saw changed meanwhile; a pass that decided nothing paces the next.
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

}  // namespace
}  // namespace berth::testing
