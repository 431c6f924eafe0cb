#include "store/sqlite_store.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "store/row_codec.h"
#include "store/schema.h"

namespace berth {
namespace {

using namespace store_codec;  // the row codec shared by the backends

// Active and finished jobs, each read through the (active, id) index. `active` is written from
// IsTerminal() (Submit, UpdateJob), the one definition of which statuses are finished.
constexpr std::string_view kActiveWhere = "active = 1";
constexpr std::string_view kFinishedWhere = "active = 0";

// The columns every job query selects, in the order ReadJob reads them.
constexpr std::string_view kJobColumns =
    "id, spec_id, group_id, rank, name, user, priority, num_nodes, cpus_milli, memory_mib, "
    "gpu_type, gpu_milli, status, reason, attempt, submitted_at, started_at, ended_at, exit_code, "
    "placement, restarts, preemptions, requeues, not_before, run_ms";

// SQLite reads a negative LIMIT as "no limit".
constexpr int64_t kNoLimit = -1;

// ---- Rows ----

// Reads the current row of a statement that selected kJobColumns.
Result<JobRow> ReadJob(const SqliteDb& db, const Statement& s) {
  JobRow job;
  job.id = s.Int(0);
  job.spec_id = s.Int(1);
  job.group = s.OptInt(2);
  job.rank = ToOptInt(s.OptInt(3));
  job.name = s.Text(4);
  job.user = s.Text(5);
  job.priority = static_cast<int>(s.Int(6));
  job.num_nodes = static_cast<int>(s.Int(7));
  job.resources.cpus = s.Int(8);
  job.resources.memory = s.Int(9);
  job.resources.gpu_type = s.Text(10);
  job.resources.gpu_milli = s.Int(11);
  std::string status = s.Text(12);
  std::optional<JobStatus> parsed = ParseJobStatus(status);
  if (!parsed) {
    return Status::Internal(db.path() + ": job " + std::to_string(job.id) + ": unknown status \"" +
                            status + "\"");
  }
  job.status = *parsed;
  job.reason = s.Text(13);
  job.attempt = static_cast<int>(s.Int(14));
  job.submitted_at = s.Int(15);
  job.started_at = s.OptInt(16);
  job.ended_at = s.OptInt(17);
  job.exit_code = ToOptInt(s.OptInt(18));
  Result<Placement> placement = DecodePlacement(s.Text(19));
  if (!placement.ok()) return Corrupt(db, "job " + std::to_string(job.id), placement.status());
  job.placement = std::move(*placement);
  job.restarts = static_cast<int>(s.Int(20));
  job.preemptions = static_cast<int>(s.Int(21));
  job.requeues = static_cast<int>(s.Int(22));
  job.not_before = s.OptInt(23);
  job.run_ms = s.Int(24);
  return job;
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path) {
  Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(*store));
}

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  Result<std::unique_ptr<SqliteDb>> opened = SqliteDb::Open(path);
  if (!opened.ok()) return opened.status();
  SqliteDb& db = **opened;

  // Set before anything else touches the file, so that even the pragmas below wait for a busy lock.
  BERTH_RETURN_IF_ERROR(db.Exec("PRAGMA busy_timeout = " + std::to_string(kBusyTimeoutMs)));
  // WAL: readers never block the writer, a commit is one append, and a kill -9 loses nothing that
  // committed (the WAL is replayed on the next open). The mode is persistent in the file.
  Result<std::string> mode = db.QueryText("PRAGMA journal_mode = WAL");
  if (!mode.ok()) return mode.status();
  if (*mode != "wal") {
    return Status::Internal(path + ": cannot switch the database to WAL mode (it stays in \"" +
                            *mode + "\" mode)");
  }
  // NORMAL (not FULL): with WAL, commits no longer fsync; the WAL is synced at checkpoints.
  // Committed transactions survive a process crash; a power loss may drop the last few, never
  // corrupt the file.
  BERTH_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous = NORMAL"));
  // Off by default and per connection; without it the schema's REFERENCES clauses are ignored.
  BERTH_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON"));
  // A 100k-job submit writes tens of MiB of WAL; once checkpointed, shrink the file back to this.
  BERTH_RETURN_IF_ERROR(db.Exec("PRAGMA journal_size_limit = 67108864"));
  BERTH_RETURN_IF_ERROR(MigrateSchema(db));

