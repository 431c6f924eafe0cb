#include "store/pg_store.h"

#include <algorithm>
#include <numeric>
#include <string_view>
#include <utility>

#include "store/pg_schema.h"
#include "store/row_codec.h"

namespace berth {
namespace {

using namespace store_codec;  // the row codec shared by the backends

constexpr std::string_view kJobColumns =
    "id, spec_id, group_id, rank, name, \"user\", priority, num_nodes, cpus_milli, memory_mib, "
    "gpu_type, gpu_milli, status, reason, attempt, submitted_at, started_at, ended_at, exit_code, "
    "placement, restarts, preemptions, requeues, not_before, run_ms";

// A consistent snapshot for reads that take several statements.
constexpr std::string_view kSnapshot = "REPEATABLE READ READ ONLY";

Status Corrupt(const PgConn& db, const std::string& what, const Status& cause) {
  return Status::Internal(db.where() + ": " + what + ": " + cause.message());
}

// Row `r` of a result that selected kJobColumns.
Result<JobRow> ReadJob(const PgConn& db, const PgResult& s, int r) {
  JobRow job;
  job.id = s.Int(r, 0);
  job.spec_id = s.Int(r, 1);
  job.group = s.OptInt(r, 2);
  job.rank = ToOptInt(s.OptInt(r, 3));
  job.name = s.Text(r, 4);
  job.user = s.Text(r, 5);
  job.priority = static_cast<int>(s.Int(r, 6));
  job.num_nodes = static_cast<int>(s.Int(r, 7));
  job.resources.cpus = s.Int(r, 8);
  job.resources.memory = s.Int(r, 9);
  job.resources.gpu_type = s.Text(r, 10);
  job.resources.gpu_milli = s.Int(r, 11);
  std::string status = s.Text(r, 12);
  std::optional<JobStatus> parsed = ParseJobStatus(status);
  if (!parsed) {
    return Status::Internal(db.where() + ": job " + std::to_string(job.id) + ": unknown status \"" +
                            status + "\"");
  }
  job.status = *parsed;
  job.reason = s.Text(r, 13);
  job.attempt = static_cast<int>(s.Int(r, 14));
  job.submitted_at = s.Int(r, 15);
  job.started_at = s.OptInt(r, 16);
  job.ended_at = s.OptInt(r, 17);
  job.exit_code = ToOptInt(s.OptInt(r, 18));
  Result<Placement> placement = DecodePlacement(s.Text(r, 19));
  if (!placement.ok()) return Corrupt(db, "job " + std::to_string(job.id), placement.status());
  job.placement = std::move(*placement);
  job.restarts = static_cast<int>(s.Int(r, 20));
  job.preemptions = static_cast<int>(s.Int(r, 21));
  job.requeues = static_cast<int>(s.Int(r, 22));
  job.not_before = s.OptInt(r, 23);
  job.run_ms = s.Int(r, 24);
  return job;
}

Result<std::vector<JobRow>> QueryJobs(PgConn& db, const std::string& sql, const PgParams& params) {
  Result<PgResult> result = db.Query(sql, params);
  if (!result.ok()) return result.status();
  std::vector<JobRow> jobs;
  jobs.reserve(static_cast<size_t>(result->rows()));
  for (int r = 0; r < result->rows(); ++r) {
    Result<JobRow> job = ReadJob(db, *result, r);
    if (!job.ok()) return job.status();
    jobs.push_back(std::move(*job));
  }
  return jobs;
}

// A PostgreSQL array literal of integers: {1,2,3}.
std::string IntArray(const std::vector<int64_t>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  out += '}';
  return out;
}

PgCall UpdateJobCall(const JobRow& job) {
  PgCall call;
  call.sql =
      "UPDATE jobs SET name = $2, \"user\" = $3, priority = $4, num_nodes = $5, cpus_milli = $6, "
      "memory_mib = $7, gpu_type = $8, gpu_milli = $9, status = $10, reason = $11, "
      "attempt = $12, started_at = $13, ended_at = $14, exit_code = $15, placement = $16, "
      "active = $17, restarts = $18, preemptions = $19, requeues = $20, not_before = $21, "
      "run_ms = $22 WHERE id = $1";
  call.params.Add(job.id)
      .Add(job.name)
      .Add(job.user)
      .Add(job.priority)
      .Add(job.num_nodes)
      .Add(job.resources.cpus)
      .Add(job.resources.memory)
      .Add(job.resources.gpu_type)
      .Add(job.resources.gpu_milli)
      .Add(JobStatusName(job.status))
      .Add(job.reason)
      .Add(job.attempt)
      .Add(job.started_at)
      .Add(job.ended_at)
      .Add(ToOpt(job.exit_code))
      .Add(EncodePlacement(job.placement))
      .Add(IsTerminal(job.status) ? 0 : 1)
      .Add(job.restarts)
      .Add(job.preemptions)
      .Add(job.requeues)
      .Add(job.not_before)
      .Add(job.run_ms);
  call.expect_rows = 1;
  call.not_found = "commit: job " + std::to_string(job.id) + " does not exist";
  return call;
}

PgCall AppendEventCall(int64_t job, const JobEvent& event) {
  PgCall call;
  // seq = one past the job's last event, found through the (job_id, seq) primary key. An unknown
  // job fails on the foreign key.
  call.sql =
      "INSERT INTO job_events(job_id, seq, at, status, attempt, reason, actor) "
      "SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5, $6 FROM job_events "
      "WHERE job_id = $1";
  call.params.Add(job)
      .Add(event.at)
      .Add(JobStatusName(event.status))
      .Add(event.attempt)
      .Add(event.reason)
      .Add(event.by);
  return call;
}

PgCall UpsertAttemptCall(int64_t job, const AttemptRow& attempt) {
  PgCall call;
  call.sql =
      "INSERT INTO attempts(job_id, attempt, placement, placed_at, ended_at, outcome, reason, "
      "exit_code, peak_memory_bytes, cpu_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
      "ON CONFLICT (job_id, attempt) DO UPDATE SET placement = excluded.placement, "
      "placed_at = excluded.placed_at, ended_at = excluded.ended_at, outcome = excluded.outcome, "
      "reason = excluded.reason, exit_code = excluded.exit_code, "
      "peak_memory_bytes = excluded.peak_memory_bytes, cpu_ms = excluded.cpu_ms";
  call.params.Add(job)
      .Add(attempt.attempt)
      .Add(EncodePlacement(attempt.placement))
      .Add(attempt.placed_at)
      .Add(attempt.ended_at);
  if (attempt.outcome) {
    call.params.Add(JobStatusName(*attempt.outcome));
  } else {
    call.params.AddNull();
  }
  call.params.Add(attempt.reason)
      .Add(ToOpt(attempt.exit_code))
      .Add(attempt.peak_memory_bytes)
      .Add(attempt.cpu_ms);
  return call;
}

PgCall UpsertNodeCall(const NodeRow& node) {
  PgCall call;
  call.sql =
      "INSERT INTO nodes(name, node_id, state, draining, pool, labels, address, cpus_milli, "
      "memory_mib, gpus, registered_at, last_seen, down_since) "
      "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) "
      "ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id, state = excluded.state, "
      "draining = excluded.draining, pool = excluded.pool, labels = excluded.labels, "
      "address = excluded.address, cpus_milli = excluded.cpus_milli, "
      "memory_mib = excluded.memory_mib, gpus = excluded.gpus, "
      "registered_at = excluded.registered_at, last_seen = excluded.last_seen, "
      "down_since = excluded.down_since";
  call.params.Add(node.name)
      .Add(node.node_id)
      .Add(NodeStateName(node.state))
      .Add(node.draining ? 1 : 0)
      .Add(node.pool)
      .Add(EncodeLabels(node.labels))
      .Add(node.address)
      .Add(node.cpus)
      .Add(node.memory)
      .Add(EncodeGpus(node.gpus))
      .Add(node.registered_at)
      .Add(node.last_seen)
      .Add(node.down_since);
  return call;
}

PgCall UpsertUserCall(const UserRow& user) {
  PgCall call;
  call.sql =
      "INSERT INTO users(name, role, max_priority, team, updated_at, updated_by, "
      "max_running_gpus, max_pending_jobs) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
      "ON CONFLICT (name) DO UPDATE SET role = excluded.role, "
      "max_priority = excluded.max_priority, team = excluded.team, "
      "updated_at = excluded.updated_at, updated_by = excluded.updated_by, "
      "max_running_gpus = excluded.max_running_gpus, "
      "max_pending_jobs = excluded.max_pending_jobs";
  call.params.Add(user.name)
      .Add(RoleName(user.role))
      .Add(user.max_priority)
      .Add(user.team)
      .Add(user.updated_at)
      .Add(user.updated_by)
      .Add(ToOpt(user.max_running_gpus))
      .Add(ToOpt(user.max_pending_jobs));
  return call;
}

PgCall UpsertTokenCall(const TokenRow& token) {
  PgCall call;
  call.sql =
      "INSERT INTO tokens(name, \"user\", hash, created_at, expires_at, revoked_at, created_by, "
      "speaks_for) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
      "ON CONFLICT (name) DO UPDATE SET \"user\" = excluded.\"user\", hash = excluded.hash, "
      "created_at = excluded.created_at, expires_at = excluded.expires_at, "
      "revoked_at = excluded.revoked_at, created_by = excluded.created_by, "
      "speaks_for = excluded.speaks_for";
  call.params.Add(token.name)
      .Add(token.user)
      .Add(token.hash)
      .Add(token.created_at)
      .Add(token.expires_at)
      .Add(token.revoked_at)
      .Add(token.created_by)
      .Add(token.speaks_for);
  return call;
}

PgCall AppendAuditCall(const AuditRow& row) {
  PgCall call;
  call.sql = "INSERT INTO audit(at, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5)";
  call.params.Add(row.at).Add(row.by).Add(row.action).Add(row.target).Add(row.detail);
  return call;
}

PgCall UpsertTeamCall(const TeamRow& team) {
  PgCall call;
  call.sql =
      "INSERT INTO teams(name, quota, borrow_limit, weight, updated_at, updated_by) "
      "VALUES ($1, $2, $3, $4, $5, $6) "
      "ON CONFLICT (name) DO UPDATE SET quota = excluded.quota, "
      "borrow_limit = excluded.borrow_limit, weight = excluded.weight, "
      "updated_at = excluded.updated_at, updated_by = excluded.updated_by";
  call.params.Add(team.name)
      .Add(EncodeMilliMap(team.quota))
      .Add(EncodeMilliMap(team.borrow_limit))
      .Add(team.weight)
      .Add(team.updated_at)
      .Add(team.updated_by);
  return call;
}

// Adds `buckets` to usage_hourly (or usage_daily), one upsert per bucket.
void AddBucketCalls(bool daily, const std::map<BucketKey, BucketSums>& buckets,
                    std::vector<PgCall>& calls) {
  static const std::string kSql[2] = {
      "INSERT INTO usage_hourly AS u(hour, \"user\", team, gpu_type, gpu_milli_ms, cpu_milli_ms, "
      "jobs, wait_ms, waits, preemptions, used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, "
      "asked_memory_mib_ms, gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms) VALUES "
      "($1, "
      "$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) "
      "ON CONFLICT (hour, \"user\", team, gpu_type) DO UPDATE SET "
      "gpu_milli_ms = u.gpu_milli_ms + excluded.gpu_milli_ms, "
      "cpu_milli_ms = u.cpu_milli_ms + excluded.cpu_milli_ms, jobs = u.jobs + excluded.jobs, "
      "wait_ms = u.wait_ms + excluded.wait_ms, waits = u.waits + excluded.waits, "
      "preemptions = u.preemptions + excluded.preemptions, "
      "used_cpu_ms = u.used_cpu_ms + excluded.used_cpu_ms, "
      "measured_cpu_milli_ms = u.measured_cpu_milli_ms + excluded.measured_cpu_milli_ms, "
      "peak_memory_mib_ms = u.peak_memory_mib_ms + excluded.peak_memory_mib_ms, "
      "asked_memory_mib_ms = u.asked_memory_mib_ms + excluded.asked_memory_mib_ms, "
      "gpu_sampled_milli_ms = u.gpu_sampled_milli_ms + excluded.gpu_sampled_milli_ms, "
      "gpu_busy_milli_ms = u.gpu_busy_milli_ms + excluded.gpu_busy_milli_ms, "
      "gpu_idle_milli_ms = u.gpu_idle_milli_ms + excluded.gpu_idle_milli_ms",
      "INSERT INTO usage_daily AS u(day, \"user\", team, gpu_type, gpu_milli_ms, cpu_milli_ms, "
      "jobs, wait_ms, waits, preemptions, used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, "
      "asked_memory_mib_ms, gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms) VALUES "
      "($1, "
      "$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) "
      "ON CONFLICT (day, \"user\", team, gpu_type) DO UPDATE SET "
      "gpu_milli_ms = u.gpu_milli_ms + excluded.gpu_milli_ms, "
      "cpu_milli_ms = u.cpu_milli_ms + excluded.cpu_milli_ms, jobs = u.jobs + excluded.jobs, "
      "wait_ms = u.wait_ms + excluded.wait_ms, waits = u.waits + excluded.waits, "
      "preemptions = u.preemptions + excluded.preemptions, "
      "used_cpu_ms = u.used_cpu_ms + excluded.used_cpu_ms, "
      "measured_cpu_milli_ms = u.measured_cpu_milli_ms + excluded.measured_cpu_milli_ms, "
      "peak_memory_mib_ms = u.peak_memory_mib_ms + excluded.peak_memory_mib_ms, "
      "asked_memory_mib_ms = u.asked_memory_mib_ms + excluded.asked_memory_mib_ms, "
      "gpu_sampled_milli_ms = u.gpu_sampled_milli_ms + excluded.gpu_sampled_milli_ms, "
      "gpu_busy_milli_ms = u.gpu_busy_milli_ms + excluded.gpu_busy_milli_ms, "
      "gpu_idle_milli_ms = u.gpu_idle_milli_ms + excluded.gpu_idle_milli_ms"};
  for (const auto& [key, sums] : buckets) {
    PgCall call;
    call.sql = kSql[daily ? 1 : 0];
    call.params.Add(key.hour)
        .Add(key.user)
        .Add(key.team)
        .Add(key.gpu_type)
        .Add(sums.gpu_milli_ms)
        .Add(sums.cpu_milli_ms)
        .Add(sums.jobs)
        .Add(sums.wait_ms)
        .Add(sums.waits)
        .Add(sums.preemptions)
        .Add(sums.used_cpu_ms)
        .Add(sums.measured_cpu_milli_ms)
        .Add(sums.peak_memory_mib_ms)
        .Add(sums.asked_memory_mib_ms)
        .Add(sums.gpu_sampled_milli_ms)
        .Add(sums.gpu_busy_milli_ms)
        .Add(sums.gpu_idle_milli_ms);
    calls.push_back(std::move(call));
  }
}

}  // namespace

Result<std::unique_ptr<Store>> OpenPgStore(const std::string& conninfo) {
  Result<std::unique_ptr<PgStore>> store = PgStore::Open(conninfo);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(*store));
}

