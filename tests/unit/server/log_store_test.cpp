// The server's copy of jobs' output: appends are idempotent by offset, gaps are refused.
#include "server/log_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

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

}  // namespace
}  // namespace berth