  // A second connection for reads: with WAL, listings and `show` read the last committed state
  // while a big write (a scheduling pass placing thousands of jobs) is in progress, instead of
  // waiting for it.
  Result<std::unique_ptr<SqliteDb>> reader = SqliteDb::Open(path);
  if (!reader.ok()) return reader.status();
  BERTH_RETURN_IF_ERROR((*reader)->Exec("PRAGMA busy_timeout = " + std::to_string(kBusyTimeoutMs)));
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(*opened), std::move(*reader)));
  Result<std::unique_ptr<WalCheckpointer>> checkpointer = WalCheckpointer::Start(*store->db_);
  if (!checkpointer.ok()) return checkpointer.status();
  store->checkpointer_ = std::move(*checkpointer);
  return store;
}

Result<std::vector<SubmitResult>> SqliteStore::SubmitMany(
    const std::vector<Submission>& submissions) {
  for (const Submission& submission : submissions) {
    if (submission.count < 1) {
      return Status::Invalid("submit: the number of jobs must be at least 1, got " +
                             std::to_string(submission.count));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Result<Transaction> txn = Transaction::Begin(*db_, Transaction::Mode::kWrite);
  if (!txn.ok()) return txn.status();
  std::vector<SubmitResult> results;
  results.reserve(submissions.size());
  bool keyed = false;
  for (const Submission& submission : submissions) {
    Result<SubmitResult> one = InsertSubmission(submission);
    if (!one.ok()) return one.status();
    if (!submission.key.empty()) {
      BERTH_RETURN_IF_ERROR(InsertSubmitKey(submission, *one));
      keyed = true;
    }
    results.push_back(std::move(*one));
  }
  if (keyed) {
    Result<StatementRef> expire = db_->Cached("DELETE FROM submit_keys WHERE created_at < ?1");
    if (!expire.ok()) return expire.status();
    BERTH_RETURN_IF_ERROR(
        (*expire)->Bind(1, submissions.front().now - kSubmitKeyRetentionMs).Run());
  }
  BERTH_RETURN_IF_ERROR(txn->Commit());
  return results;
}

Status SqliteStore::InsertSubmitKey(const Submission& submission, const SubmitResult& result) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO submit_keys(user, key, fingerprint, spec_id, group_id, first_id, count, "
      "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, submission.user)
      .Bind(2, submission.key)
      .Bind(3, submission.fingerprint)
      .Bind(4, result.spec_id)
      .Bind(5, result.group)
      .Bind(6, result.ids.front())
      .Bind(7, int64_t{submission.count})
      .Bind(8, submission.now)
      .Run();
}

Result<std::optional<KeyedSubmission>> SqliteStore::FindSubmission(const std::string& user,
                                                                   const std::string& key) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT fingerprint, spec_id, group_id, first_id, count FROM submit_keys "
      "WHERE user = ?1 AND key = ?2");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, user).Bind(2, key);
  Result<bool> row = s.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<KeyedSubmission>();
  KeyedSubmission found;
  found.fingerprint = s.Text(0);
  found.result.spec_id = s.Int(1);
  found.result.group = s.OptInt(2);
  found.result.ids.resize(static_cast<size_t>(s.Int(4)));
  std::iota(found.result.ids.begin(), found.result.ids.end(), s.Int(3));
  return std::optional<KeyedSubmission>(std::move(found));
}

