#include "store/pg.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "common/strings.h"

namespace berth {
namespace {

// SQLSTATE classes that mean "not now, try again": connection exceptions (08), operator
// intervention such as a shutdown or a terminated backend (57), insufficient resources (53), and
// transaction rollbacks (40: a deadlock or serialization failure between servers sharing the
// database, which PostgreSQL resolves by failing one transaction that may simply be retried).
bool IsUnavailableState(std::string_view state) {
  // BF001: berth_fence() refused a deposed leader's write (store/pg_schema.cpp).
  return state.starts_with("08") || state.starts_with("57") || state.starts_with("53") ||
         state.starts_with("40") || state == "BF001";
}

// "PostgreSQL at HOST:PORT/DB" of a connection (never its password), for messages.
std::string WhereOf(const pg_conn* conn) {
  auto part = [](const char* v) { return std::string(v != nullptr ? v : "?"); };
  return "PostgreSQL at " + part(PQhost(conn)) + ":" + part(PQport(conn)) + "/" + part(PQdb(conn));
}

// The statements a pipeline sends before it reads their results.
constexpr size_t kPipelineChunk = 256;

}  // namespace

std::string PgUrlWithoutPassword(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) {
    // Keyword form: "host=h password=secret dbname=d" (a value may be 'quoted', with \' inside).
    std::string out = url;
    for (size_t at = 0; (at = out.find("password", at)) != std::string::npos; ++at) {
      if (at > 0 && !std::isspace(static_cast<unsigned char>(out[at - 1]))) continue;
      size_t eq = at + 8;
      while (eq < out.size() && std::isspace(static_cast<unsigned char>(out[eq]))) ++eq;
      if (eq >= out.size() || out[eq] != '=') continue;
      size_t value = eq + 1;
      while (value < out.size() && std::isspace(static_cast<unsigned char>(out[value]))) ++value;
      size_t end = value;
      if (end < out.size() && out[end] == '\'') {
        for (++end; end < out.size() && out[end] != '\''; ++end) {
          if (out[end] == '\\') ++end;
        }
        end = std::min(end + 1, out.size());
      } else {
        while (end < out.size() && !std::isspace(static_cast<unsigned char>(out[end]))) ++end;
      }
      out.replace(value, end - value, "***");
    }
    return out;
  }
  std::string out = url;
  // The query's password parameters.
  if (size_t query = out.find('?'); query != std::string::npos) {
    std::string kept;
    size_t from = query + 1;
    while (from <= out.size()) {
      size_t amp = out.find('&', from);
      if (amp == std::string::npos) amp = out.size();
      std::string param = out.substr(from, amp - from);
      if (!param.starts_with("password=") && param != "password") {
        kept += (kept.empty() ? "" : "&") + param;
      }
      from = amp + 1;
    }
    out = out.substr(0, query) + (kept.empty() ? "" : "?" + kept);
  }
  // The user info's password ("user:secret@"), before the host.
  const size_t host_end = out.find_first_of("/?", scheme + 3);
  const size_t at = out.rfind('@', host_end == std::string::npos ? out.size() : host_end);
  if (at != std::string::npos && at > scheme) {
    const size_t colon = out.find(':', scheme + 3);
    if (colon != std::string::npos && colon < at) out.erase(colon, at - colon);
  }
  return out;
}

// ---- PgParams ----

PgParams& PgParams::Add(int64_t value) {
  values_.emplace_back(std::to_string(value));
  return *this;
}

PgParams& PgParams::Add(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  values_.emplace_back(buf);
  return *this;
}

PgParams& PgParams::Add(std::string_view text) {
  values_.emplace_back(std::string(text));
  return *this;
}

PgParams& PgParams::Add(const std::optional<int64_t>& value) {
  if (!value) return AddNull();
  return Add(*value);
}

PgParams& PgParams::AddNull() {
  values_.emplace_back(std::nullopt);
  return *this;
}

