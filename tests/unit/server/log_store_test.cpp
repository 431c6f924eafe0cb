// The server's copy of jobs' output: appends are idempotent by offset, gaps are refused.
#include "server/log_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>

#include "fakes/fake_clock.h"

namespace berth {
namespace {

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/berth-logstore-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(LogStoreTest, AResentChunkIsNotStoredTwice) {
  LogStore logs(dir_);
  EXPECT_EQ(*logs.Append(7, 1, 0, 0, "hello "), 6);
  // The agent did not see the answer and sends "hello world" again from offset 0.
  EXPECT_EQ(*logs.Append(7, 1, 0, 0, "hello world"), 11);
  EXPECT_EQ(logs.Read(7, 1, 0, 0, 100), "hello world");
  EXPECT_EQ(logs.Read(7, 1, 0, 6, 100), "world");
}

TEST_F(LogStoreTest, AGapIsRefused) {
  LogStore logs(dir_);
  ASSERT_TRUE(logs.Append(7, 1, 0, 0, "abc").ok());
  auto r = logs.Append(7, 1, 0, 10, "xyz");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(logs.Size(7, 1, 0), 3);
}

TEST_F(LogStoreTest, AttemptsAndRanksAreSeparate) {
  LogStore logs(dir_);
  ASSERT_TRUE(logs.Append(7, 1, 0, 0, "first").ok());
  ASSERT_TRUE(logs.Append(7, 2, 0, 0, "second").ok());
  ASSERT_TRUE(logs.Append(7, 2, 1, 0, "rank1").ok());
  EXPECT_EQ(logs.Read(7, 1, 0, 0, 100), "first");
  EXPECT_EQ(logs.Read(7, 2, 1, 0, 100), "rank1");
  EXPECT_EQ(logs.Read(8, 1, 0, 0, 100), "");
  // A new LogStore over the same directory sees what was written.
  LogStore again(dir_);
  EXPECT_EQ(again.Size(7, 2, 0), 6);
}

// A user looping `GET /v1/jobs/ID/logs?attempt=N` over N sizes a log per N: the cache of sizes
// stays at its bound (it grew by an entry per log ever sized or appended).
TEST_F(LogStoreTest, SizingManyLogsKeepsTheCacheBounded) {
  LogStore logs(dir_);
  ASSERT_TRUE(logs.Append(7, 1, 0, 0, "abc").ok());
  for (int attempt = 1; attempt <= 3 * static_cast<int>(LogStore::kCachedLogs); ++attempt) {
    logs.Size(7, attempt, 0);
  }
  EXPECT_LE(logs.cached(), LogStore::kCachedLogs);
  // A log that fell out of the cache is read again from its file.
  EXPECT_EQ(logs.Size(7, 1, 0), 3);
  ASSERT_TRUE(logs.Append(7, 1, 0, 3, "def").ok());
  EXPECT_EQ(logs.Read(7, 1, 0, 0, 100), "abcdef");
}

// Rank 0 of a multi-node job wrote half a line, then its cache entry was evicted: the rest of the
// line still gets no second prefix in the interleaved log (the state came from the log's last
// byte).
TEST_F(LogStoreTest, AnInterleavedLineContinuesAfterItsRankFellOutOfTheCache) {
  LogStore logs(dir_);
  ASSERT_TRUE(logs.Append(9, 1, 0, 0, "ab", "(rank 0) ").ok());
  for (int job = 100; job < 100 + static_cast<int>(LogStore::kCachedLogs) + 10; ++job) {
    logs.Size(job, 1, 0);
  }
  ASSERT_TRUE(logs.Append(9, 1, 1, 0, "x\n", "(rank 1) ").ok());
  ASSERT_TRUE(logs.Append(9, 1, 0, 2, "c\nd\n", "(rank 0) ").ok());
  EXPECT_EQ(logs.Read(9, 1, LogStore::kAllRanks, 0, 100), "(rank 0) ab(rank 1) x\nc\n(rank 0) d\n");
}

// A job's output is its owner's: the server's log files are not readable by other local users,
// whatever the daemon's umask.
TEST_F(LogStoreTest, LogFilesArePrivate) {
  mode_t old = ::umask(0022);
  LogStore logs(dir_ + "/logs");
  ASSERT_TRUE(logs.Append(7, 1, 0, 0, "secret").ok());
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/logs/7/attempt-1.rank-0.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ + "/logs/7").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((dir_ + "/logs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// `berth logs --timestamps`: each line carries the second it arrived in; bytes arriving within
// the same second add no record; a line that began in an earlier append keeps its first time; a
// read from the middle of a line prefixes only the lines that start in it.
TEST_F(LogStoreTest, LinesAreStampedWithTheSecondTheyArrived) {
  testing::FakeClock clock;
  LogStore logs(dir_, clock);
  const std::string t0 = FormatRfc3339(clock.Now()).substr(0, 19) + "Z ";
  ASSERT_TRUE(logs.Append(7, 1, 0, 0, "one\ntw").ok());
  clock.Advance(300);
  ASSERT_TRUE(logs.Append(7, 1, 0, 6, "o\n").ok());  // the same second: no record
  clock.Advance(2000);
  const std::string t2 = FormatRfc3339(clock.Now()).substr(0, 19) + "Z ";
  ASSERT_TRUE(logs.Append(7, 1, 0, 8, "three\nfour\n").ok());
  EXPECT_EQ(logs.Size(7, 1, 0), 19);
  size_t raw = 0;
  EXPECT_EQ(logs.ReadStamped(7, 1, 0, 0, 100, &raw),
            t0 + "one\n" + t0 + "two\n" + t2 + "three\n" + t2 + "four\n");
  EXPECT_EQ(raw, 19u);
  EXPECT_EQ(logs.ReadStamped(7, 1, 0, 1, 7, &raw), "ne\n" + t0 + "two\n");
  EXPECT_EQ(raw, 7u);
  // A second LogStore over the same files reads the same times, and appends after them.
  LogStore again(dir_, clock);
  clock.Advance(1000);
  ASSERT_TRUE(again.Append(7, 1, 0, 19, "five\n").ok());
  const std::string t3 = FormatRfc3339(clock.Now()).substr(0, 19) + "Z ";
  EXPECT_EQ(again.ReadStamped(7, 1, 0, 14, 100, &raw), t2 + "four\n" + t3 + "five\n");
  // The output itself is unchanged.
  EXPECT_EQ(again.Read(7, 1, 0, 0, 100), "one\ntwo\nthree\nfour\nfive\n");
}

// A multi-node job's interleaved log is stamped too.
TEST_F(LogStoreTest, TheInterleavedLogIsStamped) {
  testing::FakeClock clock;
  LogStore logs(dir_, clock);
  const std::string t0 = FormatRfc3339(clock.Now()).substr(0, 19) + "Z ";
  ASSERT_TRUE(logs.Append(9, 1, 0, 0, "a\n", "[0] ").ok());
  ASSERT_TRUE(logs.Append(9, 1, 1, 0, "b\n", "[1] ").ok());
  size_t raw = 0;
  EXPECT_EQ(logs.ReadStamped(9, 1, LogStore::kAllRanks, 0, 100, &raw),
            t0 + "[0] a\n" + t0 + "[1] b\n");
}

}  // namespace
}  // namespace berth