Result<SubmitResult> SqliteStore::InsertSubmission(const Submission& submission) {
  SubmitResult result;
  {
    Result<StatementRef> spec = db_->Cached("INSERT INTO specs(body) VALUES (?1)");
    if (!spec.ok()) return spec.status();
    BERTH_RETURN_IF_ERROR((*spec)->Bind(1, submission.spec_json).Run());
    result.spec_id = db_->LastInsertRowid();
  }
  if (submission.as_group) {
    Result<StatementRef> group = db_->Cached(
        "INSERT INTO groups(spec_id, size, created_at, max_running) "
        "VALUES (?1, ?2, ?3, ?4)");
    if (!group.ok()) return group.status();
    BERTH_RETURN_IF_ERROR((*group)
                              ->Bind(1, result.spec_id)
                              .Bind(2, int64_t{submission.count})
                              .Bind(3, submission.now)
                              .Bind(4, ToOpt(submission.max_running))
                              .Run());
    result.group = db_->LastInsertRowid();
  }

  // All `count` jobs in one statement, generating ranks 0..count-1 with a recursive CTE, then all
  // their first events in a second: per-row statements cost about twice the instructions (each
  // execution has its own setup, FK bookkeeping and sqlite_sequence update).
  Result<StatementRef> jobs = db_->Cached(
      "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) "
      "INSERT INTO jobs(spec_id, group_id, rank, name, user, priority, num_nodes, cpus_milli, "
      "memory_mib, gpu_type, gpu_milli, status, active, reason, attempt, submitted_at, placement) "
      "SELECT ?2, ?3, CASE WHEN ?3 IS NOT NULL THEN i END, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
      "'PENDING', 1, '', 0, ?12, '[]' FROM n");
  if (!jobs.ok()) return jobs.status();
  const ResourceRequest& r = submission.resources;
  BERTH_RETURN_IF_ERROR((*jobs)
                            ->Bind(1, int64_t{submission.count})
                            .Bind(2, result.spec_id)
                            .Bind(3, result.group)
                            .Bind(4, submission.name)
                            .Bind(5, submission.user)
                            .Bind(6, int64_t{submission.priority})
                            .Bind(7, int64_t{submission.num_nodes})
                            .Bind(8, r.cpus)
                            .Bind(9, r.memory)
                            .Bind(10, r.gpu_type)
                            .Bind(11, r.gpu_milli)
                            .Bind(12, submission.now)
                            .Run());
  // AUTOINCREMENT gives each row of one INSERT the next id above every id ever used, and we hold
  // the write lock, so the jobs are exactly first..last. The event insert re-checks it: it must
  // find `count` jobs in that range.
  const int64_t last = db_->LastInsertRowid();
  const int64_t first = last - submission.count + 1;
  Result<StatementRef> events = db_->Cached(
      "INSERT INTO job_events(job_id, seq, at, status, attempt, reason, actor) "
      "SELECT id, 1, ?1, 'PENDING', 0, 'submitted', ?4 FROM jobs WHERE id BETWEEN ?2 AND ?3");
  if (!events.ok()) return events.status();
  BERTH_RETURN_IF_ERROR((*events)
                            ->Bind(1, submission.now)
                            .Bind(2, first)
                            .Bind(3, last)
                            .Bind(4, submission.user)
                            .Run());
  if (db_->Changes() != submission.count) {
    return Status::Internal(db_->path() + ": submit: expected jobs " + std::to_string(first) +
                            ".." + std::to_string(last) + " but found " +
                            std::to_string(db_->Changes()));
  }
  result.ids.resize(static_cast<size_t>(submission.count));
  std::iota(result.ids.begin(), result.ids.end(), first);
  return result;
}

