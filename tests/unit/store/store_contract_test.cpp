// The Store contract, one suite run against every backend: SQLite (a database file in a temp dir
// per test) and PostgreSQL (a database of its own per test on a real server,
// tests/support/pg_test_server.h). What only one backend does (SQLite's schema versions and WAL, a
// PostgreSQL server going away) is tested in sqlite_store_test.cpp and pg_store_test.cpp.
//
// Where a test needs to see the database as another process would (row counts, a fault to
// inject), it goes through a second, raw connection beside the store's: QueryInt, QueryRows and
// ExecRaw. Their SQL is written to mean the same on both backends ("user" quoted, a derived table
// named); where the two cannot share it (a trigger that raises), the test branches on pg().
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "fakes/faulty_store.h"
#include "store/pg.h"
#include "store/pg_store.h"
#include "store/store.h"
#include "store_test_util.h"
#include "support/pg_test_server.h"

namespace berth {
namespace {

using namespace store_test;  // NOLINT: the shared times, submissions and usage records
using testing::PgTestDatabase;

enum class Backend { kSqlite, kPostgres };

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kSqlite ? "Sqlite" : "Postgres";
}

// For gtest's messages ("where GetParam() = Postgres").
void PrintTo(Backend backend, std::ostream* os) {
  *os << (backend == Backend::kSqlite ? "Sqlite" : "Postgres");
}

// Whether `text` contains `part`, ignoring ASCII case (the backends word their errors differently:
// SQLite's "FOREIGN KEY constraint failed", PostgreSQL's "violates foreign key constraint").
bool ContainsNoCase(std::string text, std::string part) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  return lower(std::move(text)).find(lower(std::move(part))) != std::string::npos;
}

class StoreContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (pg()) {
      Result<std::unique_ptr<PgTestDatabase>> db = PgTestDatabase::Create();
      ASSERT_TRUE(db.ok()) << db.status().message();
      pg_db_ = std::move(*db);
    }
    store_ = Open();
    ASSERT_NE(store_, nullptr);
  }

  bool pg() const { return GetParam() == Backend::kPostgres; }

  // Opens (or opens again) this test's store: the SQLite file, or the test's PostgreSQL database.
  std::unique_ptr<Store> Open() {
    Result<std::unique_ptr<Store>> store =
        pg() ? OpenPgStore(pg_db_->uri()) : OpenSqliteStore(path_);
    EXPECT_TRUE(store.ok()) << store.status().message();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Runs `sql` (no rows) on the raw connection; for faults to inject.
  Status ExecRaw(const std::string& sql) {
    if (pg()) {
      PgConn* raw = RawPg();
      return raw != nullptr ? raw->Exec(sql) : Status::Internal("no raw connection");
    }
    SqliteDb* raw = RawSqlite();
    return raw != nullptr ? raw->Exec(sql) : Status::Internal("no raw connection");
  }

  // The single integer `sql` returns on the raw connection, or -1 (and a test failure).
  int64_t QueryInt(const std::string& sql) {
    std::vector<std::vector<std::string>> rows = QueryRows(sql, 1);
    if (rows.size() != 1 || rows[0].size() != 1) {
      ADD_FAILURE() << sql << ": expected one value, got " << rows.size() << " rows";
      return -1;
    }
    int64_t v = 0;
    const std::string& text = rows[0][0];
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      ADD_FAILURE() << sql << ": not an integer: \"" << text << "\"";
      return -1;
    }
    return v;
  }

  // Every row `sql` returns on the raw connection, its first `columns` values as text ("" for
  // NULL); a failure fails the test.
  std::vector<std::vector<std::string>> QueryRows(const std::string& sql, int columns) {
    std::vector<std::vector<std::string>> rows;
    if (pg()) {
      PgConn* raw = RawPg();
      if (raw == nullptr) return rows;
      Result<PgResult> result = raw->Query(sql);
      EXPECT_TRUE(result.ok()) << sql << ": " << result.status().message();
      if (!result.ok()) return rows;
      for (int r = 0; r < result->rows(); ++r) {
        rows.emplace_back();
        for (int c = 0; c < columns; ++c) rows.back().push_back(result->Text(r, c));
      }
      return rows;
    }
    SqliteDb* raw = RawSqlite();
    if (raw == nullptr) return rows;
    Result<Statement> s = raw->Prepare(sql);
    EXPECT_TRUE(s.ok()) << sql << ": " << s.status().message();
    if (!s.ok()) return rows;
    for (;;) {
      Result<bool> row = s->Step();
      EXPECT_TRUE(row.ok()) << sql << ": " << row.status().message();
      if (!row.ok() || !*row) break;
      rows.emplace_back();
      for (int c = 0; c < columns; ++c) rows.back().push_back(s->Text(c));
    }
    return rows;
  }

  int64_t Count(const std::string& table) { return QueryInt("SELECT COUNT(*) FROM " + table); }

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

  void MustCommit(const Batch& batch) {
    Status st = store_->Commit(batch);
    ASSERT_TRUE(st.ok()) << st.message();
  }

  std::vector<UsageRow> MustQueryUsage(TimeMs since, TimeMs until, bool by_team = false) {
    Result<std::vector<UsageRow>> rows =
        store_->QueryUsage({.since = since, .until = until, .by_team = by_team});
    EXPECT_TRUE(rows.ok()) << rows.status().message();
    return rows.ok() ? *rows : std::vector<UsageRow>{};
  }

  std::vector<UsageBucket> MustLoadBuckets(TimeMs since) {
    Result<std::vector<UsageBucket>> buckets = store_->LoadUsageBuckets(since);
    EXPECT_TRUE(buckets.ok()) << buckets.status().message();
    return buckets.ok() ? *buckets : std::vector<UsageBucket>{};
  }

 private:
  // The raw connections, opened at first use and kept for the test.
  SqliteDb* RawSqlite() {
    if (raw_sqlite_ == nullptr) raw_sqlite_ = OpenRaw(path_);
    return raw_sqlite_.get();
  }
  PgConn* RawPg() {
    if (raw_pg_ == nullptr) {
      Result<std::unique_ptr<PgConn>> conn = PgConn::Connect(pg_db_->uri());
      if (!conn.ok()) {
        ADD_FAILURE() << conn.status().message();
        return nullptr;
      }
      raw_pg_ = std::move(*conn);
    }
    return raw_pg_.get();
  }

  TempDir dir_;
  std::string path_ = dir_.File("berth.db");
  // Declared before the store and the raw connections, so that they close before it is dropped.
  std::unique_ptr<PgTestDatabase> pg_db_;
  std::unique_ptr<SqliteDb> raw_sqlite_;
  std::unique_ptr<PgConn> raw_pg_;

 protected:
  std::unique_ptr<Store> store_;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreContractTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

// ---- Submit ----

TEST_P(StoreContractTest, SubmitOneJobStoresItPendingWithItsFirstEvent) {
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
TEST_P(StoreContractTest, SubmitGroupGivesConsecutiveIdsRanksAndOneSpec) {
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
  EXPECT_EQ(QueryInt("SELECT size FROM groups"), 5);
  Result<std::string> spec = store_->GetSpec(r.spec_id);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(*spec, R"({"run":"sweep"})");
}

TEST_P(StoreContractTest, SubmitOfNoJobsIsInvalid) {
  Result<SubmitResult> r = store_->Submit(MakeSubmission(0, true));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Count("specs"), 0);
}