Result<std::unique_ptr<PgStore>> PgStore::Open(const std::string& conninfo) {
  Result<std::unique_ptr<PgConn>> db = PgConn::Connect(conninfo);
  if (!db.ok()) return db.status();
  BERTH_RETURN_IF_ERROR(MigratePgSchema(**db));
  Result<std::unique_ptr<PgConn>> reader = PgConn::Connect(conninfo);
  if (!reader.ok()) return reader.status();
  return std::unique_ptr<PgStore>(new PgStore(std::move(*db), std::move(*reader)));
}

void PgStore::SetFence(std::optional<int64_t> token) {
  MutexLock lock(mu_);
  fence_ = token;
}

Status PgStore::CheckFence() {
  if (!fence_) return Status::Ok();
  return db_->Run("SELECT berth_fence($1)", PgParams().Add(*fence_));
}

Result<std::vector<SubmitResult>> PgStore::SubmitMany(const std::vector<Submission>& submissions) {
  for (const Submission& submission : submissions) {
    if (submission.count < 1) {
      return Status::Invalid("submit: the number of jobs must be at least 1, got " +
                             std::to_string(submission.count));
    }
  }
  MutexLock lock(mu_);
  Result<PgTransaction> txn = PgTransaction::Begin(*db_);
  if (!txn.ok()) return txn.status();
  BERTH_RETURN_IF_ERROR(CheckFence());
  std::vector<SubmitResult> results;
  results.reserve(submissions.size());
  std::vector<PgCall> keys;
  for (const Submission& submission : submissions) {
    Result<SubmitResult> one = InsertSubmission(submission);
    if (!one.ok()) return one.status();
    if (!submission.key.empty()) keys.push_back(InsertSubmitKeyCall(submission, *one));
    results.push_back(std::move(*one));
  }
  if (!keys.empty()) {
    PgCall expire;
    expire.sql = "DELETE FROM submit_keys WHERE created_at < $1";
    expire.params.Add(submissions.front().now - kSubmitKeyRetentionMs);
    keys.push_back(std::move(expire));
    BERTH_RETURN_IF_ERROR(db_->RunPipeline(keys));
  }
  BERTH_RETURN_IF_ERROR(FinishCommit(*txn));
  return results;
}