std::vector<const char*> PgParams::Pointers() const {
  std::vector<const char*> out;
  out.reserve(values_.size());
  for (const std::optional<std::string>& v : values_) out.push_back(v ? v->c_str() : nullptr);
  return out;
}

// ---- PgResult ----

PgResult::~PgResult() {
  if (result_ != nullptr) PQclear(result_);
}

PgResult& PgResult::operator=(PgResult&& other) noexcept {
  if (this != &other) {
    if (result_ != nullptr) PQclear(result_);
    result_ = std::exchange(other.result_, nullptr);
  }
  return *this;
}

int PgResult::rows() const { return result_ == nullptr ? 0 : PQntuples(result_); }

int64_t PgResult::Affected() const {
  if (result_ == nullptr) return 0;
  const char* n = PQcmdTuples(result_);
  int64_t v = 0;
  std::from_chars(n, n + std::strlen(n), v);
  return v;
}

bool PgResult::IsNull(int row, int col) const { return PQgetisnull(result_, row, col) != 0; }

int64_t PgResult::Int(int row, int col) const { return OptInt(row, col).value_or(0); }

std::optional<int64_t> PgResult::OptInt(int row, int col) const {
  if (IsNull(row, col)) return std::nullopt;
  const char* text = PQgetvalue(result_, row, col);
  const int len = PQgetlength(result_, row, col);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text, text + len, v);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

double PgResult::Real(int row, int col) const {
  if (IsNull(row, col)) return 0;
  return std::strtod(PQgetvalue(result_, row, col), nullptr);
}

std::string PgResult::Text(int row, int col) const { return std::string(TextView(row, col)); }

std::string_view PgResult::TextView(int row, int col) const {
  return std::string_view(PQgetvalue(result_, row, col),
                          static_cast<size_t>(PQgetlength(result_, row, col)));
}

// ---- PgConn ----

PgConn::PgConn(pg_conn* conn) : conn_(conn), where_(WhereOf(conn)) {}

PgConn::~PgConn() { PQfinish(conn_); }

Result<std::unique_ptr<PgConn>> PgConn::Connect(const std::string& conninfo,
                                                std::string_view session_options) {
  // A malformed string is the caller's mistake, not an unreachable server: say so, and not as
  // kUnavailable, which invites retrying forever. libpq's message names the part it could not
  // parse; the string itself is left out (it may hold a password).
  char* parse_error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &parse_error);
  if (options == nullptr) {
    std::string message = parse_error != nullptr ? parse_error : "out of memory";
    PQfreemem(parse_error);
    message = Trim(message);
    return Status::Invalid("invalid PostgreSQL connection string: " + message);
  }
  PQconninfoFree(options);
  // Defaults first: the string's own settings (expanded from dbname) override them.
  std::vector<const char*> keys = {"connect_timeout",     "keepalives",       "keepalives_idle",
                                   "keepalives_interval", "keepalives_count", "application_name"};
  std::vector<const char*> values = {"5", "1", "5", "2", "5", "berth"};
  const std::string session(session_options);
  if (!session.empty()) {
    keys.push_back("options");
    values.push_back(session.c_str());
  }
  keys.push_back("dbname");
  values.push_back(conninfo.c_str());
  keys.push_back(nullptr);
  values.push_back(nullptr);
  pg_conn* conn = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
  if (conn == nullptr) return Status::Internal("PostgreSQL: out of memory connecting");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    message = Trim(message);
    const std::string where = WhereOf(conn);
    PQfinish(conn);
    return Status::Unavailable("cannot connect to " + where + ": " + message);
  }
  // Notices ("relation ... already exists, skipping") are not errors; libpq would print them to
  // stderr.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<PgConn>(new PgConn(conn));
}

bool PgConn::broken() const { return PQstatus(conn_) != CONNECTION_OK; }

