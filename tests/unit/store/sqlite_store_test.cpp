// SqliteStore: what only the SQLite backend does, against a real database file in a temp directory
// per test: schema versions and their migrations (PRAGMA user_version), WAL mode, an unopenable
// path, committed work surviving a kill -9 of the process. The Store contract itself (submit,
// commit, listings, usage, ...) is tested against every backend in store_contract_test.cpp. Where a
// test needs to see the file as another process would, it opens a second, raw connection beside
// the store's.
#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "store/schema.h"
#include "store_test_util.h"

namespace berth {
namespace {

using namespace store_test;  // NOLINT: the shared times, submissions and usage records

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

  TempDir dir_;
  std::string path_ = dir_.File("berth.db");
  std::unique_ptr<Store> store_;
};

// ---- Schema and durability ----

// A database as berth with schema v2 left it: users (no caps) and a token. Opening it migrates it
// to v3: the users keep their rows and get no caps (no limit), and teams and usage start empty.
TEST_F(SqliteStoreTest, MigrationFromV2KeepsUsersWithNoCaps) {
  const std::string path = dir_.File("v2.db");
  {
    Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.status().message();
    Status st = MigrateSchemaTo(**db, 2);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(QueryInt(**db, "PRAGMA user_version"), 2);
    ASSERT_TRUE((*db)
                    ->Exec("INSERT INTO users(name, role, max_priority, team, updated_at, "
                           "updated_by) VALUES ('ada', 'admin', 50, 'vision', 1, 'root'), "
                           "('bob', 'user', 0, '', 2, 'ada')")
                    .ok());
    ASSERT_TRUE((*db)
                    ->Exec("INSERT INTO tokens(name, user, hash, created_at, created_by) "
                           "VALUES ('t1', 'bob', 'sha256:00', 3, 'ada')")
                    .ok());
  }
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::unique_ptr<SqliteDb> raw = OpenRaw(path);
  EXPECT_EQ(QueryInt(*raw, "PRAGMA user_version"), kSchemaVersion);

  Result<std::vector<UserRow>> users = (*store)->LoadUsers();
  ASSERT_TRUE(users.ok()) << users.status().message();
  ASSERT_EQ(users->size(), 2u);
  EXPECT_EQ((*users)[0].name, "ada");
  EXPECT_EQ((*users)[0].role, Role::kAdmin);
  EXPECT_EQ((*users)[0].max_priority, 50);
  EXPECT_EQ((*users)[0].team, "vision");
  EXPECT_EQ((*users)[0].updated_by, "root");
  EXPECT_EQ((*users)[1].name, "bob");
  for (const UserRow& user : *users) {
    EXPECT_FALSE(user.max_running_gpus.has_value()) << user.name;
    EXPECT_FALSE(user.max_pending_jobs.has_value()) << user.name;
  }
  Result<std::vector<TokenRow>> tokens = (*store)->LoadTokens();
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  EXPECT_EQ(tokens->size(), 1u);
  Result<std::vector<TeamRow>> teams = (*store)->LoadTeams();
  ASSERT_TRUE(teams.ok()) << teams.status().message();
  EXPECT_TRUE(teams->empty());

  // The new tables work on the migrated file.
  Batch batch;
  batch.usage = {Use("bob", "", "H100", 1'000, 0, kH0, kH0 + kHour)};
  ASSERT_TRUE((*store)->Commit(batch).ok());
  Result<std::vector<UsageRow>> rows = (*store)->QueryUsage({.since = kH0, .until = kH0 + kHour});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].gpu_seconds.at("H100"), 3600);
}

TEST(SchemaTest, MigrateSchemaToStopsAtTheTargetAndNeverGoesBack) {
  TempDir dir;
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(dir.File("berth.db"));
  ASSERT_TRUE(db.ok()) << db.status().message();
  ASSERT_TRUE(MigrateSchemaTo(**db, 1).ok());
  EXPECT_EQ(QueryInt(**db, "PRAGMA user_version"), 1);
  ASSERT_TRUE(MigrateSchemaTo(**db, kSchemaVersion).ok());
  EXPECT_EQ(QueryInt(**db, "PRAGMA user_version"), kSchemaVersion);
  ASSERT_TRUE(MigrateSchemaTo(**db, 1).ok());  // already past it: left as it is
  EXPECT_EQ(QueryInt(**db, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(MigrateSchemaTo(**db, kSchemaVersion + 1).code(), Code::kInvalidArgument);
}

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

// Commits do not checkpoint the WAL themselves (that cost ~10 ms with its syncs, inside one big
// submission in three): the store's own thread does, between them. Eight 40,000-job submissions
// (each takes the WAL past the 1000 pages that call for a checkpoint), with a pause after each as a
// server has between requests, all reach the database file, and the WAL stays near one
// submission's size, starting over after each checkpoint.
TEST_F(SqliteStoreTest, TheWalIsCheckpointedBesideTheCommits) {
  auto* sqlite = dynamic_cast<SqliteStore*>(store_.get());
  ASSERT_NE(sqlite, nullptr);
  const WalCheckpointer& checkpointer = sqlite->checkpointer();
  uintmax_t wal_max = 0;
  for (int i = 0; i < 8; ++i) {
    const int64_t done = checkpointer.background_checkpoints();
    MustSubmit(MakeSubmission(40'000, true));
    wal_max = std::max(wal_max, std::filesystem::file_size(path_ + "-wal"));
    for (int waited = 0; checkpointer.background_checkpoints() == done && waited < 10'000;
         waited += 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  EXPECT_EQ(checkpointer.background_checkpoints(), 8);
  EXPECT_EQ(checkpointer.commit_checkpoints(), 0);
  const uintmax_t db_size = std::filesystem::file_size(path_);
  EXPECT_GT(db_size, 32u << 20) << "the jobs did not reach the database file";
  EXPECT_LT(wal_max, db_size / 4) << "the WAL did not start over";
  EXPECT_EQ(Count("jobs"), 320'000);
}

// Submissions with no pause between them leave the thread no time to finish a checkpoint: then a
// commit catches up itself once the WAL is kCatchUpFactor times the usual size, so it stays
// bounded.
TEST_F(SqliteStoreTest, TheWalStaysBoundedUnderWritesWithNoPause) {
  auto* sqlite = dynamic_cast<SqliteStore*>(store_.get());
  ASSERT_NE(sqlite, nullptr);
  uintmax_t wal_max = 0;
  for (int i = 0; i < 40; ++i) {
    MustSubmit(MakeSubmission(10'000, true));
    wal_max = std::max(wal_max, std::filesystem::file_size(path_ + "-wal"));
  }
  const uintmax_t db_size = std::filesystem::file_size(path_);
  EXPECT_LT(wal_max, db_size / 2) << "the WAL grew with every submission";
  EXPECT_EQ(Count("jobs"), 400'000);
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