PgCall PgStore::InsertSubmitKeyCall(const Submission& submission, const SubmitResult& result) {
  PgCall call;
  call.sql =
      "INSERT INTO submit_keys(\"user\", key, fingerprint, spec_id, group_id, first_id, count, "
      "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
  call.params.Add(submission.user)
      .Add(submission.key)
      .Add(submission.fingerprint)
      .Add(result.spec_id)
      .Add(result.group)
      .Add(result.ids.front())
      .Add(submission.count)
      .Add(submission.now);
  return call;
}

Result<std::optional<KeyedSubmission>> PgStore::FindSubmission(const std::string& user,
                                                               const std::string& key) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT fingerprint, spec_id, group_id, first_id, count FROM submit_keys "
      "WHERE \"user\" = $1 AND key = $2",
      PgParams().Add(user).Add(key));
  if (!s.ok()) return s.status();
  if (s->rows() == 0) return std::optional<KeyedSubmission>();
  KeyedSubmission found;
  found.fingerprint = s->Text(0, 0);
  found.result.spec_id = s->Int(0, 1);
  found.result.group = s->OptInt(0, 2);
  found.result.ids.resize(static_cast<size_t>(s->Int(0, 4)));
  std::iota(found.result.ids.begin(), found.result.ids.end(), s->Int(0, 3));
  return std::optional<KeyedSubmission>(std::move(found));
}