Status PgConn::Error(std::string_view what, const pg_result* result) const {
  std::string message = result != nullptr ? PQresultErrorMessage(result) : "";
  if (message.empty()) message = PQerrorMessage(conn_);
  message = Trim(message);
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  std::string text = where_ + ": " + std::string(what) + ": " + message;
  if (state != nullptr) text += " (SQLSTATE " + std::string(state) + ")";
  if (broken() || (state != nullptr && IsUnavailableState(state))) {
    return Status::Unavailable(text);
  }
  return Status::Internal(text);
}

void PgConn::NoticeClosedWhileIdle() {
  // An idle session receives nothing unless the server is ending it (or reports a parameter
  // change), so this is one poll() per statement in the common case. Without it, the first
  // statement after a server restart would fail on the old session instead of reconnecting.
  const int fd = PQsocket(conn_);
  for (int i = 0; i < 4 && fd >= 0 && !broken(); ++i) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 0) <= 0) return;
    // Reads the data, or the end of the stream, which marks the connection bad.
    if (PQconsumeInput(conn_) == 0) return;
  }
}

Status PgConn::EnsureConnected() {
  if (!broken() && !in_transaction_ && PQtransactionStatus(conn_) == PQTRANS_IDLE) {
    NoticeClosedWhileIdle();
  }
  if (!broken()) return Status::Ok();
  if (in_transaction_) {
    // A new session would run the rest of the transaction's statements outside it, one by one.
    return Error("connection lost inside a transaction (it was rolled back)", nullptr);
  }
  prepared_.clear();
  PQreset(conn_);
  if (broken()) return Error("reconnect", nullptr);
  return Status::Ok();
}

Status PgConn::Exec(std::string_view sql) {
  BERTH_RETURN_IF_ERROR(EnsureConnected());
  PgResult result(PQexec(conn_, std::string(sql).c_str()));
  const ExecStatusType status = PQresultStatus(result.raw());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return Error(sql.substr(0, 60), result.raw());
  }
  return Status::Ok();
}

Result<std::string> PgConn::Prepared(const std::string& sql) {
  if (auto it = prepared_.find(sql); it != prepared_.end()) return it->second;
  std::string name = "b" + std::to_string(next_statement_++);
  PgResult result(PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr));
  if (PQresultStatus(result.raw()) != PGRES_COMMAND_OK) {
    return Error("prepare " + sql.substr(0, 60), result.raw());
  }
  prepared_.emplace(sql, name);
  return name;
}

Result<PgResult> PgConn::Query(const std::string& sql, const PgParams& params) {
  BERTH_RETURN_IF_ERROR(EnsureConnected());
  Result<std::string> name = Prepared(sql);
  if (!name.ok()) return name.status();
  const std::vector<const char*> values = params.Pointers();
  PgResult result(PQexecPrepared(conn_, name->c_str(), static_cast<int>(values.size()),
                                 values.data(), nullptr, nullptr, 0));
  const ExecStatusType status = PQresultStatus(result.raw());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return Error(sql.substr(0, 60), result.raw());
  }
  return result;
}

Status PgConn::Run(const std::string& sql, const PgParams& params) {
  Result<PgResult> result = Query(sql, params);
  return result.ok() ? Status::Ok() : result.status();
}

