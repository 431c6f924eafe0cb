// A thin RAII layer over libpq: a connection (PgConn) with a cache of prepared statements, query
// results (PgResult), text-format parameters (PgParams), a pipeline that sends many statements in
// one round trip (PgConn::RunPipeline), and transactions (PgTransaction). Every failure becomes a
// Status: a lost or refused connection is kUnavailable (worth retrying; the next call reconnects),
// anything the server reports is kInternal with its SQLSTATE and message. Only src/store/ uses it;
// nothing here knows about jobs.
//
// Thread-safety: none. A PgConn and everything obtained from it must be used by one thread at a
// time; PgStore guarantees that with one mutex per connection.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

struct pg_conn;
struct pg_result;

namespace berth {

// A PostgreSQL connection string fit for logs and status pages: the password is left out wherever
// libpq accepts one — "postgresql://user:secret@host/db" -> "postgresql://user@host/db", a
// "?password=secret" (or "&password=") query parameter dropped, and in the keyword form
// "host=h password=secret" the value replaced by "***".
std::string PgUrlWithoutPassword(const std::string& url);

// Parameters $1, $2, ... in text format (PostgreSQL parses them by the statement's types).
class PgParams {
 public:
  PgParams& Add(int64_t value);
  PgParams& Add(int value) { return Add(int64_t{value}); }
  PgParams& Add(double value);
  PgParams& Add(std::string_view text);
  PgParams& Add(const char* text) { return Add(std::string_view(text)); }
  PgParams& Add(const std::optional<int64_t>& value);  // NULL when empty
  PgParams& AddNull();

  size_t size() const { return values_.size(); }
  // Pointers into this object, valid while it lives and is not changed.
  std::vector<const char*> Pointers() const;

 private:
  std::vector<std::optional<std::string>> values_;
};

// One result, owned. Row and column indexes are 0-based.
class PgResult {
 public:
  explicit PgResult(pg_result* result = nullptr) : result_(result) {}
  ~PgResult();
  PgResult(PgResult&& other) noexcept : result_(std::exchange(other.result_, nullptr)) {}
  PgResult& operator=(PgResult&& other) noexcept;
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;

  int rows() const;
  // Rows an INSERT/UPDATE/DELETE changed.
  int64_t Affected() const;
  bool IsNull(int row, int col) const;
  int64_t Int(int row, int col) const;  // 0 when NULL or not a number
  std::optional<int64_t> OptInt(int row, int col) const;
  double Real(int row, int col) const;
  std::string Text(int row, int col) const;  // "" when NULL
  std::string_view TextView(int row, int col) const;
  pg_result* raw() const { return result_; }

 private:
  pg_result* result_;
};

// One statement of a pipeline.
struct PgCall {
  std::string sql;
  PgParams params;
  // When set, the statement must change exactly this many rows, else the pipeline fails with
  // kNotFound and this message (an UPDATE of a row that does not exist).
  std::optional<int64_t> expect_rows;
  std::string not_found;
};

class PgConn {
 public:
  // Connects to `conninfo` (a postgresql:// URI or key=value string; libpq's syntax). Defaults
  // that the string may override: a 5 s connect timeout and TCP keepalives that notice a dead peer
  // within ~15 s. A server that cannot be reached or refuses is kUnavailable; a malformed string
  // kInvalidArgument. Errors name the server without the password. A reconnect (see broken()) is
  // a new session: what a SET changed is gone; pass such settings as `session_options`
  // ("-c lock_timeout=2s"), which every reconnect applies again (the string's own "options" win).
  static Result<std::unique_ptr<PgConn>> Connect(const std::string& conninfo,
                                                 std::string_view session_options = "");
  ~PgConn();
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  // Runs one or more statements without parameters (DDL, BEGIN/COMMIT, SET).
  Status Exec(std::string_view sql);
  // Runs `sql` with `params` as a statement prepared on this connection on first use.
  Result<PgResult> Query(const std::string& sql, const PgParams& params = {});
  // Query() for an INSERT/UPDATE/DELETE.
  Status Run(const std::string& sql, const PgParams& params = {});
  // Sends `calls` as prepared statements in pipeline mode, reading their results after every few
  // hundred so that neither side's socket buffer fills: one round trip per chunk instead of one
  // per statement. Stops at the first failure (which aborts the surrounding transaction). Use
  // inside a PgTransaction.
  Status RunPipeline(const std::vector<PgCall>& calls);

  // "host:port/dbname", for messages.
  const std::string& where() const { return where_; }
  // Whether the connection is known to be dead; the next Query/Exec tries to reconnect first
  // (outside a transaction only: a transaction cannot go on in another session).
  bool broken() const;

  // A Status for the last failure: kUnavailable when the connection is gone or the server is
  // shutting down or refusing connections, kInternal otherwise.
  Status Error(std::string_view what, const pg_result* result) const;

 private:
  friend class PgTransaction;  // marks in_transaction_

  explicit PgConn(pg_conn* conn);
  // Reconnects a broken connection (the statement cache is dropped with it), first noticing one
  // that the server closed while it was idle; outside a transaction only.
  Status EnsureConnected();
  // Reads what an idle connection has received: the server ends a session (a restart, a fast
  // shutdown, an idle timeout) by sending why and closing the socket, which libpq sees only here.
  void NoticeClosedWhileIdle();
  // The prepared statement's name for `sql`, preparing it on first use.
  Result<std::string> Prepared(const std::string& sql);

  pg_conn* conn_;
  std::string where_;
  std::unordered_map<std::string, std::string> prepared_;  // SQL text -> statement name
  int next_statement_ = 0;
  bool in_transaction_ = false;  // a PgTransaction is open on this connection
};

// A transaction that rolls back unless Commit() succeeds.
class PgTransaction {
 public:
  // `isolation`: e.g. "READ COMMITTED" (default) or "REPEATABLE READ READ ONLY" for a consistent
  // snapshot across several reads.
  static Result<PgTransaction> Begin(PgConn& conn, std::string_view mode = "");
  ~PgTransaction();
  PgTransaction(PgTransaction&& other) noexcept : conn_(std::exchange(other.conn_, nullptr)) {}
  PgTransaction& operator=(PgTransaction&&) = delete;
  PgTransaction(const PgTransaction&) = delete;
  PgTransaction& operator=(const PgTransaction&) = delete;

  Status Commit();

 private:
  explicit PgTransaction(PgConn* conn) : conn_(conn) {}
  PgConn* conn_;  // null once committed (or moved from)
};

// Hex text back to bytes, for BYTEA results (`encode(x, 'hex')`); BYTEA parameters go as
// HexEncode's text (common/strings.h) with `decode($1, 'hex')`.
std::string PgUnhex(std::string_view hex);

}  // namespace berth