Result<SubmitResult> PgStore::InsertSubmission(const Submission& submission) {
  SubmitResult result;
  // The spec, the group and a range of `count` job ids, in one round trip: the counter row stays
  // locked until the transaction ends, so the range is ours and consecutive.
  Result<PgResult> head = db_->Query(
      "WITH s AS (INSERT INTO specs(body) VALUES ($1) RETURNING id), "
      "g AS (INSERT INTO groups(spec_id, size, created_at, max_running) "
      "SELECT s.id, $2, $3, $4 FROM s WHERE $5 RETURNING id), "
      "c AS (UPDATE id_counters SET next = next + $2 WHERE name = 'job' RETURNING next - $2 AS "
      "first) "
      "SELECT (SELECT id FROM s), (SELECT id FROM g), (SELECT first FROM c)",
      PgParams()
          .Add(submission.spec_json)
          .Add(submission.count)
          .Add(submission.now)
          .Add(ToOpt(submission.max_running))
          .Add(submission.as_group ? "true" : "false"));
  if (!head.ok()) return head.status();
  if (head->rows() != 1 || head->IsNull(0, 0) || head->IsNull(0, 2)) {
    return Status::Internal(db_->where() + ": submit: the job id counter is missing");
  }
  result.spec_id = head->Int(0, 0);
  result.group = head->OptInt(0, 1);
  const int64_t first = head->Int(0, 2);
  const ResourceRequest& r = submission.resources;
  // All `count` jobs in one statement, then all their first events in a second.
  Result<PgResult> jobs = db_->Query(
      "INSERT INTO jobs(id, spec_id, group_id, rank, name, \"user\", priority, num_nodes, "
      "cpus_milli, memory_mib, gpu_type, gpu_milli, status, active, reason, attempt, "
      "submitted_at, placement) "
      "SELECT $1::bigint + i, $2, $3::bigint, CASE WHEN $3::bigint IS NOT NULL THEN i END, $4, "
      "$5, $6, $7, $8, $9, $10, $11, 'PENDING', 1, '', 0, $12, '[]' "
      "FROM generate_series(0, $13::integer - 1) AS i",
      PgParams()
          .Add(first)
          .Add(result.spec_id)
          .Add(result.group)
          .Add(submission.name)
          .Add(submission.user)
          .Add(submission.priority)
          .Add(submission.num_nodes)
          .Add(r.cpus)
          .Add(r.memory)
          .Add(r.gpu_type)
          .Add(r.gpu_milli)
          .Add(submission.now)
          .Add(submission.count));
  if (!jobs.ok()) return jobs.status();
  Result<PgResult> events = db_->Query(
      "INSERT INTO job_events(job_id, seq, at, status, attempt, reason, actor) "
      "SELECT $1::bigint + i, 1, $2, 'PENDING', 0, 'submitted', $3 "
      "FROM generate_series(0, $4::integer - 1) AS i",
      PgParams().Add(first).Add(submission.now).Add(submission.user).Add(submission.count));
  if (!events.ok()) return events.status();
  if (jobs->Affected() != submission.count || events->Affected() != submission.count) {
    return Status::Internal(
        db_->where() + ": submit: expected " + std::to_string(submission.count) + " jobs from " +
        std::to_string(first) + " but wrote " + std::to_string(jobs->Affected()));
  }
  result.ids.resize(static_cast<size_t>(submission.count));
  std::iota(result.ids.begin(), result.ids.end(), first);
  return result;
}

