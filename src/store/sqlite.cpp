#include "store/sqlite.h"

#include <sqlite3.h>

#include <string>

namespace berth {
namespace {

// How much of a statement's SQL an error message quotes: enough to recognise it, short enough to
// read.
constexpr size_t kSqlQuoteChars = 60;

std::string QuoteSql(const char* sql) {
  std::string s = sql == nullptr ? "" : sql;
  for (char& c : s) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  if (s.size() > kSqlQuoteChars) s = s.substr(0, kSqlQuoteChars) + "...";
  return "\"" + s + "\"";
}

}  // namespace

// ---- Statement ----

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), bind_error_(other.bind_error_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    bind_error_ = other.bind_error_;
  }
  return *this;
}

Statement& Statement::Bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  // sqlite3_bind_text64 binds NULL for a null pointer; an empty string_view may have one, and ""
  // must stay "" (NOT NULL columns).
  const char* data = text.data() != nullptr ? text.data() : "";
  int rc = sqlite3_bind_text64(stmt_, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, const std::optional<int64_t>& value) {
  return value.has_value() ? Bind(index, *value) : BindNull(index);
}

Statement& Statement::BindNull(int index) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Result<bool> Statement::Step() {
  if (bind_error_ != 0) {
    return Status::Internal(db_->path() + ": binding parameters of " +
                            QuoteSql(sqlite3_sql(stmt_)) + ": " + sqlite3_errstr(bind_error_));
  }
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(QuoteSql(sqlite3_sql(stmt_)), rc);
}

Status Statement::StepToRow(const std::string& missing) {
  Result<bool> ready = Step();
  if (!ready.ok()) return ready.status();
  if (!*ready) return Status::NotFound(missing);
  return Status::Ok();
}

Status Statement::Run() {
  for (;;) {
    Result<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return Status::Ok();
  }
}

void Statement::Reset() {
  // sqlite3_reset repeats the last step's error, which Step() has already reported.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = 0;
}

bool Statement::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

int64_t Statement::Int(int col) const { return sqlite3_column_int64(stmt_, col); }

std::optional<int64_t> Statement::OptInt(int col) const {
  if (IsNull(col)) return std::nullopt;
  return sqlite3_column_int64(stmt_, col);
}

double Statement::Real(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Statement::Text(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

std::string_view Statement::TextView(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  if (text == nullptr) return {};
  return std::string_view(reinterpret_cast<const char*>(text),
                          static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

// ---- SqliteDb ----

Result<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path, bool create) {
  sqlite3* handle = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &handle, flags, nullptr);
  // Even on failure sqlite3_open_v2 hands back a handle (it carries the message); `db` owns it.
  std::unique_ptr<SqliteDb> db(new SqliteDb(handle, path));
  if (handle == nullptr) return Status::Internal(path + ": cannot open database: out of memory");
  if (rc != SQLITE_OK) return db->Error("cannot open database", rc);
  sqlite3_extended_result_codes(handle, 1);
  return db;
}

SqliteDb::~SqliteDb() {
  cache_.clear();  // statements must be finalized before the connection closes
  sqlite3_close(db_);
}

Status SqliteDb::Exec(std::string_view sql) {
  std::string text(sql);
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(QuoteSql(text.c_str()), rc);
  return Status::Ok();
}

Result<int64_t> SqliteDb::QueryInt(std::string_view sql) {
  Result<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  Result<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return Status::Internal(path_ + ": " + QuoteSql(std::string(sql).c_str()) + ": no row");
  return stmt->Int(0);
}

Result<std::string> SqliteDb::QueryText(std::string_view sql) {
  Result<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  Result<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return Status::Internal(path_ + ": " + QuoteSql(std::string(sql).c_str()) + ": no row");
  return stmt->Text(0);
}

Result<Statement> SqliteDb::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error("preparing " + QuoteSql(std::string(sql).c_str()), rc);
  }
  return Statement(this, stmt);
}

Result<StatementRef> SqliteDb::Cached(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    // PERSISTENT: the statement lives as long as the connection, so SQLite may use memory meant for
    // that.
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return Error("preparing " + QuoteSql(sql.c_str()), rc);
    }
    it = cache_.emplace(sql, Statement(this, stmt)).first;
  }
  return StatementRef(&it->second);
}

int64_t SqliteDb::LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }

int SqliteDb::Changes() const { return sqlite3_changes(db_); }

Status SqliteDb::Error(std::string_view what, int rc) const {
  std::string message = path_ + ": " + std::string(what) + ": " +
                        (db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc)) + " (code " +
                        std::to_string(rc) + ")";
  int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    return Status::Unavailable(std::move(message));
  }
  return Status::Internal(std::move(message));
}

// ---- Transaction ----

Result<Transaction> Transaction::Begin(SqliteDb& db, Mode mode) {
  BERTH_RETURN_IF_ERROR(db.Exec(mode == Mode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  // Some errors (SQLITE_FULL, IOERR, NOMEM, ...) already rolled the transaction back; a second
  // ROLLBACK would only fail with "no transaction is active".
  if (db_ != nullptr && sqlite3_get_autocommit(db_->handle()) == 0) {
    sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

Status Transaction::Commit() {
  BERTH_RETURN_IF_ERROR(db_->Exec("COMMIT"));
  db_ = nullptr;
  return Status::Ok();
}

Status Corrupt(const SqliteDb& db, const std::string& what, const Status& cause) {
  return Status::Internal(db.path() + ": " + what + ": " + cause.message());
}

}  // namespace berth
