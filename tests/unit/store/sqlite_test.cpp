// The RAII layer under the store: transactions roll back unless committed, text binds keep ""
// distinct from NULL, and failures carry SQLite's own message.
#include "store/sqlite.h"

#include <gtest/gtest.h>

#include "store_test_util.h"

namespace berth {
namespace {

using store_test::TempDir;

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(dir_.File("t.db"));
    ASSERT_TRUE(db.ok()) << db.status().message();
    db_ = std::move(*db);
    ASSERT_TRUE(db_->Exec("CREATE TABLE t (v TEXT)").ok());
  }

  TempDir dir_;
  std::unique_ptr<SqliteDb> db_;
};

TEST_F(SqliteTest, TransactionRollsBackUnlessCommitted) {
  {
    Result<Transaction> txn = Transaction::Begin(*db_, Transaction::Mode::kWrite);
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE(db_->Exec("INSERT INTO t VALUES ('dropped')").ok());
  }  // destroyed without Commit
  {
    Result<Transaction> txn = Transaction::Begin(*db_, Transaction::Mode::kWrite);
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE(db_->Exec("INSERT INTO t VALUES ('kept')").ok());
    ASSERT_TRUE(txn->Commit().ok());
  }
  Result<std::string> v = db_->QueryText("SELECT group_concat(v) FROM t");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "kept");
}

TEST_F(SqliteTest, EmptyTextIsNotNull) {
  Result<StatementRef> insert = db_->Cached("INSERT INTO t VALUES (?1)");
  ASSERT_TRUE(insert.ok());
  ASSERT_TRUE((*insert)->Bind(1, std::string_view()).Run().ok());
  EXPECT_EQ(store_test::QueryInt(*db_, "SELECT COUNT(*) FROM t WHERE v = ''"), 1);
  EXPECT_EQ(store_test::QueryInt(*db_, "SELECT COUNT(*) FROM t WHERE v IS NULL"), 0);
}

TEST_F(SqliteTest, CachedStatementIsResetWhenTheLoanEnds) {
  ASSERT_TRUE(db_->Exec("INSERT INTO t VALUES ('a'), ('b')").ok());
  for (int round = 0; round < 2; ++round) {
    Result<StatementRef> select = db_->Cached("SELECT v FROM t ORDER BY v");
    ASSERT_TRUE(select.ok());
    Result<bool> row = (*select)->Step();  // read one row of two, then drop the loan
    ASSERT_TRUE(row.ok() && *row);
    EXPECT_EQ((*select)->Text(0), "a") << "round " << round;
  }
}

TEST_F(SqliteTest, ErrorsCarrySqliteMessageAndPath) {
  Status st = db_->Exec("INSERT INTO missing VALUES (1)");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_NE(st.message().find("no such table: missing"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(dir_.File("t.db")), std::string::npos) << st.message();
}

TEST(SqliteOpenTest, MissingDirectoryIsAnErrorNamingThePath) {
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open("/nonexistent-berth-dir/x.db");
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("/nonexistent-berth-dir/x.db"), std::string::npos);
  EXPECT_NE(db.status().message().find("unable to open database file"), std::string::npos)
      << db.status().message();
}

// The row loop: every row once, in order; the first error a row returns ends the loop with it;
// a statement's one row, or NotFound with the caller's words.
TEST_F(SqliteTest, ForEachRowReadsEveryRowAndStopsAtTheFirstError) {
  ASSERT_TRUE(db_->Exec("INSERT INTO t VALUES ('a'), ('b'), ('c')").ok());
  Result<StatementRef> select = db_->Cached("SELECT v FROM t ORDER BY v");
  ASSERT_TRUE(select.ok());
  std::string seen;
  Status all = (*select)->ForEachRow([&]() -> Status {
    seen += (*select)->Text(0);
    return Status::Ok();
  });
  EXPECT_TRUE(all.ok());
  EXPECT_EQ(seen, "abc");

  (*select)->Reset();
  seen.clear();
  Status stopped = (*select)->ForEachRow([&]() -> Status {
    seen += (*select)->Text(0);
    return seen.size() == 2 ? Status::Internal("bad row") : Status::Ok();
  });
  EXPECT_EQ(stopped.message(), "bad row");
  EXPECT_EQ(seen, "ab");

  Result<StatementRef> one = db_->Cached("SELECT v FROM t WHERE v = ?1");
  ASSERT_TRUE(one.ok());
  (*one)->Bind(1, std::string_view("b"));
  ASSERT_TRUE((*one)->StepToRow("no b").ok());
  EXPECT_EQ((*one)->Text(0), "b");
  (*one)->Reset();
  (*one)->Bind(1, std::string_view("z"));
  Status none = (*one)->StepToRow("no z");
  EXPECT_EQ(none.code(), Code::kNotFound);
  EXPECT_EQ(none.message(), "no z");
}

}  // namespace
}  // namespace berth