Status PgStore::Commit(const Batch& batch) {
  if (batch.empty()) return Status::Ok();
  for (const UsageRecord& record : batch.usage) BERTH_RETURN_IF_ERROR(CheckUsage(record));
  std::vector<PgCall> calls;
  calls.reserve(batch.jobs.size() + batch.events.size() + batch.attempts.size() +
                batch.nodes.size() + batch.users.size() + batch.tokens.size() + batch.audit.size() +
                batch.teams.size() + batch.group_limits.size());
  for (const JobRow& job : batch.jobs) calls.push_back(UpdateJobCall(job));
  for (const auto& [job, event] : batch.events) calls.push_back(AppendEventCall(job, event));
  for (const auto& [job, attempt] : batch.attempts) {
    calls.push_back(UpsertAttemptCall(job, attempt));
  }
  for (const NodeRow& node : batch.nodes) calls.push_back(UpsertNodeCall(node));
  for (const UserRow& user : batch.users) calls.push_back(UpsertUserCall(user));
  for (const TokenRow& token : batch.tokens) calls.push_back(UpsertTokenCall(token));
  for (const AuditRow& row : batch.audit) calls.push_back(AppendAuditCall(row));
  for (const TeamRow& team : batch.teams) calls.push_back(UpsertTeamCall(team));
  // The keys point into batch.usage, which outlives the calls.
  const UsageBuckets buckets = SplitUsage(batch.usage);
  AddBucketCalls(/*daily=*/false, buckets.hours, calls);
  AddBucketCalls(/*daily=*/true, buckets.days, calls);
  for (const auto& [group, limit] : batch.group_limits) {
    PgCall call;
    call.sql = "UPDATE groups SET max_running = $2 WHERE id = $1";
    call.params.Add(group).Add(ToOpt(limit));
    call.expect_rows = 1;
    call.not_found = "commit: group " + std::to_string(group) + " does not exist";
    calls.push_back(std::move(call));
  }
  AddNotificationCalls(batch, calls);
  AddReservationCalls(batch, calls);
  MutexLock lock(mu_);
  Result<PgTransaction> txn = PgTransaction::Begin(*db_);
  if (!txn.ok()) return txn.status();
  BERTH_RETURN_IF_ERROR(CheckFence());
  BERTH_RETURN_IF_ERROR(db_->RunPipeline(calls));
  return FinishCommit(*txn);
}

Status PgStore::FinishCommit(PgTransaction& txn) {
  Status status = txn.Commit();
  // The connection broke during COMMIT: it may have committed. Memory built on "it failed" may
  // now miss it; say so to whoever can reload (the HA loop steps down and leads afresh).
  if (!status.ok() && db_->broken()) commit_uncertain_ = true;
  return status;
}

