// Submissions with an idempotency key (docs/api.md "Idempotency-Key"): the same submission sent
// again by the same user gets the jobs of the first instead of new ones, whether the first is
// recorded before the repeat arrives, is being written while it arrives, was written by the
// server before a restart, or failed to be written.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "core_fixture.h"

namespace berth::testing {
namespace {

Result<SubmitAnswer> SubmitKeyed(Core& core, JobSpec spec, const std::string& key,
                                 const std::string& user = "alice", int count = 1,
                                 bool as_group = false) {
  SubmitRequest r;
  r.spec = std::move(spec);
  r.user = user;
  r.key = key;
  r.count = count;
  r.as_group = as_group;
  return core.admission().Submit(std::move(r));
}

int64_t StoredJobs(FaultyStore& store) {
  auto rows = store.inner().ListJobs(JobQuery{.all = true});
  EXPECT_TRUE(rows.ok());
  return rows.ok() ? static_cast<int64_t>(rows->size()) : -1;
}

TEST_F(CoreTest, RepeatedKeyGetsTheFirstSubmissionsJobs) {
  Register("n1");
  auto first = SubmitKeyed(*core_, Spec(), "k1", "alice", 5, true);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto again = SubmitKeyed(*core_, Spec(), "k1", "alice", 5, true);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->ids, first->ids);
  EXPECT_EQ(again->group, first->group);
  EXPECT_EQ(StoredJobs(*store_), 5);
  EXPECT_EQ(core_->books().JobCountsConsistentForTesting(), true);
  // Another user's same key is another submission; so is a submission without a key.
  auto bobs = SubmitKeyed(*core_, Spec(), "k1", "bob");
  ASSERT_TRUE(bobs.ok());
  EXPECT_EQ(bobs->ids, std::vector<int64_t>{6});
  Submit(Spec());
  EXPECT_EQ(StoredJobs(*store_), 7);
}

TEST_F(CoreTest, KeyReusedForADifferentSubmissionIsAConflict) {
  Register("n1");
  auto first = SubmitKeyed(*core_, Spec(1), "k1");
  ASSERT_TRUE(first.ok());
  auto other = SubmitKeyed(*core_, Spec(2), "k1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), Code::kConflict);
  EXPECT_NE(other.status().message().find("idempotency key 'k1' was used for a different"),
            std::string::npos)
      << other.status().message();
  auto more = SubmitKeyed(*core_, Spec(1), "k1", "alice", 3, true);
  EXPECT_EQ(more.status().code(), Code::kConflict);
  EXPECT_EQ(StoredJobs(*store_), 1);
}

// The answer to a recorded submission is its jobs even where a fresh one would be refused now.
TEST_F(CoreTest, RepeatOfARecordedSubmissionIsAnsweredAfterLimitsChanged) {
  Register("n1");
  auto first = SubmitKeyed(*core_, Spec(), "k", "alice", 2, true);
  ASSERT_TRUE(first.ok());
  UserRow alice;
  alice.name = "alice";
  alice.max_pending_jobs = 2;  // she is at her limit now
  core_->scheduling().SetShareRules({alice}, {});
  EXPECT_EQ(SubmitKeyed(*core_, Spec(), "fresh").status().code(), Code::kForbidden);
  auto again = SubmitKeyed(*core_, Spec(), "k", "alice", 2, true);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->ids, first->ids);
}

// The answer was lost when the server went away: the repeat goes to the server that restarted on
// the same store (or, with PostgreSQL, to the next leader) and finds the jobs.
TEST_F(CoreTest, RepeatAfterARestartFindsTheJobs) {
  Register("n1");
  auto first = SubmitKeyed(*core_, Spec(), "k", "alice", 3, true);
  ASSERT_TRUE(first.ok());
  Restart();
  Register("n1");
  auto again = SubmitKeyed(*core_, Spec(), "k", "alice", 3, true);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->ids, first->ids);
  EXPECT_EQ(StoredJobs(*store_), 3);
}

// A failed write records nothing, the key included: its repeat is written.
TEST_F(CoreTest, RepeatAfterAFailedWriteSubmitsIt) {
  Register("n1");
  store_->FailWrites(1);
  auto failed = SubmitKeyed(*core_, Spec(), "k");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_NE(failed.status().message().find("with the same idempotency key"), std::string::npos)
      << failed.status().message();
  EXPECT_EQ(StoredJobs(*store_), 0);
  auto again = SubmitKeyed(*core_, Spec(), "k");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(StoredJobs(*store_), 1);
  // The key cannot be looked up: refused, nothing written.
  store_->FailReads(true);
  auto unreadable = SubmitKeyed(*core_, Spec(), "k2");
  store_->FailReads(false);
  EXPECT_EQ(unreadable.status().code(), Code::kUnavailable);
  EXPECT_EQ(StoredJobs(*store_), 1);
}