Status SqliteStore::UpdateJob(const JobRow& job) {
  // Most updates leave a job active (placed, started, requeued, restarted). Those do not name the
  // `active` column: an UPDATE that names an indexed column rewrites its entry in the index
  // (jobs_by_activity) even when the value stays, ~30 % of the statement's cost. The `active = 1`
  // guard sends a finished job made active again, and a missing one, to the statement that names
  // it.
  static constexpr std::string_view kSet =
      "UPDATE jobs SET name = ?2, user = ?3, priority = ?4, num_nodes = ?5, cpus_milli = ?6, "
      "memory_mib = ?7, gpu_type = ?8, gpu_milli = ?9, status = ?10, reason = ?11, attempt = ?12, "
      "started_at = ?13, ended_at = ?14, exit_code = ?15, placement = ?16, restarts = ?18, "
      "preemptions = ?19, requeues = ?20, not_before = ?21, run_ms = ?22";
  static const std::string kStaysActive = std::string(kSet) + " WHERE id = ?1 AND active = 1";
  static const std::string kAny = std::string(kSet) + ", active = ?17 WHERE id = ?1";
  const bool active = !IsTerminal(job.status);
  const std::string placement = EncodePlacement(job.placement);
  // Runs `sql` with the job's values; whether it changed a row.
  auto run = [&](const std::string& sql) -> Result<bool> {
    Result<StatementRef> ref = db_->Cached(sql);
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)
                              ->Bind(1, job.id)
                              .Bind(2, job.name)
                              .Bind(3, job.user)
                              .Bind(4, int64_t{job.priority})
                              .Bind(5, int64_t{job.num_nodes})
                              .Bind(6, job.resources.cpus)
                              .Bind(7, job.resources.memory)
                              .Bind(8, job.resources.gpu_type)
                              .Bind(9, job.resources.gpu_milli)
                              .Bind(10, JobStatusName(job.status))
                              .Bind(11, job.reason)
                              .Bind(12, int64_t{job.attempt})
                              .Bind(13, job.started_at)
                              .Bind(14, job.ended_at)
                              .Bind(15, ToOpt(job.exit_code))
                              .Bind(16, placement)
                              .Bind(17, int64_t{active ? 1 : 0})
                              .Bind(18, int64_t{job.restarts})
                              .Bind(19, int64_t{job.preemptions})
                              .Bind(20, int64_t{job.requeues})
                              .Bind(21, job.not_before)
                              .Bind(22, job.run_ms)
                              .Run());
    return db_->Changes() > 0;
  };
  if (active) {
    Result<bool> changed = run(kStaysActive);
    if (!changed.ok()) return changed.status();
    if (*changed) return Status::Ok();
  }
  Result<bool> changed = run(kAny);
  if (!changed.ok()) return changed.status();
  if (!*changed) {
    return Status::NotFound(db_->path() + ": commit: job " + std::to_string(job.id) +
                            " does not exist");
  }
  return Status::Ok();
}

Status SqliteStore::AppendEvent(int64_t job, const JobEvent& event) {
  // seq = one past the job's last event, found through the (job_id, seq) primary key. A scalar
  // subquery in VALUES, not INSERT ... SELECT: a SELECT from the table being inserted into is
  // first copied into a temporary table, which made each event cost ~2.5x as much (a pass placing
  // 100,000 jobs appends one each).
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO job_events(job_id, seq, at, status, attempt, reason, actor) VALUES "
      "(?1, COALESCE((SELECT MAX(seq) FROM job_events WHERE job_id = ?1), 0) + 1, ?2, ?3, ?4, ?5, "
      "?6)");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, job)
      .Bind(2, event.at)
      .Bind(3, JobStatusName(event.status))
      .Bind(4, int64_t{event.attempt})
      .Bind(5, event.reason)
      .Bind(6, event.by)
      .Run();
}

Status SqliteStore::UpsertAttempt(int64_t job, const AttemptRow& attempt) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO attempts(job_id, attempt, placement, placed_at, ended_at, outcome, reason, "
      "exit_code, peak_memory_bytes, cpu_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
      "ON CONFLICT(job_id, attempt) DO UPDATE SET placement = excluded.placement, "
      "placed_at = excluded.placed_at, ended_at = excluded.ended_at, outcome = excluded.outcome, "
      "reason = excluded.reason, exit_code = excluded.exit_code, "
      "peak_memory_bytes = excluded.peak_memory_bytes, cpu_ms = excluded.cpu_ms");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, job)
      .Bind(2, int64_t{attempt.attempt})
      .Bind(3, EncodePlacement(attempt.placement))
      .Bind(4, attempt.placed_at)
      .Bind(5, attempt.ended_at)
      .Bind(7, attempt.reason)
      .Bind(8, ToOpt(attempt.exit_code))
      .Bind(9, attempt.peak_memory_bytes)
      .Bind(10, attempt.cpu_ms);
  if (attempt.outcome) {
    s.Bind(6, JobStatusName(*attempt.outcome));
  } else {
    s.BindNull(6);
  }
  return s.Run();
}

