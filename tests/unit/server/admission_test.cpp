// Admission (server/core/admission.h): group commit of submissions, who may cancel and requeue.
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

}  // namespace
}  // namespace berth::testing
