// The pass index (src/server/core/core_scheduling.cpp): a snapshot is taken from the pending and
// the resource-holding jobs the changes themselves keep filed, not from a walk of every job. Each
// test checks the index against such a walk (the fixture does too, at every test's end) and that
// the scheduler decides on what the jobs really are: a running job it no longer saw could not be
// preempted, and one it still saw after it ended would hold its resources for ever.
#include <gtest/gtest.h>

#include "core_fixture.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

// More changes between two snapshots than there are jobs (a bulk group cancelled while nothing
// else was pending): the index is rebuilt from the jobs rather than the changes remembered, and
// the running job filed before is still a victim the next pass can preempt.
TEST_F(CoreTest, PassIndexRebuiltAfterMoreChangesThanJobsStillSeesTheRunningJob) {
  Register("n1", 8, 2);
  int64_t low = Submit(Spec(1, 2, 0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", low);
  const int rebuilds = core_->books().PassIndexRebuildsForTesting();

  SubmitRequest bulk;
  bulk.spec = Spec(1, 2, 0);
  bulk.user = "bob";
  bulk.count = 3000;
  bulk.as_group = true;
  auto group = core_->admission().Submit(std::move(bulk));
  ASSERT_TRUE(group.ok()) << group.status().message();
  CancelRequest cancel;
  cancel.all = true;
  cancel.user = "bob";
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  ASSERT_TRUE(core_->books().PassIndexConsistentForTesting());
  EXPECT_EQ(core_->books().PassIndexRebuildsForTesting(), rebuilds + 1);

  int64_t high = Submit(Spec(1, 2, 10));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(low).status, JobStatus::kPending)
      << "the running job was not seen: not preempted";
  EXPECT_EQ(Stored(high).status, JobStatus::kStarting);
  EXPECT_TRUE(core_->books().PassIndexConsistentForTesting());
}

// A job that ends leaves the index; its resources are free for the next job at once, and a job
// whose placement was undone by a failed commit is pending again in the index.
TEST_F(CoreTest, PassIndexFollowsEndsAndUndoneCommits) {
  Register("n1", 2);
  int64_t first = Submit(Spec(2));
  int64_t second = Submit(Spec(2));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", first);
  EXPECT_TRUE(core_->books().PassIndexConsistentForTesting());

  ASSERT_TRUE(Report("n1", {Entry(first, 1, 0, ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(Stored(first).status, JobStatus::kSucceeded);
  store_->FailWrites(1);
  EXPECT_FALSE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(second).status, JobStatus::kPending);
  EXPECT_TRUE(core_->books().PassIndexConsistentForTesting());

  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(second).status, JobStatus::kStarting);
  EXPECT_TRUE(core_->books().PassIndexConsistentForTesting());
}

// After a restart the index is built from the loaded jobs: the running job is still preemptible.
TEST_F(CoreTest, PassIndexAfterRestartHoldsTheLoadedRunningJobs) {
  Register("n1", 8, 2);
  int64_t low = Submit(Spec(1, 2, 0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", low);
  Restart();
  Register("n1", 8, 2, {{low, 1, 0}});
  int64_t high = Submit(Spec(1, 2, 10));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(low).status, JobStatus::kPending);
  EXPECT_EQ(Stored(high).status, JobStatus::kStarting);
  EXPECT_TRUE(core_->books().PassIndexConsistentForTesting());
}

// The scheduler thread's copy of the index (pass_mirror.h) is brought up to date by what changed
// since the last pass only: a pass after one more submission takes that submission's jobs under
// the lock, not the queue; after more changes than an eighth of the jobs, all of it.
TEST_F(CoreTest, APassTakesOnlyWhatChangedSinceTheLastOne) {
  Register("n1", 1);
  SubmitRequest bulk;
  bulk.spec = Spec(1);
  bulk.user = "bob";
  bulk.count = 200;
  bulk.as_group = true;
  ASSERT_TRUE(core_->admission().Submit(bulk).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(core_->books().LastPassDeltaForTesting(), std::make_pair(true, size_t{200}))
      << "the first pass takes the whole index";

  int64_t more = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  // The job placed by the first pass (pending, then holding), and the new one.
  EXPECT_EQ(core_->books().LastPassDeltaForTesting(), std::make_pair(false, size_t{2}));
  EXPECT_TRUE(core_->scheduling().MirrorMatchesIndexForTesting());

  CancelRequest cancel;
  cancel.all = true;
  cancel.user = "bob";
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_TRUE(core_->books().LastPassDeltaForTesting().first)
      << "200 changes of 201 jobs: the whole index again";
  EXPECT_EQ(Stored(more).status, JobStatus::kPending) << "the cancelled job still stops on n1";
}

}  // namespace
}  // namespace berth::testing