TEST_P(StoreContractTest, TenThousandJobsInOneSubmit) {
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
// jobs were written. Nothing of it may remain, not even the consumed job ids (SQLite's
// AUTOINCREMENT, PostgreSQL's id counter).
TEST_P(StoreContractTest, FailedSubmitLeavesNothingBehind) {
  Status trigger = pg() ? ExecRaw(
                              "CREATE FUNCTION fail_last() RETURNS trigger LANGUAGE plpgsql AS "
                              "$$ BEGIN RAISE EXCEPTION 'injected fault'; END $$; "
                              "CREATE TRIGGER fail_last BEFORE INSERT ON jobs FOR EACH ROW "
                              "WHEN (NEW.rank = 9999) EXECUTE FUNCTION fail_last()")
                        : ExecRaw(
                              "CREATE TRIGGER fail_last BEFORE INSERT ON jobs WHEN NEW.rank = 9999 "
                              "BEGIN SELECT RAISE(ABORT, 'injected fault'); END");
  ASSERT_TRUE(trigger.ok()) << trigger.message();

  Result<SubmitResult> r = store_->Submit(MakeSubmission(10'000, /*as_group=*/true));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("injected fault"), std::string::npos) << r.status().message();
  EXPECT_EQ(Count("specs"), 0);
  EXPECT_EQ(Count("groups"), 0);
  EXPECT_EQ(Count("jobs"), 0);
  EXPECT_EQ(Count("job_events"), 0);

  // The store is still usable, and the ids the failed submit used are handed out again.
  ASSERT_TRUE(ExecRaw(pg() ? "DROP TRIGGER fail_last ON jobs" : "DROP TRIGGER fail_last").ok());
  SubmitResult again = MustSubmit(MakeSubmission(3, true));
  EXPECT_EQ(again.ids, std::vector<int64_t>({1, 2, 3}));
}

TEST_P(StoreContractTest, HundredThousandJobsInOneSubmit) {
  SubmitResult r = MustSubmit(MakeSubmission(100'000, /*as_group=*/true));
  ASSERT_EQ(r.ids.size(), 100'000u);
  EXPECT_EQ(r.ids.front(), 1);
  EXPECT_EQ(r.ids.back(), 100'000);
  Result<std::vector<JobRow>> active = store_->LoadActiveJobs();
  ASSERT_TRUE(active.ok()) << active.status().message();
  EXPECT_EQ(active->size(), 100'000u);
}

// ---- Idempotency keys ----

// A keyed submission is found again by (user, key) with exactly its result; an unknown key, or the
// same key of another user, finds nothing.
TEST_P(StoreContractTest, KeyedSubmissionIsFoundByUserAndKey) {
  MustSubmit(MakeSubmission(2, /*as_group=*/false));
  Submission keyed = MakeSubmission(5, /*as_group=*/true);
  keyed.key = "k-1";
  keyed.fingerprint = "fp";
  SubmitResult r = MustSubmit(keyed);
  Result<std::optional<KeyedSubmission>> found = store_->FindSubmission("ada", "k-1");
  ASSERT_TRUE(found.ok()) << found.status().message();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->fingerprint, "fp");
  EXPECT_EQ((*found)->result.ids, r.ids);
  EXPECT_EQ((*found)->result.group, r.group);
  EXPECT_EQ((*found)->result.spec_id, r.spec_id);

  Submission single = MakeSubmission(1, /*as_group=*/false);
  single.key = "k-2";
  SubmitResult one = MustSubmit(single);
  found = store_->FindSubmission("ada", "k-2");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->result.ids, one.ids);
  EXPECT_FALSE((*found)->result.group.has_value());

  for (auto [user, key] : {std::pair{"ada", "k-3"}, std::pair{"bob", "k-1"}}) {
    found = store_->FindSubmission(user, key);
    ASSERT_TRUE(found.ok()) << found.status().message();
    EXPECT_FALSE(found->has_value()) << user << " " << key;
  }
}

// The same (user, key) twice fails the second submission's whole transaction: nothing of it, or
// of the others committed with it, is written.
TEST_P(StoreContractTest, ReusedKeyFailsItsWholeTransaction) {
  Submission first = MakeSubmission(1, false);
  first.key = "k";
  MustSubmit(first);
  Submission other = MakeSubmission(3, true);
  Submission again = MakeSubmission(1, false);
  again.key = "k";
  Result<std::vector<SubmitResult>> r = store_->SubmitMany({other, again});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(Count("jobs"), 1);
  EXPECT_EQ(Count("specs"), 1);
  EXPECT_EQ(Count("submit_keys"), 1);
  // Another user may use the same key.
  Submission theirs = MakeSubmission(1, false);
  theirs.user = "bob";
  theirs.key = "k";
  MustSubmit(theirs);
  EXPECT_EQ(Count("submit_keys"), 2);
}

// Keys are kept kSubmitKeyRetentionMs: a keyed submission deletes the keys older than that.
TEST_P(StoreContractTest, ExpiredKeysAreDeletedByLaterKeyedSubmissions) {
  Submission old = MakeSubmission(1, false);
  old.key = "old";
  MustSubmit(old);
  Submission recent = MakeSubmission(1, false);
  recent.key = "recent";
  recent.now = kT0 + kSubmitKeyRetentionMs / 2;
  MustSubmit(recent);
  Submission later = MakeSubmission(1, false);
  later.key = "later";
  later.now = kT0 + kSubmitKeyRetentionMs + 1;
  MustSubmit(later);
  EXPECT_EQ(Count("submit_keys"), 2);
  Result<std::optional<KeyedSubmission>> found = store_->FindSubmission("ada", "old");
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  found = store_->FindSubmission("ada", "recent");
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->has_value());
}

// Four threads submit at once through one store: every job gets exactly one id and each
// submission's ids stay consecutive (the mutex serializes whole transactions, not statements).
TEST_P(StoreContractTest, ConcurrentSubmitsGetDisjointConsecutiveIds) {
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

// `berth queue`'s summary: a group's jobs counted per status; finished jobs only, or ungrouped
// only.
TEST_P(StoreContractTest, GroupStatusCountsAndFinishedOrUngroupedListings) {
  MustSubmit(MakeSubmission(1, false));                  // job 1
  SubmitResult g = MustSubmit(MakeSubmission(4, true));  // jobs 2..5
  MustSubmit(MakeSubmission(1, false));                  // job 6
  Batch batch;
  for (int64_t id : {2, 3, 6}) {
    JobRow job = MustGet(id);
    job.status = id == 3 ? JobStatus::kFailed : JobStatus::kSucceeded;
    job.ended_at = kT0 + 1000;
    batch.jobs.push_back(job);
  }
  MustCommit(batch);
  auto counts = store_->GroupStatusCounts({*g.group, 999});
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  EXPECT_EQ((*counts)[*g.group],
            (std::map<JobStatus, int>{
                {JobStatus::kPending, 2}, {JobStatus::kSucceeded, 1}, {JobStatus::kFailed, 1}}));
  EXPECT_TRUE((*counts)[999].empty());  // no such group: no jobs

  auto ids = [&](const JobQuery& q) {
    std::vector<int64_t> out;
    auto rows = store_->ListJobs(q);
    EXPECT_TRUE(rows.ok()) << rows.status().message();
    if (rows.ok()) {
      for (const JobRow& r : *rows) out.push_back(r.id);
    }
    return out;
  };
  EXPECT_EQ(ids({.limit = 2, .finished_only = true}), (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(ids({.limit = 0, .finished_only = true, .ungrouped_only = true}),
            (std::vector<int64_t>{6}));
  EXPECT_EQ(ids({.limit = 0, .ungrouped_only = true}), (std::vector<int64_t>{6, 1}));
}

// Job 1 is placed on n1 (GPUs 0 and 1) and starts; the server commits the row, two events and the
// attempt in one batch. Closing and reopening the file shows all of it.
TEST_P(StoreContractTest, CommitUpdatesJobAndSurvivesReopen) {
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
TEST_P(StoreContractTest, CommitWithUnknownJobChangesNothing) {
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

TEST_P(StoreContractTest, EventForUnknownJobFailsTheBatch) {
  Batch batch;
  batch.events.push_back({99, JobEvent{kT0, JobStatus::kCancelled, 0, "user"}});
  Status st = store_->Commit(batch);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(ContainsNoCase(st.message(), "FOREIGN KEY")) << st.message();
}

// Attempt 1 is placed, then preempted (the same row rewritten), then attempt 2 is placed.
TEST_P(StoreContractTest, AttemptsAreUpsertedAndListedInOrder) {
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
  first.peak_memory_bytes = 123'456'789'012;
  first.cpu_ms = 4'500;
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
  EXPECT_EQ(a1.peak_memory_bytes, 123'456'789'012);
  EXPECT_EQ(a1.cpu_ms, 4'500);
  const AttemptRow& a2 = (*attempts)[1];
  EXPECT_EQ(a2.attempt, 2);
  EXPECT_EQ(a2.placement, on_n2);
  EXPECT_FALSE(a2.outcome.has_value());
  EXPECT_FALSE(a2.exit_code.has_value());
  EXPECT_FALSE(a2.peak_memory_bytes.has_value());
  EXPECT_FALSE(a2.cpu_ms.has_value());
  EXPECT_EQ(Count("attempts"), 2);
}

// ---- Nodes ----

TEST_P(StoreContractTest, NodesRoundTripAndAreReplacedByName) {
  NodeRow b{.name = "b-node",
            .node_id = "secret-b",
            .state = NodeState::kUp,
            .draining = true,
            .pool = "research",
            .labels = {{"rack", "r1"}, {"gpu_gen", "hopper"}},
            .address = "10.0.0.2",
            .cpus = 96'000,
            .memory = 512 * 1024,
            .gpus = {{0, "H100"}, {1, "H100"}, {200, "H100-3g.40gb", 1}},
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
  EXPECT_EQ(rb.gpus, b.gpus);  // a MIG slice with its GPU
  EXPECT_EQ(rb.gpus[1].parent, -1);
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

TEST_P(StoreContractTest, GetSpecOfUnknownIdIsNotFound) {
  Result<std::string> spec = store_->GetSpec(12345);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), Code::kNotFound);
}

TEST_P(StoreContractTest, GetJobsIsAscendingAndSkipsUnknownIds) {
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
TEST_P(StoreContractTest, LoadActiveJobsAgreesWithIsTerminal) {
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

// Every transition of `active` through Commit: active -> active (the common update, which SQLite
// writes without touching the activity index), active -> finished, finished -> active again, and
// finished -> finished; LoadActiveJobs and the listing agree with IsTerminal after each.
TEST_P(StoreContractTest, ActiveFollowsEveryStatusChange) {
  SubmitResult r = MustSubmit(MakeSubmission(1, false));
  const int64_t id = r.ids[0];
  auto active_ids = [&] {
    Result<std::vector<JobRow>> active = store_->LoadActiveJobs();
    EXPECT_TRUE(active.ok()) << active.status().message();
    std::vector<int64_t> ids;
    if (active.ok()) {
      for (const JobRow& j : *active) ids.push_back(j.id);
    }
    return ids;
  };
  for (JobStatus status : {JobStatus::kRunning, JobStatus::kSucceeded, JobStatus::kPending,
                           JobStatus::kStarting, JobStatus::kCancelled, JobStatus::kFailed}) {
    SetStatus(id, status);
    const bool active = !IsTerminal(status);
    EXPECT_EQ(active_ids(), active ? std::vector<int64_t>{id} : std::vector<int64_t>{})
        << JobStatusName(status);
    EXPECT_EQ(ListIds({.all = false, .limit = 0, .finished_only = true}).size(), active ? 0u : 1u)
        << JobStatusName(status);
    Result<std::vector<JobRow>> row = store_->GetJobs({id});
    ASSERT_TRUE(row.ok() && row->size() == 1);
    EXPECT_EQ((*row)[0].status, status);
  }
}

// Jobs 1..5 are singles, 6..10 one group. Finished: 1, 2, 3, 5 (singles) and 6, 8 (group). Active:
// 4, 7, 9, 10.
class ListJobsTest : public StoreContractTest {
 protected:
  void SetUp() override {
    StoreContractTest::SetUp();
    if (HasFatalFailure()) return;
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

INSTANTIATE_TEST_SUITE_P(Backends, ListJobsTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

TEST_P(ListJobsTest, ActivePlusNewestFinished) {
  // Active 10, 9, 7, 4 all; finished newest two: 8, 6.
  EXPECT_EQ(ListIds({.all = false, .limit = 2}), std::vector<int64_t>({10, 9, 8, 7, 6, 4}));
  // limit 0: every finished job too.
  EXPECT_EQ(ListIds({.all = false, .limit = 0}),
            std::vector<int64_t>({10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
}

TEST_P(ListJobsTest, AllAppliesLimitToTheWholeListing) {
  EXPECT_EQ(ListIds({.all = true, .limit = 3}), std::vector<int64_t>({10, 9, 8}));
  EXPECT_EQ(ListIds({.all = true, .limit = 0}).size(), 10u);
}

TEST_P(ListJobsTest, GroupFilter) {
  // Group: active 10, 9, 7; finished 8, 6 of which the newest one is kept.
  EXPECT_EQ(ListIds({.all = false, .limit = 1, .group = group_}),
            std::vector<int64_t>({10, 9, 8, 7}));
  EXPECT_EQ(ListIds({.all = true, .limit = 0, .group = group_}),
            std::vector<int64_t>({10, 9, 8, 7, 6}));
  EXPECT_TRUE(ListIds({.all = true, .group = group_ + 1}).empty());
}

TEST_P(ListJobsTest, BeforeIdPages) {
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

TEST_P(ListJobsTest, NegativeLimitIsInvalid) {
  Result<std::vector<JobRow>> jobs = store_->ListJobs({.limit = -1});
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), Code::kInvalidArgument);
}

// ---- Users, teams ----

// ada has both caps, bob none; then an admin lifts ada's GPU cap and sets bob's pending cap.
TEST_P(StoreContractTest, UserCapsRoundTripSetAndUnset) {
  Batch batch;
  batch.users = {UserRow{.name = "bob", .team = "nlp", .updated_at = kT0, .updated_by = "root"},
                 UserRow{.name = "ada",
                         .role = Role::kOperator,
                         .max_priority = 10,
                         .team = "vision",
                         .max_running_gpus = 16,
                         .max_pending_jobs = 500,
                         .updated_at = kT0,
                         .updated_by = "root"}};
  MustCommit(batch);
  store_.reset();
  store_ = Open();
  ASSERT_NE(store_, nullptr);

  Result<std::vector<UserRow>> users = store_->LoadUsers();
  ASSERT_TRUE(users.ok()) << users.status().message();
  ASSERT_EQ(users->size(), 2u);
  const UserRow& ada = (*users)[0];
  EXPECT_EQ(ada.name, "ada");
  EXPECT_EQ(ada.role, Role::kOperator);
  EXPECT_EQ(ada.max_priority, 10);
  EXPECT_EQ(ada.team, "vision");
  EXPECT_EQ(ada.max_running_gpus, 16);
  EXPECT_EQ(ada.max_pending_jobs, 500);
  EXPECT_EQ((*users)[1].name, "bob");
  EXPECT_FALSE((*users)[1].max_running_gpus.has_value());
  EXPECT_FALSE((*users)[1].max_pending_jobs.has_value());

  UserRow ada2 = ada;
  ada2.max_running_gpus = std::nullopt;  // no limit any more
  UserRow bob2 = (*users)[1];
  bob2.max_pending_jobs = 0;  // a cap of 0 is a cap, not "no limit"
  batch = Batch{};
  batch.users = {ada2, bob2};
  MustCommit(batch);
  users = store_->LoadUsers();
  ASSERT_TRUE(users.ok()) << users.status().message();
  ASSERT_EQ(users->size(), 2u);
  EXPECT_FALSE((*users)[0].max_running_gpus.has_value());
  EXPECT_EQ((*users)[0].max_pending_jobs, 500);
  EXPECT_FALSE((*users)[1].max_running_gpus.has_value());
  EXPECT_EQ((*users)[1].max_pending_jobs, 0);
  EXPECT_EQ(QueryInt("SELECT COUNT(*) FROM users WHERE max_running_gpus IS NULL"), 2);
}

TEST_P(StoreContractTest, TeamsRoundTripAndAreReplacedByName) {
  TeamRow vision{.name = "vision",
                 .quota = {{"H100", 16'000}, {"A100", 4'500}},
                 .borrow_limit = {{"H100", 8'000}},
                 .weight = 2.5,
                 .updated_at = kT0,
                 .updated_by = "root"};
  TeamRow nlp{.name = "nlp", .updated_at = kT0 + 1, .updated_by = "ops"};  // no quota, weight 1
  Batch batch;
  batch.teams = {vision, nlp};
  MustCommit(batch);

  Result<std::vector<TeamRow>> teams = store_->LoadTeams();
  ASSERT_TRUE(teams.ok()) << teams.status().message();
  ASSERT_EQ(teams->size(), 2u);
  const TeamRow& n = (*teams)[0];  // by name
  EXPECT_EQ(n.name, "nlp");
  EXPECT_TRUE(n.quota.empty());
  EXPECT_TRUE(n.borrow_limit.empty());
  EXPECT_EQ(n.weight, 1.0);
  EXPECT_EQ(n.updated_at, kT0 + 1);
  EXPECT_EQ(n.updated_by, "ops");
  const TeamRow& v = (*teams)[1];
  EXPECT_EQ(v.name, "vision");
  EXPECT_EQ(v.quota, vision.quota);
  EXPECT_EQ(v.borrow_limit, vision.borrow_limit);
  EXPECT_EQ(v.weight, 2.5);
  EXPECT_EQ(v.updated_by, "root");

  // The admin gives vision's A100s away and halves its weight; the row is replaced, not added.
  vision.quota = {{"H100", 16'000}};
  vision.borrow_limit = {};
  vision.weight = 1.25;
  vision.updated_at = kT0 + 2;
  batch = Batch{};
  batch.teams = {vision};
  MustCommit(batch);
  teams = store_->LoadTeams();
  ASSERT_TRUE(teams.ok()) << teams.status().message();
  ASSERT_EQ(teams->size(), 2u);
  EXPECT_EQ((*teams)[1].quota, vision.quota);
  EXPECT_TRUE((*teams)[1].borrow_limit.empty());
  EXPECT_EQ((*teams)[1].weight, 1.25);
  EXPECT_EQ((*teams)[1].updated_at, kT0 + 2);
  EXPECT_EQ(Count("teams"), 2);
}

// An admin creates two tokens for bob (one expiring) and revokes the first; each action is audited.
// Tokens come back by name with their times; the audit trail keeps its order and its newest rows.
TEST_P(StoreContractTest, TokensAndAuditRoundTrip) {
  Batch create;
  create.tokens = {TokenRow{.name = "laptop",
                            .user = "bob",
                            .hash = "sha256:aa",
                            .created_at = kT0,
                            .expires_at = kT0 + kDay,
                            .created_by = "ada"},
                   TokenRow{.name = "ci",
                            .user = "bob",
                            .hash = "sha256:bb",
                            .created_at = kT0 + 1,
                            .created_by = "ada",
                            .speaks_for = "bob,carol"}};
  create.audit = {AuditRow{.at = kT0, .by = "ada", .action = "token create", .target = "laptop"},
                  AuditRow{.at = kT0 + 1,
                           .by = "ada",
                           .action = "token create",
                           .target = "ci",
                           .detail = "for CI"}};
  MustCommit(create);
  Batch revoke;
  TokenRow ci = create.tokens[1];
  ci.revoked_at = kT0 + 2;
  revoke.tokens = {ci};
  revoke.audit = {AuditRow{.at = kT0 + 2, .by = "root", .action = "token revoke", .target = "ci"}};
  MustCommit(revoke);
  store_ = Open();
  ASSERT_NE(store_, nullptr);

  Result<std::vector<TokenRow>> tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  ASSERT_EQ(tokens->size(), 2u);
  const TokenRow& t0 = (*tokens)[0];  // by name: "ci" before "laptop"
  EXPECT_EQ(t0.name, "ci");
  EXPECT_EQ(t0.user, "bob");
  EXPECT_EQ(t0.hash, "sha256:bb");
  EXPECT_EQ(t0.created_at, kT0 + 1);
  EXPECT_FALSE(t0.expires_at.has_value());
  EXPECT_EQ(t0.revoked_at, kT0 + 2);
  EXPECT_EQ(t0.created_by, "ada");
  EXPECT_EQ(t0.speaks_for, "bob,carol");
  const TokenRow& t1 = (*tokens)[1];
  EXPECT_EQ(t1.name, "laptop");
  EXPECT_EQ(t1.expires_at, kT0 + kDay);
  EXPECT_FALSE(t1.revoked_at.has_value());
  EXPECT_EQ(Count("tokens"), 2);

  // A second token with the same hash is refused, and the batch with it.
  Batch clash;
  clash.tokens = {TokenRow{.name = "copy", .user = "eve", .hash = "sha256:aa", .created_at = kT0}};
  clash.audit = {AuditRow{.at = kT0 + 3, .by = "eve", .action = "token create", .target = "copy"}};
  EXPECT_FALSE(store_->Commit(clash).ok());
  EXPECT_EQ(Count("tokens"), 2);

  Result<std::vector<AuditRow>> audit = store_->ListAudit(0);  // 0: all of it
  ASSERT_TRUE(audit.ok()) << audit.status().message();
  ASSERT_EQ(audit->size(), 3u);
  EXPECT_LT((*audit)[0].seq, (*audit)[1].seq);
  EXPECT_LT((*audit)[1].seq, (*audit)[2].seq);
  EXPECT_EQ((*audit)[0].target, "laptop");
  EXPECT_EQ((*audit)[1].detail, "for CI");
  EXPECT_EQ((*audit)[2].by, "root");
  EXPECT_EQ((*audit)[2].action, "token revoke");
  EXPECT_EQ((*audit)[2].at, kT0 + 2);
  Result<std::vector<AuditRow>> newest = store_->ListAudit(2);
  ASSERT_TRUE(newest.ok()) << newest.status().message();
  ASSERT_EQ(newest->size(), 2u);
  EXPECT_EQ((*newest)[0].target, "ci");  // oldest first
  EXPECT_EQ((*newest)[1].action, "token revoke");
}

// Listings "by name" are in byte order on every backend, whatever the database's collation: "Zed"
// before "ada" before "bob" (SQLite compares bytes; a PostgreSQL database usually sorts by a
// language's rules, which would put "Zed" last).
TEST_P(StoreContractTest, NamesAreListedInByteOrder) {
  const std::vector<std::string> names = {"bob", "Zed", "ada", "_x"};
  const std::vector<std::string> sorted = {"Zed", "_x", "ada", "bob"};
  Batch batch;
  for (const std::string& name : names) {
    batch.users.push_back(UserRow{.name = name, .team = name});
    batch.teams.push_back(TeamRow{.name = name});
    batch.nodes.push_back(NodeRow{.name = name, .node_id = "id-" + name});
    batch.tokens.push_back(TokenRow{.name = name, .user = name, .hash = "sha256:" + name});
    batch.usage.push_back(Use(name, name, "H100", 1'000, 0, kH0, kH0 + kMinute));
  }
  MustCommit(batch);

  auto names_of = [](const auto& rows) {
    std::vector<std::string> out;
    for (const auto& row : rows) out.push_back(row.name);
    return out;
  };
  Result<std::vector<UserRow>> users = store_->LoadUsers();
  ASSERT_TRUE(users.ok()) << users.status().message();
  EXPECT_EQ(names_of(*users), sorted);
  Result<std::vector<TeamRow>> teams = store_->LoadTeams();
  ASSERT_TRUE(teams.ok()) << teams.status().message();
  EXPECT_EQ(names_of(*teams), sorted);
  Result<std::vector<NodeRow>> nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  EXPECT_EQ(names_of(*nodes), sorted);
  Result<std::vector<TokenRow>> tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  EXPECT_EQ(names_of(*tokens), sorted);
  EXPECT_EQ(NamesOf(MustQueryUsage(kH0, kH0 + kHour)), sorted);
  EXPECT_EQ(NamesOf(MustQueryUsage(kH0, kH0 + kHour, /*by_team=*/true)), sorted);
  std::vector<std::string> bucket_users;
  for (const UsageBucket& b : MustLoadBuckets(kH0)) bucket_users.push_back(b.user);
  EXPECT_EQ(bucket_users, sorted);
}

// ---- Usage ----

// ada's attempt holds 2.5 H100s and 8 CPUs from 0:45 to 2:10 (hours h0, h1, h2 from kH0): 15, 60
// and 10 minutes, i.e. 900, 3600 and 600 s. GPU time: 2.5 x those = 2250, 9000 and 1500 GPU-s,
// 12750 in all = 2.5 x 5100 s; CPU time 8 x = 7200, 28800 and 4800 CPU-s, 40800 in all.
TEST_P(StoreContractTest, UsageIsSplitExactlyOverTheHoursItSpans) {
  Batch batch;
  batch.usage = {Use("ada", "vision", "H100", 2'500, 8'000, kH0 + 45 * kMinute,
                     kH0 + 2 * kHour + 10 * kMinute)};
  MustCommit(batch);

  std::vector<UsageBucket> buckets = MustLoadBuckets(kH0);
  ASSERT_EQ(buckets.size(), 3u);
  const double gpu[] = {2250, 9000, 1500};
  const double cpu[] = {7200, 28800, 4800};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("hour " + std::to_string(i));
    EXPECT_EQ(buckets[i].hour, kH0 + static_cast<int64_t>(i) * kHour);
    EXPECT_EQ(buckets[i].user, "ada");
    EXPECT_EQ(buckets[i].team, "vision");
    EXPECT_EQ(buckets[i].gpu_type, "H100");
    EXPECT_EQ(buckets[i].gpu_seconds, gpu[i]);
    EXPECT_EQ(buckets[i].cpu_seconds, cpu[i]);
  }

  // The totals are the record's, and survive a reopen.
  store_.reset();
  store_ = Open();
  ASSERT_NE(store_, nullptr);
  std::vector<UsageRow> rows = MustQueryUsage(kH0, kH0 + 3 * kHour);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "ada");
  EXPECT_EQ(rows[0].gpu_seconds, (std::map<std::string, double>{{"H100", 12750}}));
  EXPECT_EQ(rows[0].cpu_seconds, 40800);
  EXPECT_EQ(rows[0].waits, 1);
  EXPECT_EQ(rows[0].jobs, 0);  // job_ended unset: the job goes on in another attempt
}

// Odd amounts and millisecond offsets: 0.333 GPU and 0.001 CPU from h0 + 1 ms to h3 - 7 ms. The
// store keeps milli-units x ms as integers, so the hours add up to exactly the record's total
// (0.333 x 10,799.992 s = 3596.397336 GPU-s), however the buckets were reached.
TEST_P(StoreContractTest, UsageTotalsEqualTheRecordsToTheMillisecond) {
  const TimeMs placed = kH0 + 1, ended = kH0 + 3 * kHour - 7;
  Batch batch;
  batch.usage = {Use("ada", "vision", "A100", 333, 1, placed, ended)};
  MustCommit(batch);

  EXPECT_EQ(QueryInt("SELECT COUNT(*) FROM usage_hourly"), 3);
  EXPECT_EQ(QueryInt("SELECT sum(gpu_milli_ms) FROM usage_hourly"), 333 * (ended - placed));
  EXPECT_EQ(QueryInt("SELECT sum(cpu_milli_ms) FROM usage_hourly"), 1 * (ended - placed));
  EXPECT_EQ(
      QueryInt("SELECT gpu_milli_ms FROM usage_hourly WHERE hour = " + std::to_string(kH0 + kHour)),
      333 * kHour);
  std::vector<UsageRow> rows = MustQueryUsage(kH0, kH0 + 3 * kHour);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].gpu_seconds.at("A100"), 0.333 * 10'799.992);
  EXPECT_DOUBLE_EQ(rows[0].cpu_seconds, 0.001 * 10'799.992);
}

// Hours h0..h3 from kH0. Four attempts of ada's job and one of bob's:
//   a: placed h0 +10 min after waiting 120 s, ends the job at h2 +5 min   -> wait h0, job h2
//   b: placed h1 +0 (waited 30 s), preempted at h1 +20 min               -> wait h1, preemption h1
//   c: placed h1 +40 min (waited 5 s), ends exactly at h2's start        -> wait h1, job h2, time
//      only in h1
//   d: fails at placement (ended_at == placed_at, h3 +1 min), waited 10 s -> wait h3, job h3, no
//   time e: bob, a reclaim that also ends his job, placed and ended in h0       -> everything in h0
TEST_P(StoreContractTest, JobsPreemptionsAndWaitsGoToTheirHours) {
  UsageRecord a =
      Use("ada", "vision", "H100", 1'000, 0, kH0 + 10 * kMinute, kH0 + 2 * kHour + 5 * kMinute);
  a.wait_ms = 120'000;
  a.job_ended = true;
  UsageRecord b = Use("ada", "vision", "H100", 1'000, 0, kH0 + kHour, kH0 + kHour + 20 * kMinute);
  b.wait_ms = 30'000;
  b.preempted = true;
  UsageRecord c =
      Use("ada", "vision", "H100", 1'000, 0, kH0 + kHour + 40 * kMinute, kH0 + 2 * kHour);
  c.wait_ms = 5'000;
  c.job_ended = true;
  UsageRecord d =
      Use("ada", "vision", "H100", 1'000, 0, kH0 + 3 * kHour + kMinute, kH0 + 3 * kHour + kMinute);
  d.wait_ms = 10'000;
  d.job_ended = true;
  UsageRecord e = Use("bob", "vision", "", 0, 2'000, kH0 + kMinute, kH0 + 31 * kMinute);
  e.wait_ms = 1'000;
  e.job_ended = true;
  e.preempted = true;
  Batch batch;
  batch.usage = {a, b, c, d, e};
  MustCommit(batch);

  auto hour = [&](int h) { return MustQueryUsage(kH0 + h * kHour, kH0 + (h + 1) * kHour); };
  // h0: a's 50 min; a's wait; bob's 30 min of 2 CPUs (3600 CPU-s), his job, wait and reclaim.
  std::vector<UsageRow> h0 = hour(0);
  ASSERT_EQ(NamesOf(h0), std::vector<std::string>({"ada", "bob"}));
  EXPECT_EQ(h0[0].gpu_seconds.at("H100"), 50 * 60);
  EXPECT_EQ(h0[0].jobs, 0);
  EXPECT_EQ(h0[0].waits, 1);
  EXPECT_EQ(h0[0].wait_seconds, 120);
  EXPECT_EQ(h0[0].preemptions, 0);
  EXPECT_TRUE(h0[1].gpu_seconds.empty());  // CPU only: no "" entry
  EXPECT_EQ(h0[1].cpu_seconds, 3600);
  EXPECT_EQ(h0[1].jobs, 1);
  EXPECT_EQ(h0[1].waits, 1);
  EXPECT_EQ(h0[1].wait_seconds, 1);
  EXPECT_EQ(h0[1].preemptions, 1);
  // h1: a's 60 min + b's 20 + c's 20 = 100 GPU-min; b's and c's waits; b's preemption.
  std::vector<UsageRow> h1 = hour(1);
  ASSERT_EQ(NamesOf(h1), std::vector<std::string>({"ada"}));
  EXPECT_EQ(h1[0].gpu_seconds.at("H100"), 100 * 60);
  EXPECT_EQ(h1[0].jobs, 0);
  EXPECT_EQ(h1[0].waits, 2);
  EXPECT_EQ(h1[0].wait_seconds, 35);
  EXPECT_EQ(h1[0].preemptions, 1);
  // h2: a's last 5 min; a's and c's job ends.
  std::vector<UsageRow> h2 = hour(2);
  ASSERT_EQ(NamesOf(h2), std::vector<std::string>({"ada"}));
  EXPECT_EQ(h2[0].gpu_seconds.at("H100"), 5 * 60);
  EXPECT_EQ(h2[0].jobs, 2);
  EXPECT_EQ(h2[0].waits, 0);
  EXPECT_EQ(h2[0].preemptions, 0);
  // h3: d alone, with no time at all.
  std::vector<UsageRow> h3 = hour(3);
  ASSERT_EQ(NamesOf(h3), std::vector<std::string>({"ada"}));
  EXPECT_TRUE(h3[0].gpu_seconds.empty());
  EXPECT_EQ(h3[0].cpu_seconds, 0);
  EXPECT_EQ(h3[0].jobs, 1);
  EXPECT_EQ(h3[0].waits, 1);
  EXPECT_EQ(h3[0].wait_seconds, 10);

  // All four hours at once: the sums of the above.
  std::vector<UsageRow> all = MustQueryUsage(kH0, kH0 + 4 * kHour);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].gpu_seconds.at("H100"), (50 + 100 + 5) * 60);
  EXPECT_EQ(all[0].jobs, 3);
  EXPECT_EQ(all[0].waits, 4);
  EXPECT_EQ(all[0].wait_seconds, 165);
  EXPECT_EQ(all[0].preemptions, 1);
}

// Over h0 (kH0 + one hour):
//   ada (vision): 1 H100 for the hour (3600 GPU-s), 1 A100 for 30 min (1800), 4 CPUs throughout
//   bob (vision): 2 H100s for the hour (7200)
//   cyd (no team, i.e. the default team ""): CPU only, 8 CPUs for the hour (28800 CPU-s)
//   dan (nlp):    half an A100 for the hour (1800)
// By team: "" = cyd; nlp = dan; vision = ada + bob: H100 10800, A100 1800. Every attempt ends its
// job; only ada's A100 one ends inside h0, the others at h1's start, so their jobs count in h1.
TEST_P(StoreContractTest, UsageByUserAndByTeam) {
  const TimeMs h0 = kH0, h1 = kH0 + kHour;
  Batch batch;
  batch.usage = {Use("dan", "nlp", "A100", 500, 0, h0, h1),
                 Use("bob", "vision", "H100", 2'000, 0, h0, h1),
                 Use("ada", "vision", "H100", 1'000, 4'000, h0, h1),
                 Use("ada", "vision", "A100", 1'000, 0, h0, h0 + 30 * kMinute),
                 Use("cyd", "", "", 0, 8'000, h0, h1)};
  for (UsageRecord& r : batch.usage) r.job_ended = true;
  MustCommit(batch);

  std::vector<UsageRow> users = MustQueryUsage(h0, h1);
  ASSERT_EQ(NamesOf(users), std::vector<std::string>({"ada", "bob", "cyd", "dan"}));
  EXPECT_EQ(users[0].gpu_seconds, (std::map<std::string, double>{{"A100", 1800}, {"H100", 3600}}));
  EXPECT_EQ(users[0].cpu_seconds, 4 * 3600);
  EXPECT_EQ(users[0].jobs, 1);
  EXPECT_EQ(users[0].waits, 2);
  EXPECT_EQ(users[1].gpu_seconds, (std::map<std::string, double>{{"H100", 7200}}));
  EXPECT_TRUE(users[2].gpu_seconds.empty());
  EXPECT_EQ(users[2].cpu_seconds, 28800);
  EXPECT_EQ(users[3].gpu_seconds, (std::map<std::string, double>{{"A100", 1800}}));

  std::vector<UsageRow> teams = MustQueryUsage(h0, h1, /*by_team=*/true);
  ASSERT_EQ(NamesOf(teams), std::vector<std::string>({"", "nlp", "vision"}));
  EXPECT_EQ(teams[0].cpu_seconds, 28800);
  EXPECT_TRUE(teams[0].gpu_seconds.empty());
  EXPECT_EQ(teams[1].gpu_seconds, (std::map<std::string, double>{{"A100", 1800}}));
  EXPECT_EQ(teams[2].gpu_seconds, (std::map<std::string, double>{{"A100", 1800}, {"H100", 10800}}));
  EXPECT_EQ(teams[2].cpu_seconds, 4 * 3600);
  EXPECT_EQ(teams[2].jobs, 1);
  EXPECT_EQ(teams[2].waits, 3);

  // h1 holds the other four job ends and no time.
  std::vector<UsageRow> next = MustQueryUsage(h1, h1 + kHour, /*by_team=*/true);
  ASSERT_EQ(NamesOf(next), std::vector<std::string>({"", "nlp", "vision"}));
  EXPECT_EQ(next[2].jobs, 2);
  EXPECT_TRUE(next[2].gpu_seconds.empty());
  EXPECT_EQ(next[2].waits, 0);
}

// One attempt holds 1 GPU from h0 to h5 (3600 GPU-s in each of h0..h4). A window covers every hour
// that overlaps it: [h1 + 30 min, h3) is h1 and h2; one more millisecond of `until` adds h3.
TEST_P(StoreContractTest, UsageWindowCoversTheHoursOverlappingIt) {
  Batch batch;
  batch.usage = {Use("ada", "vision", "H100", 1'000, 0, kH0, kH0 + 5 * kHour)};
  MustCommit(batch);
  auto gpu_seconds = [&](TimeMs since, TimeMs until) -> double {
    std::vector<UsageRow> rows = MustQueryUsage(since, until);
    return rows.empty() ? 0 : RowOf(rows, "ada").gpu_seconds["H100"];
  };
  EXPECT_EQ(gpu_seconds(kH0 + kHour + 30 * kMinute, kH0 + 3 * kHour), 2 * 3600);
  EXPECT_EQ(gpu_seconds(kH0 + kHour + 30 * kMinute, kH0 + 3 * kHour + 1), 3 * 3600);
  EXPECT_EQ(gpu_seconds(kH0 + kHour, kH0 + 2 * kHour), 3600);
  EXPECT_EQ(gpu_seconds(kH0 - 10 * kHour, kH0 + 10 * kHour), 5 * 3600);
  EXPECT_EQ(gpu_seconds(kH0 + 5 * kHour, kH0 + 10 * kHour), 0);           // after it
  EXPECT_EQ(gpu_seconds(kH0 - 2 * kHour, kH0), 0);                        // before it
  EXPECT_TRUE(MustQueryUsage(kH0 + 3 * kHour, kH0 + 2 * kHour).empty());  // until < since

  // LoadUsageBuckets takes the hours that start at or after `since` (not the one containing it),
  // oldest first.
  std::vector<UsageBucket> buckets = MustLoadBuckets(kH0 + 2 * kHour);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].hour, kH0 + 2 * kHour);
  EXPECT_EQ(buckets[2].hour, kH0 + 4 * kHour);
  EXPECT_EQ(MustLoadBuckets(kH0 + 2 * kHour + 1).size(), 2u);
  EXPECT_TRUE(MustLoadBuckets(kH0 + 5 * kHour).empty());
}

// A window of several days is read from the daily rollup for its whole days and from the hours at
// its ends. One GPU from day 0, 22:00 to day 2, 03:00 (29 hours: 2 + 24 + 3). The window from day
// 0, 23:30 to day 2, 01:00 covers the hours 23:00 of day 0 (1), all of day 1 (24) and 00:00 of day
// 2 (1): 26 GPU-hours = 93,600 GPU-s.
TEST_P(StoreContractTest, UsageWindowOfDaysAddsWholeDaysAndRaggedHours) {
  Batch batch;
  batch.usage = {
      Use("ada", "vision", "H100", 1'000, 0, kD0 + 22 * kHour, kD0 + 2 * kDay + 3 * kHour)};
  MustCommit(batch);
  EXPECT_EQ(Count("usage_hourly"), 29);
  EXPECT_EQ(Count("usage_daily"), 3);

  auto gpu_seconds = [&](TimeMs since, TimeMs until) -> double {
    std::vector<UsageRow> rows = MustQueryUsage(since, until);
    return rows.empty() ? 0 : RowOf(rows, "ada").gpu_seconds["H100"];
  };
  EXPECT_EQ(gpu_seconds(kD0 + 23 * kHour + 30 * kMinute, kD0 + 2 * kDay + kHour), 26 * 3600);
  EXPECT_EQ(gpu_seconds(kD0 + kDay, kD0 + 2 * kDay), 24 * 3600);             // exactly day 1
  EXPECT_EQ(gpu_seconds(kD0, kD0 + 3 * kDay), 29 * 3600);                    // days 0..2 whole
  EXPECT_EQ(gpu_seconds(kD0 - kDay, kD0 + 10 * kDay), 29 * 3600);            // and beyond
  EXPECT_EQ(gpu_seconds(kD0 + 2 * kDay + 2 * kHour, kD0 + 9 * kDay), 3600);  // 02:00 of day 2
}

// QueryUsage reads whole days from usage_daily and ragged hours from usage_hourly; the answer must
// be the one a plain GROUP BY over the hours gives, for any window. 400 random attempts of 5 users
// in 2 teams (GPU types H100, A100 and none) over 6 days, 0 to 30 hours long, written in batches
// of 40; then 150 random windows, by user and by team. Also: every usage_daily row is the sum of
// its day's usage_hourly rows, and there are no others.
TEST_P(StoreContractTest, UsageQueriesAgreeWithAFullScanOfTheHours) {
  std::mt19937_64 rng(7);
  auto uniform = [&](int64_t lo, int64_t hi) {  // in [lo, hi]
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const std::vector<std::string> users = {"u0", "u1", "u2", "u3", "u4"};
  const std::vector<std::string> types = {"H100", "A100", ""};
  for (int b = 0; b < 10; ++b) {
    Batch batch;
    for (int i = 0; i < 40; ++i) {
      const int user = static_cast<int>(uniform(0, 4));
      const std::string type = types[uniform(0, 2)];
      const TimeMs placed = kD0 + uniform(0, 6 * kDay);
      UsageRecord r =
          Use(users[user], user < 3 ? "vision" : "nlp", type, type.empty() ? 0 : uniform(1, 8'000),
              uniform(0, 64'000), placed, placed + uniform(0, 30 * kHour));
      r.wait_ms = uniform(0, kHour);
      r.job_ended = uniform(0, 1) == 1;
      r.preempted = uniform(0, 3) == 0;
      batch.usage.push_back(r);
    }
    MustCommit(batch);
  }

  // "user" quoted: a reserved word in PostgreSQL, an identifier in SQLite either way.
  const std::string sums =
      "sum(gpu_milli_ms), sum(cpu_milli_ms), sum(jobs), sum(wait_ms), sum(waits), "
      "sum(preemptions)";
  const std::string hourly_by_day = "SELECT hour - hour % " + std::to_string(kDay) +
                                    ", \"user\", team, gpu_type, " + sums +
                                    " FROM usage_hourly GROUP BY 1, 2, 3, 4";
  const std::string daily =
      "SELECT day, \"user\", team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, "
      "preemptions FROM usage_daily";
  EXPECT_EQ(QueryInt("SELECT COUNT(*) FROM (" + hourly_by_day + " EXCEPT " + daily + ") AS d"), 0);
  EXPECT_EQ(QueryInt("SELECT COUNT(*) FROM (" + daily + " EXCEPT " + hourly_by_day + ") AS d"), 0);
  EXPECT_GT(Count("usage_daily"), 5);

  // The reference: GROUP BY over usage_hourly, folded into UsageRows the way the store documents.
  auto reference = [&](TimeMs since, TimeMs until, bool by_team) {
    const std::string name = by_team ? "team" : "\"user\"";
    std::vector<std::vector<std::string>> result =
        QueryRows("SELECT " + name + ", gpu_type, " + sums +
                      " FROM usage_hourly WHERE hour >= " + std::to_string(since - since % kHour) +
                      " AND hour < " + std::to_string(until) + " GROUP BY 1, 2 ORDER BY 1, 2",
                  8);
    std::vector<UsageRow> rows;
    std::map<std::string, std::pair<int64_t, int64_t>> cpu_and_wait;
    for (const std::vector<std::string>& row : result) {
      auto num = [&](int col) { return std::stoll(row[col]); };
      if (rows.empty() || rows.back().name != row[0]) rows.push_back({.name = row[0]});
      UsageRow& r = rows.back();
      if (!row[1].empty() && num(2) != 0) r.gpu_seconds[row[1]] = num(2) / 1e6;
      cpu_and_wait[r.name].first += num(3);
      r.jobs += num(4);
      cpu_and_wait[r.name].second += num(5);
      r.waits += num(6);
      r.preemptions += num(7);
    }
    for (UsageRow& r : rows) {
      r.cpu_seconds = cpu_and_wait[r.name].first / 1e6;
      r.wait_seconds = cpu_and_wait[r.name].second / 1e3;
    }
    return rows;
  };

  for (int i = 0; i < 150; ++i) {
    // Half the windows on whole hours or days, to hit the edges of the ranges.
    TimeMs since = kD0 + uniform(-kDay, 8 * kDay), until = since + uniform(0, 5 * kDay);
    if (i % 4 == 1) since -= since % kHour, until -= until % kHour;
    if (i % 4 == 2) since -= since % kDay, until -= until % kDay;
    for (bool by_team : {false, true}) {
      SCOPED_TRACE("window [" + std::to_string(since - kD0) + ", " + std::to_string(until - kD0) +
                   ") ms from day 0" + (by_team ? ", by team" : ""));
      std::vector<UsageRow> got = MustQueryUsage(since, until, by_team);
      std::vector<UsageRow> want = reference(since, until, by_team);
      ASSERT_EQ(NamesOf(got), NamesOf(want));
      for (size_t j = 0; j < got.size(); ++j) {
        EXPECT_EQ(got[j].gpu_seconds, want[j].gpu_seconds) << got[j].name;
        EXPECT_EQ(got[j].cpu_seconds, want[j].cpu_seconds) << got[j].name;
        EXPECT_EQ(got[j].jobs, want[j].jobs) << got[j].name;
        EXPECT_EQ(got[j].wait_seconds, want[j].wait_seconds) << got[j].name;
        EXPECT_EQ(got[j].waits, want[j].waits) << got[j].name;
        EXPECT_EQ(got[j].preemptions, want[j].preemptions) << got[j].name;
      }
    }
  }
}

// Two attempts in one batch and a third in the next land in the same bucket: one row, summed. In
// the same hour, ada's use under another team or GPU type is a bucket of its own.
// What measured attempts used goes, with what they were allotted, to the hour they ended in, so a
// window holds both or neither; unmeasured attempts and attempts without a memory request count in
// neither ratio. Summed over days as over hours.
TEST_P(StoreContractTest, MeasuredUseGoesToTheHourTheAttemptEnded) {
  // 90 minutes of 2 CPUs (10,800 CPU-s allotted), 5,400 CPU-s used; peak 256 MiB of 1,024 asked.
  UsageRecord a = Use("ada", "vision", "", 0, 2'000, kH0 + 30 * kMinute, kH0 + 2 * kHour);
  a.cpu_used_ms = 5'400'000;
  a.peak_memory_bytes = int64_t{256} << 20;
  a.memory_mib = 1'024;
  // 30 minutes of 1 CPU, fully used, peak 512 MiB but no memory asked.
  UsageRecord b = Use("ada", "vision", "", 0, 1'000, kH0 + 90 * kMinute, kH0 + 2 * kHour);
  b.cpu_used_ms = 1'800'000;
  b.peak_memory_bytes = int64_t{512} << 20;
  // Unmeasured (no isolation on its node): counts in neither.
  UsageRecord c = Use("ada", "vision", "", 0, 4'000, kH0, kH0 + 2 * kHour);
  c.memory_mib = 2'048;
  Batch batch;
  batch.usage = {a, b, c};
  MustCommit(batch);

  std::vector<UsageRow> h0 = MustQueryUsage(kH0, kH0 + kHour);
  ASSERT_EQ(h0.size(), 1u);
  EXPECT_EQ(h0[0].measured_cpu_seconds, 0);
  EXPECT_EQ(h0[0].used_cpu_seconds, 0);
  // Both ended at kH0 + 2h, which is in the hour starting there.
  EXPECT_EQ(MustQueryUsage(kH0 + kHour, kH0 + 2 * kHour)[0].measured_cpu_seconds, 0);
  std::vector<UsageRow> h1 = MustQueryUsage(kH0 + 2 * kHour, kH0 + 3 * kHour);
  ASSERT_EQ(h1.size(), 1u);
  EXPECT_EQ(h1[0].used_cpu_seconds, 5'400 + 1'800);
  EXPECT_EQ(h1[0].measured_cpu_seconds, 10'800 + 1'800);
  EXPECT_EQ(h1[0].peak_memory_mib_seconds, 256.0 * 90 * 60);
  EXPECT_EQ(h1[0].asked_memory_mib_seconds, 1'024.0 * 90 * 60);
  // The same through the daily rollup (the window is whole UTC days).
  std::vector<UsageRow> day =
      MustQueryUsage(kH0 - kH0 % (24 * kHour), kH0 - kH0 % (24 * kHour) + 2 * 24 * kHour);
  ASSERT_EQ(day.size(), 1u);
  EXPECT_EQ(day[0].used_cpu_seconds, 7'200);
  EXPECT_EQ(day[0].measured_cpu_seconds, 12'600);
  EXPECT_EQ(day[0].asked_memory_mib_seconds, 1'024.0 * 90 * 60);
}

// Sampled GPUs (docs/idle.md) likewise: the GPU time of the attempts whose GPUs were sampled, that
// time weighted by their mean SM utilisation, and their idle GPU time, in the hour they ended.
TEST_P(StoreContractTest, SampledGpuUseGoesToTheHourTheAttemptEnded) {
  // 2 GPUs for an hour at a mean of 25 % SM, idle for 30 minutes of it (all its GPUs).
  UsageRecord a = Use("ada", "vision", "A100", 2'000, 1'000, kH0, kH0 + kHour);
  a.gpu_mean_sm = 25;
  a.gpu_idle_ms = 30 * kMinute;
  // Half a GPU for 30 minutes, busy throughout; an idle time past its span counts as the span.
  UsageRecord b = Use("ada", "vision", "A100", 500, 1'000, kH0 + 30 * kMinute, kH0 + kHour);
  b.gpu_mean_sm = 100;
  b.gpu_idle_ms = 2 * kHour;
  // Not sampled (a node without nvidia-smi): counts in none of it.
  UsageRecord c = Use("ada", "vision", "A100", 1'000, 1'000, kH0, kH0 + kHour);
  Batch batch;
  batch.usage = {a, b, c};
  MustCommit(batch);
  for (auto [from, to] :
       {std::pair{kH0 + kHour, kH0 + 2 * kHour},
        std::pair{kH0 - kH0 % (24 * kHour), kH0 - kH0 % (24 * kHour) + 48 * kHour}}) {
    std::vector<UsageRow> rows = MustQueryUsage(from, to);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].gpu_sampled_seconds, 2.0 * 3'600 + 0.5 * 1'800);
    EXPECT_EQ(rows[0].gpu_busy_seconds, 0.25 * 2 * 3'600 + 0.5 * 1'800);
    EXPECT_EQ(rows[0].idle_gpu_seconds, 2.0 * 1'800 + 0.5 * 1'800);
  }
  EXPECT_EQ(MustQueryUsage(kH0, kH0 + kHour)[0].gpu_sampled_seconds, 0);
  // The hourly buckets fair share is rebuilt from carry the idle GPU time (--idle-charge).
  double idle = 0;
  for (const UsageBucket& bucket : MustLoadBuckets(kH0)) idle += bucket.idle_gpu_seconds;
  EXPECT_EQ(idle, 2.0 * 1'800 + 0.5 * 1'800);
}

TEST_P(StoreContractTest, UsageInTheSameBucketAddsUp) {
  Batch first;
  first.usage = {Use("ada", "vision", "H100", 1'000, 0, kH0, kH0 + 10 * kMinute),
                 Use("ada", "vision", "H100", 1'000, 0, kH0 + 20 * kMinute, kH0 + 30 * kMinute)};
  MustCommit(first);
  Batch second;
  second.usage = {Use("ada", "vision", "H100", 500, 0, kH0, kH0 + 20 * kMinute),
                  Use("ada", "nlp", "H100", 1'000, 0, kH0, kH0 + kMinute),
                  Use("ada", "vision", "A100", 1'000, 0, kH0, kH0 + kMinute)};
  MustCommit(second);

  std::vector<UsageBucket> buckets = MustLoadBuckets(kH0);
  ASSERT_EQ(buckets.size(), 3u);  // (ada, nlp, H100), (ada, vision, A100), (ada, vision, H100)
  EXPECT_EQ(buckets[0].team, "nlp");
  EXPECT_EQ(buckets[1].gpu_type, "A100");
  EXPECT_EQ(buckets[2].gpu_seconds, 600 + 600 + 600);  // 10 + 10 GPU-min, then 0.5 x 20
  std::vector<UsageRow> rows = MustQueryUsage(kH0, kH0 + kHour);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].gpu_seconds, (std::map<std::string, double>{{"A100", 60}, {"H100", 1860}}));
  EXPECT_EQ(rows[0].waits, 5);
}

// The batch writes a team, a user and a three-hour usage record, and fails on the usage row of the
// last hour (a trigger added through a second connection plays the fault), after the team, the user
// and two hours were written. None of it may remain; the retry then counts the record once.
TEST_P(StoreContractTest, FailedCommitWritesNoUsage) {
  const std::string last_hour = std::to_string(kH0 + 2 * kHour);
  Status trigger =
      pg() ? ExecRaw(
                 "CREATE FUNCTION fail_usage() RETURNS trigger LANGUAGE plpgsql AS "
                 "$$ BEGIN RAISE EXCEPTION 'injected fault'; END $$; "
                 "CREATE TRIGGER fail_usage BEFORE INSERT ON usage_hourly FOR EACH ROW "
                 "WHEN (NEW.hour = " +
                 last_hour + ") EXECUTE FUNCTION fail_usage()")
           : ExecRaw("CREATE TRIGGER fail_usage BEFORE INSERT ON usage_hourly WHEN NEW.hour = " +
                     last_hour + " BEGIN SELECT RAISE(ABORT, 'injected fault'); END");
  ASSERT_TRUE(trigger.ok()) << trigger.message();
  Batch batch;
  batch.teams = {TeamRow{.name = "vision", .weight = 2}};
  batch.users = {UserRow{.name = "ada", .team = "vision", .max_running_gpus = 8}};
  batch.usage = {Use("ada", "vision", "H100", 1'000, 0, kH0, kH0 + 3 * kHour)};
  Status st = store_->Commit(batch);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("injected fault"), std::string::npos) << st.message();
  EXPECT_EQ(Count("usage_hourly"), 0);
  EXPECT_EQ(Count("usage_daily"), 0);
  EXPECT_EQ(Count("teams"), 0);
  EXPECT_EQ(Count("users"), 0);

  ASSERT_TRUE(
      ExecRaw(pg() ? "DROP TRIGGER fail_usage ON usage_hourly" : "DROP TRIGGER fail_usage").ok());
  MustCommit(batch);
  std::vector<UsageRow> rows = MustQueryUsage(kH0, kH0 + 3 * kHour);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].gpu_seconds.at("H100"), 3 * 3600);
  EXPECT_EQ(rows[0].waits, 1);
}

// A job update for a job that does not exist fails the batch, and its usage with it.
TEST_P(StoreContractTest, UsageOfABatchWithAnUnknownJobIsNotWritten) {
  MustSubmit(MakeSubmission(1, false));
  JobRow ghost = MustGet(1);
  ghost.id = 42;
  Batch batch;
  batch.jobs = {ghost};
  batch.usage = {Use("ada", "vision", "H100", 1'000, 0, kH0, kH0 + kHour)};
  Status st = store_->Commit(batch);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_EQ(Count("usage_hourly"), 0);
}

// Records a caller cannot have meant: negative amounts, and an attempt "placed" at the epoch (an
// unset placed_at), which would write some 490,000 hourly buckets. The batch is refused whole.
TEST_P(StoreContractTest, ImplausibleUsageRecordsFailTheBatch) {
  Batch negative;
  negative.teams = {TeamRow{.name = "vision"}};
  negative.usage = {Use("ada", "vision", "H100", -1'000, 0, kH0, kH0 + kHour)};
  Status st = store_->Commit(negative);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("ada"), std::string::npos) << st.message();

  Batch unset;
  unset.usage = {Use("ada", "vision", "H100", 1'000, 0, /*placed=*/0, kT0)};
  st = store_->Commit(unset);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("placed_at"), std::string::npos) << st.message();
  EXPECT_EQ(Count("usage_hourly"), 0);
  EXPECT_EQ(Count("teams"), 0);
}

// FaultyStore forwards the new calls and fails them like the others: an injected write failure
// writes no usage, and the retry counts once; an injected read failure fails the reads.
TEST_P(StoreContractTest, FaultyStoreForwardsTeamsAndUsage) {
  testing::FaultyStore faulty(std::move(store_));
  Batch batch;
  batch.teams = {TeamRow{.name = "vision"}};
  batch.usage = {Use("ada", "vision", "H100", 1'000, 0, kH0, kH0 + kHour)};
  faulty.FailWrites(1);
  EXPECT_EQ(faulty.Commit(batch).code(), Code::kUnavailable);
  Result<std::vector<UsageRow>> rows = faulty.QueryUsage({.since = kH0, .until = kH0 + kHour});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  EXPECT_TRUE(rows->empty());

  ASSERT_TRUE(faulty.Commit(batch).ok());
  rows = faulty.QueryUsage({.since = kH0, .until = kH0 + kHour, .by_team = true});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].name, "vision");
  EXPECT_EQ((*rows)[0].gpu_seconds.at("H100"), 3600);
  Result<std::vector<TeamRow>> teams = faulty.LoadTeams();
  ASSERT_TRUE(teams.ok()) << teams.status().message();
  EXPECT_EQ(teams->size(), 1u);
  Result<std::vector<UsageBucket>> buckets = faulty.LoadUsageBuckets(kH0);
  ASSERT_TRUE(buckets.ok()) << buckets.status().message();
  EXPECT_EQ(buckets->size(), 1u);

  faulty.FailReads(true);
  EXPECT_FALSE(faulty.LoadTeams().ok());
  EXPECT_FALSE(faulty.QueryUsage({.since = kH0, .until = kH0 + kHour}).ok());
  EXPECT_FALSE(faulty.LoadUsageBuckets(kH0).ok());
}

// Pipelines (schema v4): a job's restart and requeue counters, its backoff and the running time of
// its earlier attempts survive a reopen; a group's max_running is set at submit, changed by a
// commit, and loaded for groups that still have active jobs.
TEST_P(StoreContractTest, PipelineFieldsAndGroupLimitsRoundTrip) {
  Submission s = MakeSubmission(3, /*as_group=*/true);
  s.max_running = 2;
  SubmitResult r = MustSubmit(s);
  ASSERT_TRUE(r.group.has_value());
  JobRow job = MustGet(r.ids[0]);
  EXPECT_EQ(job.restarts, 0);
  EXPECT_EQ(job.not_before, std::nullopt);
  job.restarts = 2;
  job.preemptions = 1;
  job.requeues = 3;
  job.not_before = kT0 + 30'000;
  job.run_ms = 12'345;
  Batch batch;
  batch.jobs.push_back(job);
  batch.group_limits.emplace_back(*r.group, 5);
  ASSERT_TRUE(store_->Commit(batch).ok());

  store_ = Open();
  JobRow again = MustGet(r.ids[0]);
  EXPECT_EQ(again.restarts, 2);
  EXPECT_EQ(again.preemptions, 1);
  EXPECT_EQ(again.requeues, 3);
  EXPECT_EQ(again.not_before, kT0 + 30'000);
  EXPECT_EQ(again.run_ms, 12'345);

  Result<Store::GroupInfo> info = store_->GetGroup(*r.group);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->first_job, r.ids.front());
  EXPECT_EQ(info->last_job, r.ids.back());
  EXPECT_EQ(info->user, "ada");
  EXPECT_EQ(info->max_running, 5);
  EXPECT_EQ(store_->GetGroup(*r.group + 100).status().code(), Code::kNotFound);

  Result<std::map<int64_t, int>> limits = store_->LoadGroupLimits();
  ASSERT_TRUE(limits.ok()) << limits.status().message();
  EXPECT_EQ(*limits, (std::map<int64_t, int>{{*r.group, 5}}));

  // No limit any more; and a group whose jobs all ended is not loaded.
  Batch clear;
  clear.group_limits.emplace_back(*r.group, std::nullopt);
  ASSERT_TRUE(store_->Commit(clear).ok());
  EXPECT_TRUE(store_->LoadGroupLimits()->empty());
  Batch unknown;
  unknown.group_limits.emplace_back(*r.group + 100, 3);
  EXPECT_EQ(store_->Commit(unknown).code(), Code::kNotFound);
}

// ---- Notifications (docs/notifications.md) ----

namespace notify_test {

NoticeRow Notice(const std::string& id, const std::string& sink, int64_t job, TimeMs at,
                 std::optional<int64_t> group = std::nullopt) {
  NoticeRow n;
  n.event_id = id;
  n.user = "alice";
  n.sink = sink;
  n.type = "end";
  n.job = job;
  n.group = group;
  n.created_at = at;
  n.next_at = at;
  n.payload = "{\"id\":\"" + id + "\"}";
  return n;
}

}  // namespace notify_test

// Sinks are upserted by (user, kind) and deleted; the secret is kept for the sender.
TEST_P(StoreContractTest, NotifySinksUpsertAndDelete) {
  Batch b;
  b.notify_sinks.push_back({.user = "alice", .kind = "email", .target = "a@example.com"});
  b.notify_sinks.push_back({.user = "alice",
                            .kind = "webhook",
                            .target = "https://h.example.com",
                            .secret = "s3cret",
                            .format = "slack",
                            .events = "end",
                            .updated_at = 5});
  MustCommit(b);
  Batch again;
  again.notify_sinks.push_back({.user = "alice", .kind = "email", .target = "b@example.com"});
  again.notify_sink_deletes.emplace_back("alice", "webhook");
  MustCommit(again);
  Result<std::vector<NotifySinkRow>> sinks = store_->LoadNotifySinks();
  ASSERT_TRUE(sinks.ok()) << sinks.status().message();
  ASSERT_EQ(sinks->size(), 1u);
  EXPECT_EQ((*sinks)[0].target, "b@example.com");
  MustCommit(b);
  sinks = store_->LoadNotifySinks();
  ASSERT_EQ(sinks->size(), 2u);
  EXPECT_EQ((*sinks)[1].secret, "s3cret");
  EXPECT_EQ((*sinks)[1].format, "slack");
  EXPECT_EQ((*sinks)[1].updated_at, 5);
}

// Reservations are upserted by name (created_at kept from the first write) and deleted.
TEST_P(StoreContractTest, ReservationsUpsertAndDelete) {
  Batch b;
  b.reservations.push_back({.name = "demo",
                            .spec = R"({"a":1})",
                            .created_at = 5,
                            .updated_at = 5,
                            .updated_by = "root"});
  b.reservations.push_back({.name = "upgrade", .spec = "{}", .created_at = 6, .updated_at = 6});
  MustCommit(b);
  Batch again;
  again.reservations.push_back({.name = "demo",
                                .spec = R"({"a":2})",
                                .created_at = 9,
                                .updated_at = 9,
                                .updated_by = "ops"});
  again.reservation_deletes.push_back("upgrade");
  MustCommit(again);
  Result<std::vector<ReservationRow>> rows = store_->LoadReservations();
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].name, "demo");
  EXPECT_EQ((*rows)[0].spec, R"({"a":2})");
  EXPECT_EQ((*rows)[0].created_at, 5);
  EXPECT_EQ((*rows)[0].updated_at, 9);
  EXPECT_EQ((*rows)[0].updated_by, "ops");
}

// An (event, sink) is written once; due notices come oldest first; an update is kept; a job's
// notices include its group's.
TEST_P(StoreContractTest, NoticesAreWrittenOnceAndDeliveredInOrder) {
  const SubmitResult group = MustSubmit(MakeSubmission(2, true));
  const int64_t first = group.ids[0];
  Batch b;
  b.notices.push_back(notify_test::Notice("job-1.1.end", "email", first, kT0 + 20));
  b.notices.push_back(notify_test::Notice("job-1.1.end", "webhook", first, kT0 + 10));
  b.notices.push_back(
      notify_test::Notice("group-x.end", "email", group.ids[1], kT0 + 30, group.group));
  MustCommit(b);
  MustCommit(b);  // written again (a retried commit): ignored
  Result<std::vector<NoticeRow>> due = store_->DueNotices(kT0 + 25, 10);
  ASSERT_TRUE(due.ok()) << due.status().message();
  ASSERT_EQ(due->size(), 2u);
  EXPECT_EQ((*due)[0].sink, "webhook");
  EXPECT_EQ((*due)[1].sink, "email");
  NoticeUpdate sent{.seq = (*due)[0].seq,
                    .state = "sent",
                    .attempts = 1,
                    .next_at = kT0 + 10,
                    .last_error = "",
                    .sent_at = kT0 + 26};
  ASSERT_TRUE(store_->UpdateNotice(sent).ok());
  NoticeUpdate retry{.seq = (*due)[1].seq,
                     .state = "pending",
                     .attempts = 1,
                     .next_at = kT0 + 1000,
                     .last_error = "refused"};
  ASSERT_TRUE(store_->UpdateNotice(retry).ok());
  due = store_->DueNotices(kT0 + 100, 10);
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ((*due)[0].event_id, "group-x.end");
  Result<std::vector<NoticeRow>> of_job = store_->ListNotices("alice", first, 10);
  ASSERT_TRUE(of_job.ok()) << of_job.status().message();
  ASSERT_EQ(of_job->size(), 3u);  // its two, and its group's summary; newest first
  EXPECT_EQ((*of_job)[0].event_id, "group-x.end");
  EXPECT_EQ((*of_job)[0].group, group.group);
  EXPECT_EQ((*of_job)[1].sink, "webhook");  // written after the email one
  EXPECT_EQ((*of_job)[1].state, "sent");
  EXPECT_EQ((*of_job)[1].sent_at, kT0 + 26);
  EXPECT_EQ((*of_job)[2].last_error, "refused");
  EXPECT_TRUE(store_->ListNotices("bob", std::nullopt, 10)->empty());
  EXPECT_EQ(store_->ListNotices("", std::nullopt, 10)->size(), 3u);
}

}  // namespace
}  // namespace berth
