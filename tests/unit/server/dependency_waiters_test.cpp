// DependencyWaiters (server/core/dependency_waiters.h): waiting submissions with their jobs,
// forgotten with their last job; cancellations owed after a failed commit.
#include "server/core/dependency_waiters.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

// A job of submission `spec` leaving or entering the job table (what the waiters watch).
void Gone(DependencyWaiters& waiters, int64_t spec) {
  ActiveJob job;
  job.row.spec_id = spec;
  waiters.Left(job);
}
void Back(DependencyWaiters& waiters, int64_t spec) {
  ActiveJob job;
  job.row.spec_id = spec;
  waiters.Entered(job);
}

// Waits for job 10 to succeed.
std::vector<sched::DepCondition> OkOn10() {
  sched::DepTarget t;
  t.id = 10;
  return {sched::DepCondition{sched::DepKind::kOk, {t}}};
}

TEST(DependencyWaitersTest, AWaiterKeepsItsJobsAndIsForgottenWithTheLast) {
  DependencyWaiters waiters;
  EXPECT_EQ(waiters.Add(5, OkOn10(), {.first = 20, .last = 22, .live = 3}),
            sched::DepState::kWaiting);
  ASSERT_NE(waiters.JobsOf(5), nullptr);
  EXPECT_EQ(waiters.JobsOf(5)->first, 20);
  EXPECT_EQ(waiters.JobsOf(5)->last, 22);
  EXPECT_EQ(waiters.Watching(10, std::nullopt), std::vector<DependencyWaiters::Key>{5});
  Gone(waiters, 5);
  Back(waiters, 5);   // an ended job held again (still stopping after a restart)
  Back(waiters, 99);  // a submission without a waiter: nothing
  EXPECT_EQ(waiters.JobsOf(99), nullptr);
  Gone(waiters, 5);
  Gone(waiters, 5);
  EXPECT_NE(waiters.Find(5), nullptr);
  EXPECT_TRUE(waiters.TakeGone().empty());
  Gone(waiters, 5);  // the last of its three, and the one back
  EXPECT_EQ(waiters.TakeGone(), std::vector<DependencyWaiters::Key>{5});
  EXPECT_EQ(waiters.Find(5), nullptr);
  EXPECT_EQ(waiters.JobsOf(5), nullptr);
  EXPECT_EQ(waiters.size(), 0u);
  EXPECT_TRUE(waiters.Watching(10, std::nullopt).empty());
  Gone(waiters, 5);  // a job of a submission without a waiter
  Gone(waiters, 99);
  EXPECT_TRUE(waiters.TakeGone().empty());
}

TEST(DependencyWaitersTest, AnEndedDependencyMeetsOrFailsTheWaiterAndSaveRestoreUndoesIt) {
  DependencyWaiters waiters;
  waiters.Add(5, OkOn10(), {.first = 20, .last = 20, .live = 1});
  auto saved = waiters.Save(5);
  auto changes = waiters.JobEnded(10, std::nullopt, JobStatus::kFailed);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, sched::DepState::kFailed);
  EXPECT_EQ(waiters.Find(5)->state, sched::DepState::kFailed);
  waiters.Restore(5, saved);  // the change's commit failed
  EXPECT_EQ(waiters.Find(5)->state, sched::DepState::kWaiting);
  changes = waiters.JobEnded(10, std::nullopt, JobStatus::kSucceeded);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, sched::DepState::kMet);
}

TEST(DependencyWaitersTest, CancelRetriesAreKeptUntilDone) {
  DependencyWaiters waiters;
  waiters.RetryCancel(5);
  waiters.RetryCancel(5);
  waiters.RetryCancel(7);
  EXPECT_EQ(waiters.cancel_retries(), (std::set<DependencyWaiters::Key>{5, 7}));
  waiters.CancelRetriesDone();
  EXPECT_TRUE(waiters.cancel_retries().empty());
}

}  // namespace
}  // namespace berth