Result<std::vector<JobRow>> PgStore::LoadActiveJobs() {
  // In pages by id, all from one snapshot of the database.
  MutexLock lock(read_mu_);
  BERTH_RETURN_IF_ERROR(read_db_->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
  Result<std::vector<JobRow>> jobs = LoadActiveJobPages();
  if (!jobs.ok()) {
    (void)read_db_->Exec("ROLLBACK");
    return jobs.status();
  }
  BERTH_RETURN_IF_ERROR(read_db_->Exec("COMMIT"));
  return jobs;
}

Result<std::vector<JobRow>> PgStore::LoadActiveJobPages() {
  std::vector<JobRow> jobs;
  const int64_t page_rows = load_page_rows_.load();
  const std::string page_sql = "SELECT " + std::string(kJobColumns) +
                               " FROM jobs WHERE active = 1 AND id > $1 ORDER BY id LIMIT $2";
  for (int64_t after = 0;;) {
    PgParams params;
    params.Add(after).Add(page_rows);
    Result<std::vector<JobRow>> page = QueryJobs(*read_db_, page_sql, params);
    if (!page.ok()) return page.status();
    for (JobRow& job : *page) jobs.push_back(std::move(job));
    if (static_cast<int64_t>(page->size()) < page_rows) break;
    after = jobs.back().id;
  }
  return jobs;
}

Result<std::vector<JobRow>> PgStore::ListJobs(const JobQuery& query) {
  if (query.limit < 0) {
    return Status::Invalid("list jobs: limit must be 0 (no limit) or more, got " +
                           std::to_string(query.limit));
  }
  // The optional filters become extra terms with numbered parameters; a LIMIT of NULL is none.
  std::string filter;
  PgParams params;
  int n = 0;
  if (query.group) {
    filter += " AND group_id = $" + std::to_string(++n);
    params.Add(*query.group);
  }
  if (query.before_id) {
    filter += " AND id < $" + std::to_string(++n);
    params.Add(*query.before_id);
  }
  if (query.ungrouped_only) filter += " AND group_id IS NULL";
  const std::string select = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE ";
  const std::string limit_param = " ORDER BY id DESC LIMIT $" + std::to_string(n + 1);
  const std::optional<int64_t> limit =
      query.limit == 0 ? std::nullopt : std::optional<int64_t>(query.limit);
  auto with_limit = [&](std::optional<int64_t> value) {
    PgParams p = params;
    p.Add(value);
    return p;
  };

  MutexLock lock(read_mu_);
  if (query.finished_only) {
    return QueryJobs(*read_db_, select + "active = 0" + filter + limit_param, with_limit(limit));
  }
  if (query.all) {
    return QueryJobs(*read_db_, select + "TRUE" + filter + limit_param, with_limit(limit));
  }
  // Every active job (at most a page of them), plus the newest `limit` finished ones, from one
  // snapshot; then merged newest first.
  Result<PgTransaction> txn = PgTransaction::Begin(*read_db_, kSnapshot);
  if (!txn.ok()) return txn.status();
  Result<std::vector<JobRow>> active =
      QueryJobs(*read_db_, select + "active = 1" + filter + limit_param,
                with_limit(query.page > 0 ? std::optional<int64_t>(query.page) : std::nullopt));
  if (!active.ok()) return active.status();
  Result<std::vector<JobRow>> finished =
      QueryJobs(*read_db_, select + "active = 0" + filter + limit_param, with_limit(limit));
  if (!finished.ok()) return finished.status();
  BERTH_RETURN_IF_ERROR(txn->Commit());
  std::vector<JobRow> jobs;
  jobs.reserve(active->size() + finished->size());
  std::merge(std::make_move_iterator(active->begin()), std::make_move_iterator(active->end()),
             std::make_move_iterator(finished->begin()), std::make_move_iterator(finished->end()),
             std::back_inserter(jobs),
             [](const JobRow& a, const JobRow& b) { return a.id > b.id; });
  if (query.page > 0 && jobs.size() > static_cast<size_t>(query.page)) jobs.resize(query.page);
  return jobs;
}

Result<std::vector<JobRow>> PgStore::GetJobs(const std::vector<int64_t>& ids) {
  if (ids.empty()) return std::vector<JobRow>{};
  MutexLock lock(read_mu_);
  return QueryJobs(
      *read_db_,
      "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id = ANY($1::bigint[]) ORDER BY id",
      PgParams().Add(IntArray(ids)));
}

Result<std::vector<JobEvent>> PgStore::GetEvents(int64_t job) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT at, status, attempt, reason, actor FROM job_events WHERE job_id = $1 ORDER BY seq",
      PgParams().Add(job));
  if (!s.ok()) return s.status();
  std::vector<JobEvent> events;
  for (int r = 0; r < s->rows(); ++r) {
    std::string status = s->Text(r, 1);
    std::optional<JobStatus> parsed = ParseJobStatus(status);
    if (!parsed) {
      return Status::Internal(read_db_->where() + ": event of job " + std::to_string(job) +
                              ": unknown status \"" + status + "\"");
    }
    events.push_back(JobEvent{.at = s->Int(r, 0),
                              .status = *parsed,
                              .attempt = static_cast<int>(s->Int(r, 2)),
                              .reason = s->Text(r, 3),
                              .by = s->Text(r, 4)});
  }
  return events;
}

Result<std::vector<AttemptRow>> PgStore::GetAttempts(int64_t job) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT attempt, placement, placed_at, ended_at, outcome, reason, exit_code, "
      "peak_memory_bytes, cpu_ms FROM attempts WHERE job_id = $1 ORDER BY attempt",
      PgParams().Add(job));
  if (!s.ok()) return s.status();
  std::vector<AttemptRow> attempts;
  for (int r = 0; r < s->rows(); ++r) {
    AttemptRow a;
    a.attempt = static_cast<int>(s->Int(r, 0));
    const std::string what =
        "attempt " + std::to_string(a.attempt) + " of job " + std::to_string(job);
    Result<Placement> placement = DecodePlacement(s->Text(r, 1));
    if (!placement.ok()) return Corrupt(*read_db_, what, placement.status());
    a.placement = std::move(*placement);
    a.placed_at = s->Int(r, 2);
    a.ended_at = s->OptInt(r, 3);
    if (!s->IsNull(r, 4)) {
      std::string outcome = s->Text(r, 4);
      a.outcome = ParseJobStatus(outcome);
      if (!a.outcome) {
        return Status::Internal(read_db_->where() + ": " + what + ": unknown outcome \"" + outcome +
                                "\"");
      }
    }
    a.reason = s->Text(r, 5);
    a.exit_code = ToOptInt(s->OptInt(r, 6));
    a.peak_memory_bytes = s->OptInt(r, 7);
    a.cpu_ms = s->OptInt(r, 8);
    attempts.push_back(std::move(a));
  }
  return attempts;
}

Result<std::string> PgStore::GetSpec(int64_t spec_id) {
  MutexLock lock(read_mu_);
  Result<PgResult> s =
      read_db_->Query("SELECT body FROM specs WHERE id = $1", PgParams().Add(spec_id));
  if (!s.ok()) return s.status();
  if (s->rows() == 0) return Status::NotFound("spec " + std::to_string(spec_id) + " not found");
  return s->Text(0, 0);
}

Result<int> PgStore::GroupSize(int64_t group) {
  MutexLock lock(read_mu_);
  Result<PgResult> s =
      read_db_->Query("SELECT size FROM groups WHERE id = $1", PgParams().Add(group));
  if (!s.ok()) return s.status();
  if (s->rows() == 0) return Status::NotFound("group " + std::to_string(group) + " not found");
  return static_cast<int>(s->Int(0, 0));
}

