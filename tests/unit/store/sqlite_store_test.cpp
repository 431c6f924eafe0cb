// SqliteStore against a real database file in a temp directory per test. Where a test needs to see
// the file as another process would (row counts, user_version, a fault to inject), it opens a
// second, raw connection beside the store's.
#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <set>
#include <thread>

#include "store/schema.h"
#include "store_test_util.h"

namespace berth {
namespace {

using store_test::OpenRaw;
using store_test::QueryInt;
using store_test::TempDir;

constexpr TimeMs kT0 = 1'790'000'000'000;  // some fixed wall time, in ms

Submission MakeSubmission(int count, bool as_group, std::string spec = R"({"run":"train.py"})") {
  Submission s;
  s.spec_json = std::move(spec);
  s.name = "train";
  s.user = "ada";
  s.priority = 5;
  s.num_nodes = 2;
  s.resources =
      ResourceRequest{.cpus = 8000, .memory = 32 * 1024, .gpu_type = "H100", .gpu_milli = 4000};
  s.count = count;
  s.as_group = as_group;
  s.now = kT0;
  return s;
}

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = Open(); }

  std::unique_ptr<Store> Open() {
    Result<std::unique_ptr<Store>> store = OpenSqliteStore(path_);
    EXPECT_TRUE(store.ok()) << store.status().message();
    return store.ok() ? std::move(*store) : nullptr;
  }

  int64_t Count(const std::string& table) {
    std::unique_ptr<SqliteDb> raw = OpenRaw(path_);
    return raw ? QueryInt(*raw, "SELECT COUNT(*) FROM " + table) : -1;
  }

  SubmitResult MustSubmit(const Submission& s) {
    Result<SubmitResult> r = store_->Submit(s);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : SubmitResult{};
  }

  JobRow MustGet(int64_t id) {
    Result<std::vector<JobRow>> jobs = store_->GetJobs({id});
    EXPECT_TRUE(jobs.ok()) << jobs.status().message();
    EXPECT_EQ(jobs.ok() ? jobs->size() : 0, 1u) << "job " << id;
    return jobs.ok() && jobs->size() == 1 ? (*jobs)[0] : JobRow{};
  }

  std::vector<int64_t> ListIds(const JobQuery& q) {
    Result<std::vector<JobRow>> jobs = store_->ListJobs(q);
    EXPECT_TRUE(jobs.ok()) << jobs.status().message();
    std::vector<int64_t> ids;
    if (jobs.ok()) {
      for (const JobRow& j : *jobs) ids.push_back(j.id);
    }
    return ids;
  }

  // Moves job `id` to `status` through Commit, as the server would.
  void SetStatus(int64_t id, JobStatus status) {
    JobRow job = MustGet(id);
    job.status = status;
    Batch batch;
    batch.jobs.push_back(job);
    Status st = store_->Commit(batch);
    ASSERT_TRUE(st.ok()) << st.message();
  }

  TempDir dir_;
  std::string path_ = dir_.File("berth.db");
  std::unique_ptr<Store> store_;
};

// ---- Submit ----

TEST_F(SqliteStoreTest, SubmitOneJobStoresItPendingWithItsFirstEvent) {
  SubmitResult r = MustSubmit(MakeSubmission(1, /*as_group=*/false));
  EXPECT_EQ(r.ids, std::vector<int64_t>({1}));
  EXPECT_FALSE(r.group.has_value());

  JobRow job = MustGet(1);
  EXPECT_EQ(job.spec_id, r.spec_id);
  EXPECT_FALSE(job.group.has_value());
  EXPECT_FALSE(job.rank.has_value());
  EXPECT_EQ(job.name, "train");
  EXPECT_EQ(job.user, "ada");
  EXPECT_EQ(job.priority, 5);
  EXPECT_EQ(job.num_nodes, 2);
  EXPECT_EQ(job.resources, MakeSubmission(1, false).resources);
  EXPECT_EQ(job.status, JobStatus::kPending);
  EXPECT_EQ(job.attempt, 0);
  EXPECT_EQ(job.submitted_at, kT0);
  EXPECT_FALSE(job.started_at.has_value());
  EXPECT_FALSE(job.ended_at.has_value());
  EXPECT_FALSE(job.exit_code.has_value());
  EXPECT_TRUE(job.placement.empty());

  Result<std::vector<JobEvent>> events = store_->GetEvents(1);
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].at, kT0);
  EXPECT_EQ((*events)[0].status, JobStatus::kPending);
  EXPECT_EQ((*events)[0].attempt, 0);
  EXPECT_EQ((*events)[0].reason, "submitted");
}

