// A thin RAII layer over the SQLite3 C API: a connection (SqliteDb), prepared statements
// (Statement) and transactions (Transaction), with every failure turned into a Status whose message
// carries sqlite3_errmsg. Only src/store/ uses it; nothing here knows about jobs.
//
// Thread-safety: none. A SqliteDb and everything obtained from it must be used by one thread at a
// time; SqliteStore guarantees that with its mutex. The connection is opened with
// SQLITE_OPEN_NOMUTEX because that outer mutex already serializes every call, so SQLite's own
// locking would be pure overhead.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace berth {

class SqliteDb;

// One prepared statement. Move-only; finalized on destruction. Binding indexes are 1-based and
// column indexes 0-based, as in SQLite. Text is bound as a copy (SQLITE_TRANSIENT), so temporaries
// are safe.
class Statement {
 public:
  Statement(SqliteDb* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // A failed bind (out-of-range index: a programming error; out of memory) is remembered and
  // reported by the next Step()/Run(), so call sites can bind without checking each call.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, double value);  // a NaN is stored as NULL (SQLite's rule)
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, const std::optional<int64_t>& value);  // NULL when empty
  Statement& BindNull(int index);

  // Advances: true when a row is ready to read, false when the statement is done. On failure the
  // status quotes the start of the statement's SQL and sqlite3_errmsg.
  Result<bool> Step();
  // Steps until done, ignoring rows: for INSERT/UPDATE/DELETE.
  Status Run();
  // Steps through every row, calling `row()` for each (it reads the columns from this statement);
  // stops at the first error, a step's or one `row` returns. The loop a SELECT of many rows needs.
  template <class RowFn>
  Status ForEachRow(RowFn&& row) {
    for (;;) {
      Result<bool> ready = Step();
      if (!ready.ok()) return ready.status();
      if (!*ready) return Status::Ok();
      if (Status st = row(); !st.ok()) return st;
    }
  }
  // Steps to the statement's one row: Ok when it is ready to read, NotFound(`missing`) when there
  // is none, the step's error otherwise.
  Status StepToRow(const std::string& missing);
  // Makes the statement ready to run again and drops its bindings.
  void Reset();

  bool IsNull(int col) const;
  int64_t Int(int col) const;
  std::optional<int64_t> OptInt(int col) const;  // nullopt when NULL
  double Real(int col) const;                    // an INTEGER column is converted; 0 when NULL
  std::string Text(int col) const;               // "" when NULL
  // The text without a copy: valid until the next Step(), Reset() or read of the same column as
  // another type. For hot loops that look the text up rather than keep it.
  std::string_view TextView(int col) const;

 private:
  SqliteDb* db_;
  sqlite3_stmt* stmt_;
  int bind_error_ = 0;  // first failed sqlite3_bind_* result since the last Reset
};

// A cached statement on loan: resets it (and drops its bindings) when the loan ends, so that a
// SELECT left half-read never keeps a read snapshot open and the next borrower starts clean.
class StatementRef {
 public:
  explicit StatementRef(Statement* stmt) : stmt_(stmt) {}
  ~StatementRef() {
    if (stmt_ != nullptr) stmt_->Reset();
  }
  StatementRef(StatementRef&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)) {}
  StatementRef& operator=(StatementRef&&) = delete;
  StatementRef(const StatementRef&) = delete;
  StatementRef& operator=(const StatementRef&) = delete;

  Statement* operator->() const { return stmt_; }
  Statement& operator*() const { return *stmt_; }

 private:
  Statement* stmt_;
};

// One SQLite connection. Owns the sqlite3 handle and a cache of prepared statements keyed by SQL
// text.
class SqliteDb {
 public:
  // Opens (creating if `create`) the database file at `path` read-write. Errors name the path.
  static Result<std::unique_ptr<SqliteDb>> Open(const std::string& path, bool create = true);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more statements that return no rows we need (DDL, PRAGMA, BEGIN/COMMIT).
  Status Exec(std::string_view sql);
  // Runs a query whose answer is one integer (e.g. "PRAGMA user_version", "SELECT COUNT(*) ...").
  Result<int64_t> QueryInt(std::string_view sql);
  // Runs a query whose answer is one text value (e.g. "PRAGMA journal_mode=WAL").
  Result<std::string> QueryText(std::string_view sql);

  // A fresh statement, owned by the caller. For SQL that runs once.
  Result<Statement> Prepare(std::string_view sql);
  // The cached statement for `sql`, prepared on first use and kept for the life of the connection:
  // the hot paths (Submit's inserts) must not re-parse SQL per row.
  Result<StatementRef> Cached(const std::string& sql);

  int64_t LastInsertRowid() const;
  int Changes() const;  // rows changed by the last INSERT/UPDATE/DELETE
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // A Status for the last failure on this connection: "<path>: <what>: <sqlite3_errmsg> (code N)".
  // SQLITE_BUSY/LOCKED become kUnavailable (worth retrying); everything else kInternal.
  Status Error(std::string_view what, int rc) const;

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  // Node-based map: Statement addresses stay valid while the map grows.
  std::unordered_map<std::string, Statement> cache_;
};

// The error for a row of `db` that cannot be read back (`what`: which row), from its decoder's.
Status Corrupt(const SqliteDb& db, const std::string& what, const Status& cause);

// A transaction that rolls back unless Commit() succeeds. Write transactions use BEGIN IMMEDIATE so
// that the write lock is taken (or waited for, up to the busy timeout) at the start rather than
// failing with SQLITE_BUSY half-way through when a read would have to be upgraded.
class Transaction {
 public:
  enum class Mode { kRead, kWrite };

  static Result<Transaction> Begin(SqliteDb& db, Mode mode);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Commits. On failure the transaction is rolled back when this object is destroyed.
  Status Commit();

 private:
  explicit Transaction(SqliteDb* db) : db_(db) {}
  SqliteDb* db_;  // null once committed (or moved from)
};

}  // namespace berth