Status SqliteStore::UpsertNode(const NodeRow& node) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO nodes(name, node_id, state, draining, pool, labels, address, cpus_milli, "
      "memory_mib, gpus, registered_at, last_seen, down_since) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) "
      "ON CONFLICT(name) DO UPDATE SET node_id = excluded.node_id, state = excluded.state, "
      "draining = excluded.draining, pool = excluded.pool, labels = excluded.labels, "
      "address = excluded.address, cpus_milli = excluded.cpus_milli, "
      "memory_mib = excluded.memory_mib, gpus = excluded.gpus, "
      "registered_at = excluded.registered_at, last_seen = excluded.last_seen, "
      "down_since = excluded.down_since");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, node.name)
      .Bind(2, node.node_id)
      .Bind(3, NodeStateName(node.state))
      .Bind(4, int64_t{node.draining ? 1 : 0})
      .Bind(5, node.pool)
      .Bind(6, EncodeLabels(node.labels))
      .Bind(7, node.address)
      .Bind(8, node.cpus)
      .Bind(9, node.memory)
      .Bind(10, EncodeGpus(node.gpus))
      .Bind(11, node.registered_at)
      .Bind(12, node.last_seen)
      .Bind(13, node.down_since)
      .Run();
}

Status SqliteStore::Commit(const Batch& batch) {
  if (batch.empty()) return Status::Ok();
  for (const UsageRecord& record : batch.usage) BERTH_RETURN_IF_ERROR(CheckUsage(record));
  std::lock_guard<std::mutex> lock(mu_);
  Result<Transaction> txn = Transaction::Begin(*db_, Transaction::Mode::kWrite);
  if (!txn.ok()) return txn.status();
  for (const JobRow& job : batch.jobs) BERTH_RETURN_IF_ERROR(UpdateJob(job));
  for (const auto& [job, event] : batch.events) BERTH_RETURN_IF_ERROR(AppendEvent(job, event));
  for (const auto& [job, attempt] : batch.attempts) {
    BERTH_RETURN_IF_ERROR(UpsertAttempt(job, attempt));
  }
  for (const NodeRow& node : batch.nodes) BERTH_RETURN_IF_ERROR(UpsertNode(node));
  for (const UserRow& user : batch.users) BERTH_RETURN_IF_ERROR(UpsertUser(user));
  for (const TokenRow& token : batch.tokens) BERTH_RETURN_IF_ERROR(UpsertToken(token));
  for (const AuditRow& row : batch.audit) BERTH_RETURN_IF_ERROR(AppendAudit(row));
  for (const TeamRow& team : batch.teams) BERTH_RETURN_IF_ERROR(UpsertTeam(team));
  BERTH_RETURN_IF_ERROR(AddUsage(batch.usage));
  BERTH_RETURN_IF_ERROR(WriteNotifications(batch));
  BERTH_RETURN_IF_ERROR(WriteReservations(batch));
  for (const auto& [group, limit] : batch.group_limits) {
    Result<StatementRef> ref = db_->Cached("UPDATE groups SET max_running = ?2 WHERE id = ?1");
    if (!ref.ok()) return ref.status();
    BERTH_RETURN_IF_ERROR((*ref)->Bind(1, group).Bind(2, ToOpt(limit)).Run());
    if (db_->Changes() == 0) {
      return Status::NotFound(db_->path() + ": commit: group " + std::to_string(group) +
                              " does not exist");
    }
  }
  return txn->Commit();
}