// Repeats that arrive while the first is still being written (a client that timed out and sent it
// again, or sent it to two servers): every one of them gets the same jobs, and they exist once.
TEST_F(CoreTest, ConcurrentRepeatsOfOneKeyMakeOneSubmission) {
  Register("n1");
  store_->HoldWrites(true);  // all twelve are queued before anything is written
  constexpr int kThreads = 12;
  std::vector<std::thread> clients;
  std::vector<Result<SubmitAnswer>> answers(kThreads, Status::Internal("not run"));
  for (int i = 0; i < kThreads; ++i) {
    // Half repeat key "a", half key "b"; all of them at once.
    clients.emplace_back(
        [&, i] { answers[i] = SubmitKeyed(*core_, Spec(), i % 2 ? "a" : "b", "alice", 2, true); });
  }
  while (core_->admission().QueuedSubmissionsForTesting() < kThreads) std::this_thread::yield();
  store_->HoldWrites(false);
  for (auto& t : clients) t.join();
  std::map<std::string, std::vector<int64_t>> ids_of;
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(answers[i].ok()) << answers[i].status().message();
    auto [it, fresh] = ids_of.emplace(i % 2 ? "a" : "b", answers[i]->ids);
    EXPECT_EQ(it->second, answers[i]->ids) << "client " << i;
  }
  EXPECT_NE(ids_of["a"], ids_of["b"]);
  EXPECT_EQ(StoredJobs(*store_), 4);
}

// Two submissions with one key and different bodies, written in one group commit: the second got
// the first's jobs silently. It is refused (409), as it would be once the first is in the store.
// The store's writes are held so that both queue behind a third writer: the group is certain.
TEST_F(CoreTest, OneKeyWithTwoBodiesInOneGroupCommitIsAConflict) {
  Register("n1");
  store_->HoldWrites(true);
  std::thread front(
      [&] { EXPECT_TRUE(core_->admission().Submit({.spec = Spec(), .user = "bob"}).ok()); });
  while (store_->held_writes() < 1) std::this_thread::yield();
  JobSpec other = Spec();
  other.run = "echo other";
  Result<SubmitAnswer> first = Status::Internal("not run");
  Result<SubmitAnswer> second = Status::Internal("not run");
  std::thread a([&] { first = SubmitKeyed(*core_, Spec(), "k"); });
  while (core_->admission().QueuedSubmissionsForTesting() < 2) std::this_thread::yield();
  std::thread b([&] { second = SubmitKeyed(*core_, other, "k"); });
  while (core_->admission().QueuedSubmissionsForTesting() < 3) std::this_thread::yield();
  store_->HoldWrites(false);
  front.join();
  a.join();
  b.join();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kConflict) << second.status().message();
  EXPECT_NE(second.status().message().find("different submission"), std::string::npos);
  EXPECT_EQ(StoredJobs(*store_), 2);
  // Its retry with the same body still gets the first's jobs.
  auto again = SubmitKeyed(*core_, Spec(), "k");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ids, first->ids);
}

// max-pending-jobs was checked when a submission arrived, against jobs already recorded: two that
// arrived together both passed and took the user over the cap. Admitted submissions now count
// until they are recorded.
TEST_F(CoreTest, ConcurrentSubmissionsCannotTogetherExceedMaxPendingJobs) {
  Register("n1");
  UserRow alice{.name = "alice"};
  alice.max_pending_jobs = 3;
  core_->scheduling().SetShareRules({alice}, {});
  store_->HoldWrites(true);
  std::thread front(
      [&] { EXPECT_TRUE(core_->admission().Submit({.spec = Spec(), .user = "bob"}).ok()); });
  while (store_->held_writes() < 1) std::this_thread::yield();
  Result<SubmitAnswer> first = Status::Internal("not run");
  std::thread a(
      [&] { first = core_->admission().Submit({.spec = Spec(), .user = "alice", .count = 2}); });
  while (core_->admission().QueuedSubmissionsForTesting() < 2) std::this_thread::yield();
  // Two of her three are admitted but not yet recorded: two more are over the cap.
  auto over = core_->admission().Submit({.spec = Spec(), .user = "alice", .count = 2});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kForbidden);
  EXPECT_NE(over.status().message().find("has 2 pending"), std::string::npos)
      << over.status().message();
  store_->HoldWrites(false);
  front.join();
  a.join();
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(core_->admission().Submit({.spec = Spec(), .user = "alice", .count = 1}).ok());
  EXPECT_FALSE(core_->admission().Submit({.spec = Spec(), .user = "alice", .count = 1}).ok());
}

}  // namespace
}  // namespace berth::testing