// A single job (id 1), then a group of 5: ids 2..6, ranks 0..4, one spec row for the whole group.
TEST_F(SqliteStoreTest, SubmitGroupGivesConsecutiveIdsRanksAndOneSpec) {
  MustSubmit(MakeSubmission(1, false, R"({"run":"first"})"));
  SubmitResult r = MustSubmit(MakeSubmission(5, /*as_group=*/true, R"({"run":"sweep"})"));
  EXPECT_EQ(r.ids, std::vector<int64_t>({2, 3, 4, 5, 6}));
  ASSERT_TRUE(r.group.has_value());

  Result<std::vector<JobRow>> jobs = store_->GetJobs(r.ids);
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*jobs)[i].group, r.group);
    EXPECT_EQ((*jobs)[i].rank, i);
    EXPECT_EQ((*jobs)[i].spec_id, r.spec_id);
    EXPECT_EQ((*jobs)[i].status, JobStatus::kPending);
  }

  EXPECT_EQ(Count("specs"), 2);  // one per submission, not one per job
  EXPECT_EQ(Count("groups"), 1);
  EXPECT_EQ(Count("job_events"), 6);
  std::unique_ptr<SqliteDb> raw = OpenRaw(path_);
  EXPECT_EQ(QueryInt(*raw, "SELECT size FROM groups"), 5);
  Result<std::string> spec = store_->GetSpec(r.spec_id);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(*spec, R"({"run":"sweep"})");
}

TEST_F(SqliteStoreTest, SubmitOfNoJobsIsInvalid) {
  Result<SubmitResult> r = store_->Submit(MakeSubmission(0, true));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Count("specs"), 0);
}