Result<std::vector<JobRow>> SqliteStore::QueryJobs(SqliteDb& db, const std::string& sql,
                                                   const std::vector<int64_t>& params) {
  Result<StatementRef> ref = db.Cached(sql);
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  for (size_t i = 0; i < params.size(); ++i) s.Bind(static_cast<int>(i) + 1, params[i]);
  std::vector<JobRow> jobs;
  Status read = s.ForEachRow([&]() -> Status {
    Result<JobRow> job = ReadJob(db, s);
    if (!job.ok()) return job.status();
    jobs.push_back(std::move(*job));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return jobs;
}

Result<std::vector<JobRow>> SqliteStore::LoadActiveJobs() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
  if (!txn.ok()) return txn.status();
  Result<std::vector<JobRow>> jobs =
      QueryJobs(*read_db_,
                "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE " +
                    std::string(kActiveWhere) + " ORDER BY id",
                {});
  if (!jobs.ok()) return jobs.status();
  BERTH_RETURN_IF_ERROR(txn->Commit());
  return jobs;
}

Result<std::vector<JobRow>> SqliteStore::ListJobs(const JobQuery& query) {
  if (query.limit < 0) {
    return Status::Invalid("list jobs: limit must be 0 (no limit) or more, got " +
                           std::to_string(query.limit));
  }
  // The optional filters become extra terms; the SQL text stays one of a handful of variants, so
  // the statement cache keeps them all.
  std::string filter;
  std::vector<int64_t> params;
  if (query.group) {
    filter += " AND group_id = ?";
    params.push_back(*query.group);
  }
  if (query.before_id) {
    filter += " AND id < ?";
    params.push_back(*query.before_id);
  }
  if (query.ungrouped_only) filter += " AND group_id IS NULL";
  const std::string select = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE ";
  const int64_t limit = query.limit == 0 ? kNoLimit : query.limit;

  std::lock_guard<std::mutex> lock(read_mu_);
  Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
  if (!txn.ok()) return txn.status();
  std::vector<JobRow> jobs;
  if (query.finished_only) {
    std::vector<int64_t> finished_params = params;
    finished_params.push_back(limit);
    Result<std::vector<JobRow>> finished = QueryJobs(
        *read_db_, select + std::string(kFinishedWhere) + filter + " ORDER BY id DESC LIMIT ?",
        finished_params);
    if (!finished.ok()) return finished.status();
    jobs = std::move(*finished);
  } else if (query.all) {
    std::vector<int64_t> all_params = params;
    all_params.push_back(limit);
    Result<std::vector<JobRow>> all =
        QueryJobs(*read_db_, select + "1" + filter + " ORDER BY id DESC LIMIT ?", all_params);
    if (!all.ok()) return all.status();
    jobs = std::move(*all);
  } else {
    // Every active job, plus the newest `limit` finished ones, each a range of the (active, id)
    // index; then merged newest first.
    // A page needs at most `page` active rows: with 100k queued jobs the first page stays cheap.
    std::vector<int64_t> active_params = params;
    active_params.push_back(query.page > 0 ? query.page : kNoLimit);
    Result<std::vector<JobRow>> active = QueryJobs(
        *read_db_, select + std::string(kActiveWhere) + filter + " ORDER BY id DESC LIMIT ?",
        active_params);
    if (!active.ok()) return active.status();
    std::vector<int64_t> finished_params = params;
    finished_params.push_back(limit);
    Result<std::vector<JobRow>> finished = QueryJobs(
        *read_db_, select + std::string(kFinishedWhere) + filter + " ORDER BY id DESC LIMIT ?",
        finished_params);
    if (!finished.ok()) return finished.status();
    jobs.reserve(active->size() + finished->size());
    std::merge(std::make_move_iterator(active->begin()), std::make_move_iterator(active->end()),
               std::make_move_iterator(finished->begin()), std::make_move_iterator(finished->end()),
               std::back_inserter(jobs),
               [](const JobRow& a, const JobRow& b) { return a.id > b.id; });
    if (query.page > 0 && jobs.size() > static_cast<size_t>(query.page)) jobs.resize(query.page);
  }
  BERTH_RETURN_IF_ERROR(txn->Commit());
  return jobs;
}

Result<std::vector<JobRow>> SqliteStore::GetJobs(const std::vector<int64_t>& ids) {
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

  std::lock_guard<std::mutex> lock(read_mu_);
  Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
  if (!txn.ok()) return txn.status();
  std::vector<JobRow> jobs;
  jobs.reserve(sorted.size());
  const std::string sql = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id = ?";
  for (int64_t id : sorted) {
    Result<std::vector<JobRow>> one = QueryJobs(*read_db_, sql, {id});
    if (!one.ok()) return one.status();
    for (JobRow& job : *one) jobs.push_back(std::move(job));
  }
  BERTH_RETURN_IF_ERROR(txn->Commit());
  return jobs;
}

Result<std::vector<JobEvent>> SqliteStore::GetEvents(int64_t job) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT at, status, attempt, reason, actor FROM job_events WHERE job_id = ?1 ORDER BY seq");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, job);
  std::vector<JobEvent> events;
  Status read = s.ForEachRow([&]() -> Status {
    std::string status = s.Text(1);
    std::optional<JobStatus> parsed = ParseJobStatus(status);
    if (!parsed) {
      return Status::Internal(read_db_->path() + ": event of job " + std::to_string(job) +
                              ": unknown status \"" + status + "\"");
    }
    events.push_back(JobEvent{.at = s.Int(0),
                              .status = *parsed,
                              .attempt = static_cast<int>(s.Int(2)),
                              .reason = s.Text(3),
                              .by = s.Text(4)});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return events;
}

Result<std::vector<AttemptRow>> SqliteStore::GetAttempts(int64_t job) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT attempt, placement, placed_at, ended_at, outcome, reason, exit_code, "
      "peak_memory_bytes, cpu_ms FROM attempts WHERE job_id = ?1 ORDER BY attempt");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, job);
  std::vector<AttemptRow> attempts;
  Status read = s.ForEachRow([&]() -> Status {
    AttemptRow a;
    a.attempt = static_cast<int>(s.Int(0));
    const std::string what =
        "attempt " + std::to_string(a.attempt) + " of job " + std::to_string(job);
    Result<Placement> placement = DecodePlacement(s.Text(1));
    if (!placement.ok()) return Corrupt(*read_db_, what, placement.status());
    a.placement = std::move(*placement);
    a.placed_at = s.Int(2);
    a.ended_at = s.OptInt(3);
    if (!s.IsNull(4)) {
      std::string outcome = s.Text(4);
      a.outcome = ParseJobStatus(outcome);
      if (!a.outcome) {
        return Status::Internal(read_db_->path() + ": " + what + ": unknown outcome \"" + outcome +
                                "\"");
      }
    }
    a.reason = s.Text(5);
    a.exit_code = ToOptInt(s.OptInt(6));
    a.peak_memory_bytes = s.OptInt(7);
    a.cpu_ms = s.OptInt(8);
    attempts.push_back(std::move(a));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return attempts;
}

Result<std::string> SqliteStore::GetSpec(int64_t spec_id) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached("SELECT body FROM specs WHERE id = ?1");
  if (!ref.ok()) return ref.status();
  (*ref)->Bind(1, spec_id);
  BERTH_RETURN_IF_ERROR((*ref)->StepToRow("spec " + std::to_string(spec_id) + " not found"));
  return (*ref)->Text(0);
}