Result<Store::GroupInfo> PgStore::GetGroup(int64_t group) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT g.max_running, min(j.id), max(j.id), min(j.\"user\") FROM groups g "
      "JOIN jobs j ON j.group_id = g.id WHERE g.id = $1 GROUP BY g.id",
      PgParams().Add(group));
  if (!s.ok()) return s.status();
  if (s->rows() == 0) return Status::NotFound("group " + std::to_string(group) + " not found");
  GroupInfo info;
  info.max_running = ToOptInt(s->OptInt(0, 0));
  info.first_job = s->Int(0, 1);
  info.last_job = s->Int(0, 2);
  info.user = s->Text(0, 3);
  return info;
}

Result<std::map<int64_t, int>> PgStore::LoadGroupLimits() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT id, max_running FROM groups WHERE max_running IS NOT NULL AND id IN "
      "(SELECT group_id FROM jobs WHERE active = 1 AND group_id IS NOT NULL)");
  if (!s.ok()) return s.status();
  std::map<int64_t, int> out;
  for (int r = 0; r < s->rows(); ++r) out[s->Int(r, 0)] = static_cast<int>(s->Int(r, 1));
  return out;
}

Result<std::map<int64_t, std::map<JobStatus, int>>> PgStore::GroupStatusCounts(
    const std::vector<int64_t>& groups) {
  std::map<int64_t, std::map<JobStatus, int>> out;
  for (int64_t group : groups) out[group];  // every asked-for group has an entry
  if (groups.empty()) return out;
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT group_id, status, count(*) FROM jobs WHERE group_id = ANY($1::bigint[]) "
      "GROUP BY group_id, status",
      PgParams().Add(IntArray(groups)));
  if (!s.ok()) return s.status();
  for (int r = 0; r < s->rows(); ++r) {
    const int64_t group = s->Int(r, 0);
    std::optional<JobStatus> status = ParseJobStatus(s->Text(r, 1));
    if (!status) return Status::Internal("group " + std::to_string(group) + ": bad status");
    out[group][*status] = static_cast<int>(s->Int(r, 2));
  }
  return out;
}

Result<std::vector<NodeRow>> PgStore::LoadNodes() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT name, node_id, state, draining, pool, labels, address, cpus_milli, memory_mib, gpus, "
      "registered_at, last_seen, down_since FROM nodes ORDER BY name COLLATE \"C\"");
  if (!s.ok()) return s.status();
  std::vector<NodeRow> nodes;
  for (int r = 0; r < s->rows(); ++r) {
    NodeRow n;
    n.name = s->Text(r, 0);
    const std::string what = "node " + n.name;
    n.node_id = s->Text(r, 1);
    std::string state = s->Text(r, 2);
    std::optional<NodeState> parsed = ParseNodeState(state);
    if (!parsed) {
      return Status::Internal(read_db_->where() + ": " + what + ": unknown state \"" + state +
                              "\"");
    }
    n.state = *parsed;
    n.draining = s->Int(r, 3) != 0;
    n.pool = s->Text(r, 4);
    Result<std::map<std::string, std::string>> labels = DecodeLabels(s->Text(r, 5));
    if (!labels.ok()) return Corrupt(*read_db_, what, labels.status());
    n.labels = std::move(*labels);
    n.address = s->Text(r, 6);
    n.cpus = s->Int(r, 7);
    n.memory = s->Int(r, 8);
    Result<std::vector<GpuDevice>> gpus = DecodeGpus(s->Text(r, 9));
    if (!gpus.ok()) return Corrupt(*read_db_, what, gpus.status());
    n.gpus = std::move(*gpus);
    n.registered_at = s->Int(r, 10);
    n.last_seen = s->Int(r, 11);
    n.down_since = s->OptInt(r, 12);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

Result<std::vector<UserRow>> PgStore::LoadUsers() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT name, role, max_priority, team, updated_at, updated_by, max_running_gpus, "
      "max_pending_jobs FROM users ORDER BY name COLLATE \"C\"");
  if (!s.ok()) return s.status();
  std::vector<UserRow> users;
  for (int r = 0; r < s->rows(); ++r) {
    std::optional<Role> role = ParseRole(s->Text(r, 1));
    if (!role) {
      return Status::Internal(read_db_->where() + ": user " + s->Text(r, 0) + ": unknown role \"" +
                              s->Text(r, 1) + "\"");
    }
    users.push_back(UserRow{.name = s->Text(r, 0),
                            .role = *role,
                            .max_priority = static_cast<int>(s->Int(r, 2)),
                            .team = s->Text(r, 3),
                            .max_running_gpus = ToOptInt(s->OptInt(r, 6)),
                            .max_pending_jobs = ToOptInt(s->OptInt(r, 7)),
                            .updated_at = s->Int(r, 4),
                            .updated_by = s->Text(r, 5)});
  }
  return users;
}

Result<std::vector<TokenRow>> PgStore::LoadTokens() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT name, \"user\", hash, created_at, expires_at, revoked_at, created_by, speaks_for "
      "FROM tokens ORDER BY name COLLATE \"C\"");
  if (!s.ok()) return s.status();
  std::vector<TokenRow> tokens;
  for (int r = 0; r < s->rows(); ++r) {
    tokens.push_back(TokenRow{.name = s->Text(r, 0),
                              .user = s->Text(r, 1),
                              .hash = s->Text(r, 2),
                              .created_at = s->Int(r, 3),
                              .expires_at = s->OptInt(r, 4),
                              .revoked_at = s->OptInt(r, 5),
                              .created_by = s->Text(r, 6),
                              .speaks_for = s->Text(r, 7)});
  }
  return tokens;
}