Status PgConn::RunPipeline(const std::vector<PgCall>& calls) {
  BERTH_RETURN_IF_ERROR(EnsureConnected());
  std::vector<std::string> names;
  names.reserve(calls.size());
  for (const PgCall& call : calls) {
    Result<std::string> name = Prepared(call.sql);
    if (!name.ok()) return name.status();
    names.push_back(std::move(*name));
  }
  if (PQenterPipelineMode(conn_) != 1) return Error("enter pipeline mode", nullptr);
  Status failed = Status::Ok();
  for (size_t start = 0; start < calls.size() && failed.ok(); start += kPipelineChunk) {
    const size_t end = std::min(calls.size(), start + kPipelineChunk);
    size_t sent = start;
    for (; sent < end; ++sent) {
      const std::vector<const char*> values = calls[sent].params.Pointers();
      if (PQsendQueryPrepared(conn_, names[sent].c_str(), static_cast<int>(values.size()),
                              values.data(), nullptr, nullptr, 0) != 1) {
        failed = Error("send " + calls[sent].sql.substr(0, 60), nullptr);
        break;
      }
    }
    const bool synced = PQpipelineSync(conn_) == 1;
    if (!synced && failed.ok()) failed = Error("pipeline sync", nullptr);
    // Every sent statement answers with its result (or PIPELINE_ABORTED after a failure) and a
    // NULL; then comes the sync's own result.
    for (size_t i = start; i < sent; ++i) {
      PgResult result(PQgetResult(conn_));
      if (result.raw() == nullptr) {
        if (failed.ok()) failed = Error("pipeline result", nullptr);
        break;
      }
      const ExecStatusType status = PQresultStatus(result.raw());
      if (failed.ok()) {
        if (status == PGRES_PIPELINE_ABORTED) {
          failed = Status::Internal(where_ + ": pipeline aborted");
        } else if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
          failed = Error(calls[i].sql.substr(0, 60), result.raw());
        } else if (calls[i].expect_rows && result.Affected() != *calls[i].expect_rows) {
          failed = Status::NotFound(where_ + ": " + calls[i].not_found);
        }
      }
      while (PGresult* extra = PQgetResult(conn_)) PQclear(extra);  // the NULL after the result
    }
    // Up to and including the sync's result. Two NULLs in a row: nothing is pending any more.
    for (int nulls = 0; synced && !broken() && nulls < 2;) {
      PgResult result(PQgetResult(conn_));
      if (result.raw() == nullptr) {
        ++nulls;
        continue;
      }
      nulls = 0;
      if (PQresultStatus(result.raw()) == PGRES_PIPELINE_SYNC) break;
    }
    if (broken() && failed.ok()) failed = Error("pipeline", nullptr);
  }
  if (!broken() && PQexitPipelineMode(conn_) != 1 && failed.ok()) {
    failed = Error("exit pipeline mode", nullptr);
  }
  return failed;
}

// ---- PgTransaction ----

Result<PgTransaction> PgTransaction::Begin(PgConn& conn, std::string_view mode) {
  BERTH_RETURN_IF_ERROR(conn.Exec(mode.empty() ? std::string("BEGIN")
                                               : "BEGIN ISOLATION LEVEL " + std::string(mode)));
  conn.in_transaction_ = true;
  return PgTransaction(&conn);
}

PgTransaction::~PgTransaction() {
  if (conn_ == nullptr) return;
  conn_->in_transaction_ = false;
  if (!conn_->broken()) (void)conn_->Exec("ROLLBACK");
}

Status PgTransaction::Commit() {
  PgConn* conn = std::exchange(conn_, nullptr);
  if (!conn->broken() && PQtransactionStatus(conn->conn_) == PQTRANS_INERROR) {
    // PostgreSQL answers COMMIT of a failed transaction with success (and rolls it back): a
    // statement's failure must not turn into a commit that reports ok and wrote nothing.
    conn->in_transaction_ = false;
    (void)conn->Exec("ROLLBACK");
    return Status::Internal(conn->where() + ": commit of a transaction that failed earlier");
  }
  // Still marked as in a transaction: a connection found dead now must fail the COMMIT, never
  // reconnect and send it to a new session, where it would succeed and commit nothing.
  Status status = conn->Exec("COMMIT");
  conn->in_transaction_ = false;
  if (status.ok()) return status;
  if (conn->broken()) {
    // The server may have committed before the connection went: the caller must not assume
    // either outcome (the server core treats every failed commit as "not applied" and re-reads).
    return Status::Unavailable(status.message() + " (the commit's outcome is unknown)");
  }
  (void)conn->Exec("ROLLBACK");
  return status;
}

static int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 0;
}

std::string PgUnhex(std::string_view hex) {
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(HexValue(hex[2 * i]) << 4 | HexValue(hex[2 * i + 1]));
  }
  return out;
}

}  // namespace berth