Result<int> SqliteStore::GroupSize(int64_t group) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached("SELECT size FROM groups WHERE id = ?1");
  if (!ref.ok()) return ref.status();
  (*ref)->Bind(1, group);
  BERTH_RETURN_IF_ERROR((*ref)->StepToRow("group " + std::to_string(group) + " not found"));
  return static_cast<int>((*ref)->Int(0));
}

Result<Store::GroupInfo> SqliteStore::GetGroup(int64_t group) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
  if (!txn.ok()) return txn.status();
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT g.max_running, min(j.id), max(j.id), min(j.user) FROM groups g "
      "JOIN jobs j ON j.group_id = g.id WHERE g.id = ?1 GROUP BY g.id");
  if (!ref.ok()) return ref.status();
  (*ref)->Bind(1, group);
  BERTH_RETURN_IF_ERROR((*ref)->StepToRow("group " + std::to_string(group) + " not found"));
  GroupInfo info;
  info.max_running = ToOptInt((*ref)->OptInt(0));
  info.first_job = (*ref)->Int(1);
  info.last_job = (*ref)->Int(2);
  info.user = (*ref)->Text(3);
  return info;
}

Result<std::map<int64_t, int>> SqliteStore::LoadGroupLimits() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT id, max_running FROM groups WHERE max_running IS NOT NULL AND id IN "
      "(SELECT group_id FROM jobs WHERE active = 1 AND group_id IS NOT NULL)");
  if (!ref.ok()) return ref.status();
  std::map<int64_t, int> out;
  Status read = (*ref)->ForEachRow([&]() -> Status {
    out[(*ref)->Int(0)] = static_cast<int>((*ref)->Int(1));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return out;
}

Result<std::map<int64_t, std::map<JobStatus, int>>> SqliteStore::GroupStatusCounts(
    const std::vector<int64_t>& groups) {
  std::map<int64_t, std::map<JobStatus, int>> out;
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
  if (!txn.ok()) return txn.status();
  for (int64_t group : groups) {
    // One range of the (group_id, id) index per group.
    Result<StatementRef> ref =
        read_db_->Cached("SELECT status, count(*) FROM jobs WHERE group_id = ?1 GROUP BY status");
    if (!ref.ok()) return ref.status();
    (*ref)->Bind(1, group);
    std::map<JobStatus, int>& counts = out[group];
    Status read = (*ref)->ForEachRow([&]() -> Status {
      std::optional<JobStatus> status = ParseJobStatus((*ref)->Text(0));
      if (!status) return Status::Internal("group " + std::to_string(group) + ": bad status");
      counts[*status] = static_cast<int>((*ref)->Int(1));
      return Status::Ok();
    });
    if (!read.ok()) return read;
  }
  return out;
}

Result<std::vector<NodeRow>> SqliteStore::LoadNodes() {
  std::lock_guard<std::mutex> lock(mu_);
  Result<StatementRef> ref = db_->Cached(
      "SELECT name, node_id, state, draining, pool, labels, address, cpus_milli, memory_mib, gpus, "
      "registered_at, last_seen, down_since FROM nodes ORDER BY name");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  std::vector<NodeRow> nodes;
  Status read = s.ForEachRow([&]() -> Status {
    NodeRow n;
    n.name = s.Text(0);
    const std::string what = "node " + n.name;
    n.node_id = s.Text(1);
    std::string state = s.Text(2);
    std::optional<NodeState> parsed = ParseNodeState(state);
    if (!parsed) {
      return Status::Internal(db_->path() + ": " + what + ": unknown state \"" + state + "\"");
    }
    n.state = *parsed;
    n.draining = s.Int(3) != 0;
    n.pool = s.Text(4);
    Result<std::map<std::string, std::string>> labels = DecodeLabels(s.Text(5));
    if (!labels.ok()) return Corrupt(*db_, what, labels.status());
    n.labels = std::move(*labels);
    n.address = s.Text(6);
    n.cpus = s.Int(7);
    n.memory = s.Int(8);
    Result<std::vector<GpuDevice>> gpus = DecodeGpus(s.Text(9));
    if (!gpus.ok()) return Corrupt(*db_, what, gpus.status());
    n.gpus = std::move(*gpus);
    n.registered_at = s.Int(10);
    n.last_seen = s.Int(11);
    n.down_since = s.OptInt(12);
    nodes.push_back(std::move(n));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return nodes;
}

}  // namespace berth