Result<std::vector<AuditRow>> PgStore::ListAudit(int limit) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT seq, at, actor, action, target, detail FROM "
      "(SELECT * FROM audit ORDER BY seq DESC LIMIT $1) AS newest ORDER BY seq",
      PgParams().Add(limit > 0 ? std::optional<int64_t>(limit) : std::nullopt));
  if (!s.ok()) return s.status();
  std::vector<AuditRow> rows;
  for (int r = 0; r < s->rows(); ++r) {
    rows.push_back(AuditRow{.seq = s->Int(r, 0),
                            .at = s->Int(r, 1),
                            .by = s->Text(r, 2),
                            .action = s->Text(r, 3),
                            .target = s->Text(r, 4),
                            .detail = s->Text(r, 5)});
  }
  return rows;
}

Result<std::vector<TeamRow>> PgStore::LoadTeams() {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT name, quota, borrow_limit, weight, updated_at, updated_by FROM teams ORDER BY name "
      "COLLATE \"C\"");
  if (!s.ok()) return s.status();
  std::vector<TeamRow> teams;
  for (int r = 0; r < s->rows(); ++r) {
    TeamRow t;
    t.name = s->Text(r, 0);
    Result<std::map<std::string, MilliGpu>> quota = DecodeMilliMap(s->Text(r, 1));
    if (!quota.ok()) return Corrupt(*read_db_, "team " + t.name + ": quota", quota.status());
    t.quota = std::move(*quota);
    Result<std::map<std::string, MilliGpu>> borrow = DecodeMilliMap(s->Text(r, 2));
    if (!borrow.ok()) {
      return Corrupt(*read_db_, "team " + t.name + ": borrow limit", borrow.status());
    }
    t.borrow_limit = std::move(*borrow);
    t.weight = s->Real(r, 3);
    t.updated_at = s->Int(r, 4);
    t.updated_by = s->Text(r, 5);
    teams.push_back(std::move(t));
  }
  return teams;
}

Result<std::vector<UsageRow>> PgStore::QueryUsage(const UsageQuery& query) {
  // As SqliteStore: whole days from usage_daily, the hours at the ends from usage_hourly, in one
  // snapshot, added up here (so both backends round the same way).
  static const std::string kSql[2][2] = {
      {"SELECT \"user\", gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_hourly WHERE hour >= $1 AND hour < $2",
       "SELECT \"user\", gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_daily WHERE day >= $1 AND day < $2"},
      {"SELECT team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_hourly WHERE hour >= $1 AND hour < $2",
       "SELECT team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_daily WHERE day >= $1 AND day < $2"}};
  UsageTotals totals;
  {
    MutexLock lock(read_mu_);
    Result<PgTransaction> txn = PgTransaction::Begin(*read_db_, kSnapshot);
    if (!txn.ok()) return txn.status();
    for (const UsageRange& range : UsageRanges(query)) {
      Result<PgResult> s = read_db_->Query(kSql[query.by_team ? 1 : 0][range.daily ? 1 : 0],
                                           PgParams().Add(range.from).Add(range.to));
      if (!s.ok()) return s.status();
      for (int r = 0; r < s->rows(); ++r) {
        totals.Add(s->TextView(r, 0), s->TextView(r, 1),
                   BucketSums{.gpu_milli_ms = s->Int(r, 2),
                              .cpu_milli_ms = s->Int(r, 3),
                              .jobs = s->Int(r, 4),
                              .wait_ms = s->Int(r, 5),
                              .waits = s->Int(r, 6),
                              .preemptions = s->Int(r, 7),
                              .used_cpu_ms = s->Int(r, 8),
                              .measured_cpu_milli_ms = s->Int(r, 9),
                              .peak_memory_mib_ms = s->Int(r, 10),
                              .asked_memory_mib_ms = s->Int(r, 11),
                              .gpu_sampled_milli_ms = s->Int(r, 12),
                              .gpu_busy_milli_ms = s->Int(r, 13),
                              .gpu_idle_milli_ms = s->Int(r, 14)});
      }
    }
    BERTH_RETURN_IF_ERROR(txn->Commit());
  }
  return std::move(totals).Finish();
}

Result<std::vector<UsageBucket>> PgStore::LoadUsageBuckets(TimeMs since) {
  MutexLock lock(read_mu_);
  Result<PgResult> s = read_db_->Query(
      "SELECT hour, \"user\", team, gpu_type, gpu_milli_ms, cpu_milli_ms, gpu_idle_milli_ms FROM "
      "usage_hourly "
      "WHERE hour >= $1 ORDER BY hour, \"user\" COLLATE \"C\", team COLLATE \"C\", gpu_type "
      "COLLATE \"C\"",
      PgParams().Add(since));
  if (!s.ok()) return s.status();
  std::vector<UsageBucket> buckets;
  buckets.reserve(static_cast<size_t>(s->rows()));
  for (int r = 0; r < s->rows(); ++r) {
    buckets.push_back(
        UsageBucket{.hour = s->Int(r, 0),
                    .user = s->Text(r, 1),
                    .team = s->Text(r, 2),
                    .gpu_type = s->Text(r, 3),
                    .gpu_seconds = static_cast<double>(s->Int(r, 4)) / kMilliMsPerSecond,
                    .cpu_seconds = static_cast<double>(s->Int(r, 5)) / kMilliMsPerSecond,
                    .idle_gpu_seconds = static_cast<double>(s->Int(r, 6)) / kMilliMsPerSecond});
  }
  return buckets;
}

}  // namespace berth