TEST_F(SqliteStoreTest, TenThousandJobsInOneSubmit) {
  auto start = std::chrono::steady_clock::now();
  SubmitResult r = MustSubmit(MakeSubmission(10'000, /*as_group=*/true));
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start);
  std::cout << "[          ] Submit of 10,000 jobs: " << ms.count() << " ms\n";

  ASSERT_EQ(r.ids.size(), 10'000u);
  std::vector<int64_t> expected(10'000);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(r.ids, expected);
  EXPECT_EQ(Count("jobs"), 10'000);
  EXPECT_EQ(Count("job_events"), 10'000);
  EXPECT_EQ(Count("specs"), 1);
  EXPECT_EQ(MustGet(10'000).rank, 9'999);
}

// The all-or-nothing property, tested where it matters: the last of 10,000 job inserts fails (a
// trigger added through a second connection plays the fault), after the spec, the group and 9,999
// jobs were written. Nothing of it may remain, not even the consumed AUTOINCREMENT ids.
TEST_F(SqliteStoreTest, FailedSubmitLeavesNothingBehind) {
  std::unique_ptr<SqliteDb> raw = OpenRaw(path_);
  ASSERT_TRUE(raw->Exec("CREATE TRIGGER fail_last BEFORE INSERT ON jobs WHEN NEW.rank = 9999 "
                        "BEGIN SELECT RAISE(ABORT, 'injected fault'); END")
                  .ok());

  Result<SubmitResult> r = store_->Submit(MakeSubmission(10'000, /*as_group=*/true));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("injected fault"), std::string::npos) << r.status().message();
  EXPECT_EQ(Count("specs"), 0);
  EXPECT_EQ(Count("groups"), 0);
  EXPECT_EQ(Count("jobs"), 0);
  EXPECT_EQ(Count("job_events"), 0);

  // The store is still usable, and the ids the failed submit used are handed out again.
  ASSERT_TRUE(raw->Exec("DROP TRIGGER fail_last").ok());
  SubmitResult again = MustSubmit(MakeSubmission(3, true));
  EXPECT_EQ(again.ids, std::vector<int64_t>({1, 2, 3}));
}

TEST_F(SqliteStoreTest, HundredThousandJobsInOneSubmit) {
  SubmitResult r = MustSubmit(MakeSubmission(100'000, /*as_group=*/true));
  ASSERT_EQ(r.ids.size(), 100'000u);
  EXPECT_EQ(r.ids.front(), 1);
  EXPECT_EQ(r.ids.back(), 100'000);
  Result<std::vector<JobRow>> active = store_->LoadActiveJobs();
  ASSERT_TRUE(active.ok()) << active.status().message();
  EXPECT_EQ(active->size(), 100'000u);
}

// Four threads submit at once through one store: every job gets exactly one id and each
// submission's ids stay consecutive (the mutex serializes whole transactions, not statements).
TEST_F(SqliteStoreTest, ConcurrentSubmitsGetDisjointConsecutiveIds) {
  constexpr int kThreads = 4, kSubmits = 25, kJobs = 10;
  std::vector<std::vector<SubmitResult>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSubmits; ++i) {
        Result<SubmitResult> r = store_->Submit(MakeSubmission(kJobs, true));
        if (r.ok()) results[t].push_back(*r);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& per_thread : results) {
    ASSERT_EQ(per_thread.size(), static_cast<size_t>(kSubmits));
    for (const SubmitResult& r : per_thread) {
      ASSERT_EQ(r.ids.size(), static_cast<size_t>(kJobs));
      EXPECT_EQ(r.ids.back() - r.ids.front(), kJobs - 1);
      all.insert(r.ids.begin(), r.ids.end());
    }
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kSubmits * kJobs));
  EXPECT_EQ(*all.rbegin(), kThreads * kSubmits * kJobs);
}

// ---- Commit and persistence ----

// Job 1 is placed on n1 (GPUs 0 and 1) and starts; the server commits the row, two events and the
// attempt in one batch. Closing and reopening the file shows all of it.
TEST_F(SqliteStoreTest, CommitUpdatesJobAndSurvivesReopen) {
  MustSubmit(MakeSubmission(2, true));
  JobRow job = MustGet(1);
  job.status = JobStatus::kRunning;
  job.attempt = 1;
  job.reason = "";
  job.priority = 7;
  job.started_at = kT0 + 2000;
  job.placement = {NodeGrant{.node = "n1", .rank = 0, .gpus = {{0, 1000}, {1, 1000}}},
                   NodeGrant{.node = "n2", .rank = 1, .gpus = {{3, 500}}}};
  Batch batch;
  batch.jobs.push_back(job);
  batch.events.push_back({1, JobEvent{kT0 + 1000, JobStatus::kStarting, 1, "placed"}});
  batch.events.push_back({1, JobEvent{kT0 + 2000, JobStatus::kRunning, 1, ""}});
  batch.attempts.push_back({1, AttemptRow{.attempt = 1,
                                          .placement = job.placement,
                                          .placed_at = kT0 + 1000,
                                          .ended_at = std::nullopt,
                                          .outcome = std::nullopt,
                                          .reason = "",
                                          .exit_code = std::nullopt}});
  Status st = store_->Commit(batch);
  ASSERT_TRUE(st.ok()) << st.message();

  store_.reset();
  store_ = Open();
  ASSERT_NE(store_, nullptr);

  JobRow reread = MustGet(1);
  EXPECT_EQ(reread.status, JobStatus::kRunning);
  EXPECT_EQ(reread.attempt, 1);
  EXPECT_EQ(reread.priority, 7);
  EXPECT_EQ(reread.started_at, kT0 + 2000);
  EXPECT_EQ(reread.placement, job.placement);
  EXPECT_EQ(reread.rank, 0);                          // fixed at submission
  EXPECT_EQ(reread.submitted_at, kT0);                // fixed at submission
  EXPECT_EQ(MustGet(2).status, JobStatus::kPending);  // untouched

  Result<std::vector<JobEvent>> events = store_->GetEvents(1);
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].reason, "submitted");
  EXPECT_EQ((*events)[1].status, JobStatus::kStarting);
  EXPECT_EQ((*events)[1].reason, "placed");
  EXPECT_EQ((*events)[2].status, JobStatus::kRunning);

  Result<std::vector<AttemptRow>> attempts = store_->GetAttempts(1);
  ASSERT_TRUE(attempts.ok()) << attempts.status().message();
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].placement, job.placement);
  EXPECT_FALSE((*attempts)[0].outcome.has_value());
}

// One batch updates job 1 and a job that does not exist: neither lands.
TEST_F(SqliteStoreTest, CommitWithUnknownJobChangesNothing) {
  MustSubmit(MakeSubmission(1, false));
  JobRow job = MustGet(1);
  job.status = JobStatus::kCancelled;
  JobRow ghost = job;
  ghost.id = 42;
  Batch batch;
  batch.jobs = {job, ghost};
  Status st = store_->Commit(batch);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("job 42"), std::string::npos) << st.message();
  EXPECT_EQ(MustGet(1).status, JobStatus::kPending);
}

TEST_F(SqliteStoreTest, EventForUnknownJobFailsTheBatch) {
  Batch batch;
  batch.events.push_back({99, JobEvent{kT0, JobStatus::kCancelled, 0, "user"}});
  Status st = store_->Commit(batch);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("FOREIGN KEY"), std::string::npos) << st.message();
}

// Attempt 1 is placed, then preempted (the same row rewritten), then attempt 2 is placed.
TEST_F(SqliteStoreTest, AttemptsAreUpsertedAndListedInOrder) {
  MustSubmit(MakeSubmission(1, false));
  Placement on_n1 = {NodeGrant{.node = "n1", .rank = 0, .gpus = {{2, 1000}}}};
  Placement on_n2 = {NodeGrant{.node = "n2", .rank = 0, .gpus = {}}};
  AttemptRow first{.attempt = 1, .placement = on_n1, .placed_at = kT0 + 10};
  AttemptRow second{.attempt = 2, .placement = on_n2, .placed_at = kT0 + 50};

  Batch placed;
  placed.attempts = {{1, first}};
  ASSERT_TRUE(store_->Commit(placed).ok());

  first.ended_at = kT0 + 40;
  first.outcome = JobStatus::kPending;  // requeued
  first.reason = "preempted by job 9";
  first.exit_code = 143;
  Batch requeued;
  requeued.attempts = {{1, second}, {1, first}};  // out of order on purpose
  ASSERT_TRUE(store_->Commit(requeued).ok());

  Result<std::vector<AttemptRow>> attempts = store_->GetAttempts(1);
  ASSERT_TRUE(attempts.ok()) << attempts.status().message();
  ASSERT_EQ(attempts->size(), 2u);
  const AttemptRow& a1 = (*attempts)[0];
  EXPECT_EQ(a1.attempt, 1);
  EXPECT_EQ(a1.placement, on_n1);
  EXPECT_EQ(a1.placed_at, kT0 + 10);
  EXPECT_EQ(a1.ended_at, kT0 + 40);
  EXPECT_EQ(a1.outcome, JobStatus::kPending);
  EXPECT_EQ(a1.reason, "preempted by job 9");
  EXPECT_EQ(a1.exit_code, 143);
  const AttemptRow& a2 = (*attempts)[1];
  EXPECT_EQ(a2.attempt, 2);
  EXPECT_EQ(a2.placement, on_n2);
  EXPECT_FALSE(a2.outcome.has_value());
  EXPECT_FALSE(a2.exit_code.has_value());
  EXPECT_EQ(Count("attempts"), 2);
}

// ---- Nodes ----

TEST_F(SqliteStoreTest, NodesRoundTripAndAreReplacedByName) {
  NodeRow b{.name = "b-node",
            .node_id = "secret-b",
            .state = NodeState::kUp,
            .draining = true,
            .pool = "research",
            .labels = {{"rack", "r1"}, {"gpu_gen", "hopper"}},
            .address = "10.0.0.2",
            .cpus = 96'000,
            .memory = 512 * 1024,
            .gpus = {{0, "H100"}, {1, "H100"}},
            .registered_at = kT0,
            .last_seen = kT0 + 5,
            .down_since = std::nullopt};
  NodeRow a{.name = "a-node",
            .node_id = "secret-a",
            .state = NodeState::kDown,
            .address = "10.0.0.1",
            .registered_at = kT0,
            .last_seen = kT0 + 1,
            .down_since = kT0 + 30'000};
  Batch batch;
  batch.nodes = {b, a};
  ASSERT_TRUE(store_->Commit(batch).ok());

  Result<std::vector<NodeRow>> nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  ASSERT_EQ(nodes->size(), 2u);
  const NodeRow& ra = (*nodes)[0];  // by name
  EXPECT_EQ(ra.name, "a-node");
  EXPECT_EQ(ra.state, NodeState::kDown);
  EXPECT_EQ(ra.down_since, kT0 + 30'000);
  EXPECT_TRUE(ra.labels.empty());
  EXPECT_TRUE(ra.gpus.empty());
  const NodeRow& rb = (*nodes)[1];
  EXPECT_EQ(rb.node_id, "secret-b");
  EXPECT_TRUE(rb.draining);
  EXPECT_EQ(rb.pool, "research");
  EXPECT_EQ(rb.labels, b.labels);
  EXPECT_EQ(rb.address, "10.0.0.2");
  EXPECT_EQ(rb.cpus, 96'000);
  EXPECT_EQ(rb.memory, 512 * 1024);
  ASSERT_EQ(rb.gpus.size(), 2u);
  EXPECT_EQ(rb.gpus[1].index, 1);
  EXPECT_EQ(rb.gpus[1].type, "H100");
  EXPECT_EQ(rb.registered_at, kT0);
  EXPECT_EQ(rb.last_seen, kT0 + 5);
  EXPECT_FALSE(rb.down_since.has_value());

  // a-node comes back: same name, new identity, no longer down.
  a.state = NodeState::kUp;
  a.node_id = "secret-a2";
  a.down_since = std::nullopt;
  a.labels = {{"rack", "r2"}};
  Batch back;
  back.nodes = {a};
  ASSERT_TRUE(store_->Commit(back).ok());
  nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].state, NodeState::kUp);
  EXPECT_EQ((*nodes)[0].node_id, "secret-a2");
  EXPECT_FALSE((*nodes)[0].down_since.has_value());
  EXPECT_EQ((*nodes)[0].labels.at("rack"), "r2");
}

// ---- Reads ----

TEST_F(SqliteStoreTest, GetSpecOfUnknownIdIsNotFound) {
  Result<std::string> spec = store_->GetSpec(12345);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), Code::kNotFound);
}

TEST_F(SqliteStoreTest, GetJobsIsAscendingAndSkipsUnknownIds) {
  MustSubmit(MakeSubmission(3, false));
  Result<std::vector<JobRow>> jobs = store_->GetJobs({3, 77, 1, 3});
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, 1);
  EXPECT_EQ((*jobs)[1].id, 3);
  EXPECT_FALSE((*jobs)[1].group.has_value());  // not submitted as a group: no group, no rank
  EXPECT_FALSE((*jobs)[1].rank.has_value());
}

// One job in each status, each moved there by Commit: LoadActiveJobs returns exactly those
// IsTerminal() calls non-terminal, and ListJobs with no limit returns them all.
TEST_F(SqliteStoreTest, LoadActiveJobsAgreesWithIsTerminal) {
  std::vector<JobStatus> all = {
      JobStatus::kPending,   JobStatus::kStarting, JobStatus::kSettingUp,   JobStatus::kRunning,
      JobStatus::kSucceeded, JobStatus::kFailed,   JobStatus::kFailedSetup, JobStatus::kCancelled,
      JobStatus::kLost,      JobStatus::kPreempted};
  SubmitResult r = MustSubmit(MakeSubmission(static_cast<int>(all.size()), false));
  std::vector<int64_t> expected;
  for (size_t i = 0; i < all.size(); ++i) {
    SetStatus(r.ids[i], all[i]);
    if (!IsTerminal(all[i])) expected.push_back(r.ids[i]);
  }
  Result<std::vector<JobRow>> active = store_->LoadActiveJobs();
  ASSERT_TRUE(active.ok()) << active.status().message();
  std::vector<int64_t> ids;
  for (const JobRow& j : *active) ids.push_back(j.id);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(ListIds({.all = false, .limit = 0}).size(), all.size());
}

// Jobs 1..5 are singles, 6..10 one group. Finished: 1, 2, 3, 5 (singles) and 6, 8 (group). Active:
// 4, 7, 9, 10.
class ListJobsTest : public SqliteStoreTest {
 protected:
  void SetUp() override {
    SqliteStoreTest::SetUp();
    MustSubmit(MakeSubmission(5, false));
    group_ = *MustSubmit(MakeSubmission(5, true)).group;
    SetStatus(1, JobStatus::kSucceeded);
    SetStatus(2, JobStatus::kFailed);
    SetStatus(3, JobStatus::kCancelled);
    SetStatus(5, JobStatus::kSucceeded);
    SetStatus(6, JobStatus::kLost);
    SetStatus(8, JobStatus::kSucceeded);
    SetStatus(7, JobStatus::kRunning);
  }
  int64_t group_ = 0;
};

TEST_F(ListJobsTest, ActivePlusNewestFinished) {
  // Active 10, 9, 7, 4 all; finished newest two: 8, 6.
  EXPECT_EQ(ListIds({.all = false, .limit = 2}), std::vector<int64_t>({10, 9, 8, 7, 6, 4}));
  // limit 0: every finished job too.
  EXPECT_EQ(ListIds({.all = false, .limit = 0}),
            std::vector<int64_t>({10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
}

TEST_F(ListJobsTest, AllAppliesLimitToTheWholeListing) {
  EXPECT_EQ(ListIds({.all = true, .limit = 3}), std::vector<int64_t>({10, 9, 8}));
  EXPECT_EQ(ListIds({.all = true, .limit = 0}).size(), 10u);
}

TEST_F(ListJobsTest, GroupFilter) {
  // Group: active 10, 9, 7; finished 8, 6 of which the newest one is kept.
  EXPECT_EQ(ListIds({.all = false, .limit = 1, .group = group_}),
            std::vector<int64_t>({10, 9, 8, 7}));
  EXPECT_EQ(ListIds({.all = true, .limit = 0, .group = group_}),
            std::vector<int64_t>({10, 9, 8, 7, 6}));
  EXPECT_TRUE(ListIds({.all = true, .group = group_ + 1}).empty());
}

TEST_F(ListJobsTest, BeforeIdPages) {
  // Below 7: active 4; finished 6, 5, 3, 2, 1 of which the newest one is kept.
  EXPECT_EQ(ListIds({.all = false, .limit = 1, .before_id = 7}), std::vector<int64_t>({6, 4}));
  // Pages of 4 through everything: 10..7, 6..3, 2..1.
  EXPECT_EQ(ListIds({.all = true, .limit = 4}), std::vector<int64_t>({10, 9, 8, 7}));
  EXPECT_EQ(ListIds({.all = true, .limit = 4, .before_id = 7}), std::vector<int64_t>({6, 5, 4, 3}));
  EXPECT_EQ(ListIds({.all = true, .limit = 4, .before_id = 3}), std::vector<int64_t>({2, 1}));
  // Group and page together.
  EXPECT_EQ(ListIds({.all = true, .limit = 0, .group = group_, .before_id = 8}),
            std::vector<int64_t>({7, 6}));
}

TEST_F(ListJobsTest, NegativeLimitIsInvalid) {
  Result<std::vector<JobRow>> jobs = store_->ListJobs({.limit = -1});
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), Code::kInvalidArgument);
}

// ---- Schema and durability ----

TEST_F(SqliteStoreTest, ReopenKeepsSchemaVersionAndWal) {
  MustSubmit(MakeSubmission(1, false));
  for (int i = 0; i < 2; ++i) {
    store_.reset();
    store_ = Open();
    ASSERT_NE(store_, nullptr);
  }
  std::unique_ptr<SqliteDb> raw = OpenRaw(path_);
  EXPECT_EQ(QueryInt(*raw, "PRAGMA user_version"), kSchemaVersion);
  Result<std::string> mode = raw->QueryText("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(*mode, "wal");
  EXPECT_EQ(Count("jobs"), 1);
}

TEST_F(SqliteStoreTest, NewerSchemaIsRefused) {
  store_.reset();
  {
    std::unique_ptr<SqliteDb> raw = OpenRaw(path_);
    ASSERT_TRUE(raw->Exec("PRAGMA user_version = 99").ok());
  }
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("version 99"), std::string::npos)
      << store.status().message();
}

TEST(SqliteStoreOpenTest, UnopenablePathIsAnError) {
  Result<std::unique_ptr<Store>> store = OpenSqliteStore("/nonexistent-berth-dir/berth.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("unable to open database file"), std::string::npos)
      << store.status().message();
}

// A child process submits three jobs, starts one, and is killed with SIGKILL before it can close
// anything. Its commits are only in the WAL file; the next open must replay them.
TEST(SqliteStoreCrashTest, CommittedWorkSurvivesKill9) {
  TempDir dir;
  const std::string path = dir.File("berth.db");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Result<std::unique_ptr<Store>> store = OpenSqliteStore(path);
    if (!store.ok()) _exit(1);
    if (!(*store)->Submit(MakeSubmission(3, true)).ok()) _exit(2);
    Result<std::vector<JobRow>> jobs = (*store)->GetJobs({2});
    if (!jobs.ok() || jobs->size() != 1) _exit(3);
    Batch batch;
    batch.jobs.push_back((*jobs)[0]);
    batch.jobs[0].status = JobStatus::kRunning;
    if (!(*store)->Commit(batch).ok()) _exit(4);
    kill(getpid(), SIGKILL);
    _exit(5);  // not reached
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
  ASSERT_EQ(WTERMSIG(wstatus), SIGKILL);
  ASSERT_GT(std::filesystem::file_size(path + "-wal"), 0u) << "the commits should be in the WAL";

  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::vector<JobRow>> jobs = (*store)->GetJobs({1, 2, 3});
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].status, JobStatus::kPending);
  EXPECT_EQ((*jobs)[1].status, JobStatus::kRunning);
}

}  // namespace
}  // namespace berth
