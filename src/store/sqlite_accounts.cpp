// SqliteStore's accounting side (store/sqlite_store.h): users, teams, tokens, the audit log, and
// the usage ledger's hourly and daily buckets.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "store/row_codec.h"
#include "store/schema.h"
#include "store/sqlite_store.h"

namespace berth {
namespace {

using namespace store_codec;  // the row codec shared by the backends

constexpr int64_t kAllRows = -1;  // LIMIT -1: no limit

// Adds `buckets` to `table` (usage_hourly, or usage_daily whose key starts with `day` instead of
// `hour`), one upsert per bucket.
Status UpsertBuckets(SqliteDb& db, bool daily, const std::map<BucketKey, BucketSums>& buckets) {
  static const std::string kSql[2] = {
      "INSERT INTO usage_hourly(hour, user, team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, "
      "wait_ms, waits, preemptions, used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, "
      "asked_memory_mib_ms, gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms) VALUES "
      "(?1, "
      "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) "
      "ON CONFLICT(hour, user, team, gpu_type) DO UPDATE SET "
      "gpu_milli_ms = gpu_milli_ms + excluded.gpu_milli_ms, "
      "cpu_milli_ms = cpu_milli_ms + excluded.cpu_milli_ms, jobs = jobs + excluded.jobs, "
      "wait_ms = wait_ms + excluded.wait_ms, waits = waits + excluded.waits, "
      "preemptions = preemptions + excluded.preemptions, "
      "used_cpu_ms = used_cpu_ms + excluded.used_cpu_ms, "
      "measured_cpu_milli_ms = measured_cpu_milli_ms + excluded.measured_cpu_milli_ms, "
      "peak_memory_mib_ms = peak_memory_mib_ms + excluded.peak_memory_mib_ms, "
      "asked_memory_mib_ms = asked_memory_mib_ms + excluded.asked_memory_mib_ms, "
      "gpu_sampled_milli_ms = gpu_sampled_milli_ms + excluded.gpu_sampled_milli_ms, "
      "gpu_busy_milli_ms = gpu_busy_milli_ms + excluded.gpu_busy_milli_ms, "
      "gpu_idle_milli_ms = gpu_idle_milli_ms + excluded.gpu_idle_milli_ms",
      "INSERT INTO usage_daily(day, user, team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, "
      "wait_ms, waits, preemptions, used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, "
      "asked_memory_mib_ms, gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms) VALUES "
      "(?1, "
      "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) "
      "ON CONFLICT(day, user, team, gpu_type) DO UPDATE SET "
      "gpu_milli_ms = gpu_milli_ms + excluded.gpu_milli_ms, "
      "cpu_milli_ms = cpu_milli_ms + excluded.cpu_milli_ms, jobs = jobs + excluded.jobs, "
      "wait_ms = wait_ms + excluded.wait_ms, waits = waits + excluded.waits, "
      "preemptions = preemptions + excluded.preemptions, "
      "used_cpu_ms = used_cpu_ms + excluded.used_cpu_ms, "
      "measured_cpu_milli_ms = measured_cpu_milli_ms + excluded.measured_cpu_milli_ms, "
      "peak_memory_mib_ms = peak_memory_mib_ms + excluded.peak_memory_mib_ms, "
      "asked_memory_mib_ms = asked_memory_mib_ms + excluded.asked_memory_mib_ms, "
      "gpu_sampled_milli_ms = gpu_sampled_milli_ms + excluded.gpu_sampled_milli_ms, "
      "gpu_busy_milli_ms = gpu_busy_milli_ms + excluded.gpu_busy_milli_ms, "
      "gpu_idle_milli_ms = gpu_idle_milli_ms + excluded.gpu_idle_milli_ms"};
  Result<StatementRef> ref = db.Cached(kSql[daily ? 1 : 0]);
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  for (const auto& [key, sums] : buckets) {
    BERTH_RETURN_IF_ERROR(s.Bind(1, key.hour)
                              .Bind(2, key.user)
                              .Bind(3, key.team)
                              .Bind(4, key.gpu_type)
                              .Bind(5, sums.gpu_milli_ms)
                              .Bind(6, sums.cpu_milli_ms)
                              .Bind(7, sums.jobs)
                              .Bind(8, sums.wait_ms)
                              .Bind(9, sums.waits)
                              .Bind(10, sums.preemptions)
                              .Bind(11, sums.used_cpu_ms)
                              .Bind(12, sums.measured_cpu_milli_ms)
                              .Bind(13, sums.peak_memory_mib_ms)
                              .Bind(14, sums.asked_memory_mib_ms)
                              .Bind(15, sums.gpu_sampled_milli_ms)
                              .Bind(16, sums.gpu_busy_milli_ms)
                              .Bind(17, sums.gpu_idle_milli_ms)
                              .Run());
    s.Reset();
  }
  return Status::Ok();
}

}  // namespace

Status SqliteStore::UpsertUser(const UserRow& user) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO users(name, role, max_priority, team, updated_at, updated_by, "
      "max_running_gpus, max_pending_jobs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
      "ON CONFLICT(name) DO UPDATE SET role = excluded.role, "
      "max_priority = excluded.max_priority, team = excluded.team, "
      "updated_at = excluded.updated_at, updated_by = excluded.updated_by, "
      "max_running_gpus = excluded.max_running_gpus, "
      "max_pending_jobs = excluded.max_pending_jobs");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, user.name)
      .Bind(2, RoleName(user.role))
      .Bind(3, int64_t{user.max_priority})
      .Bind(4, user.team)
      .Bind(5, user.updated_at)
      .Bind(6, user.updated_by)
      .Bind(7, ToOpt(user.max_running_gpus))
      .Bind(8, ToOpt(user.max_pending_jobs))
      .Run();
}

Status SqliteStore::UpsertTeam(const TeamRow& team) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO teams(name, quota, borrow_limit, weight, updated_at, updated_by) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
      "ON CONFLICT(name) DO UPDATE SET quota = excluded.quota, "
      "borrow_limit = excluded.borrow_limit, weight = excluded.weight, "
      "updated_at = excluded.updated_at, updated_by = excluded.updated_by");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, team.name)
      .Bind(2, EncodeMilliMap(team.quota))
      .Bind(3, EncodeMilliMap(team.borrow_limit))
      .Bind(4, team.weight)
      .Bind(5, team.updated_at)
      .Bind(6, team.updated_by)
      .Run();
}

Status SqliteStore::AddUsage(const std::vector<UsageRecord>& usage) {
  if (usage.empty()) return Status::Ok();
  // Upserted in key order, which is also the tables' order.
  const UsageBuckets buckets = SplitUsage(usage);
  BERTH_RETURN_IF_ERROR(UpsertBuckets(*db_, /*daily=*/false, buckets.hours));
  return UpsertBuckets(*db_, /*daily=*/true, buckets.days);
}

Status SqliteStore::UpsertToken(const TokenRow& token) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO tokens(name, user, hash, created_at, expires_at, revoked_at, created_by, "
      "speaks_for) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
      "ON CONFLICT(name) DO UPDATE SET user = excluded.user, hash = excluded.hash, "
      "created_at = excluded.created_at, expires_at = excluded.expires_at, "
      "revoked_at = excluded.revoked_at, created_by = excluded.created_by, "
      "speaks_for = excluded.speaks_for");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, token.name)
      .Bind(2, token.user)
      .Bind(3, token.hash)
      .Bind(4, token.created_at)
      .Bind(5, token.expires_at)
      .Bind(6, token.revoked_at)
      .Bind(7, token.created_by)
      .Bind(8, token.speaks_for)
      .Run();
}

Status SqliteStore::AppendAudit(const AuditRow& row) {
  Result<StatementRef> ref = db_->Cached(
      "INSERT INTO audit(at, actor, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!ref.ok()) return ref.status();
  return (*ref)
      ->Bind(1, row.at)
      .Bind(2, row.by)
      .Bind(3, row.action)
      .Bind(4, row.target)
      .Bind(5, row.detail)
      .Run();
}

Result<std::vector<UserRow>> SqliteStore::LoadUsers() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT name, role, max_priority, team, updated_at, updated_by, max_running_gpus, "
      "max_pending_jobs FROM users ORDER BY name");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  std::vector<UserRow> users;
  Status read = s.ForEachRow([&]() -> Status {
    std::optional<Role> role = ParseRole(s.Text(1));
    if (!role) {
      return Status::Internal(read_db_->path() + ": user " + s.Text(0) + ": unknown role \"" +
                              s.Text(1) + "\"");
    }
    users.push_back(UserRow{.name = s.Text(0),
                            .role = *role,
                            .max_priority = static_cast<int>(s.Int(2)),
                            .team = s.Text(3),
                            .max_running_gpus = ToOptInt(s.OptInt(6)),
                            .max_pending_jobs = ToOptInt(s.OptInt(7)),
                            .updated_at = s.Int(4),
                            .updated_by = s.Text(5)});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return users;
}

Result<std::vector<TokenRow>> SqliteStore::LoadTokens() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT name, user, hash, created_at, expires_at, revoked_at, created_by, speaks_for "
      "FROM tokens ORDER BY name");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  std::vector<TokenRow> tokens;
  Status read = s.ForEachRow([&]() -> Status {
    tokens.push_back(TokenRow{.name = s.Text(0),
                              .user = s.Text(1),
                              .hash = s.Text(2),
                              .created_at = s.Int(3),
                              .expires_at = s.OptInt(4),
                              .revoked_at = s.OptInt(5),
                              .created_by = s.Text(6),
                              .speaks_for = s.Text(7)});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return tokens;
}

Result<std::vector<AuditRow>> SqliteStore::ListAudit(int limit) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT seq, at, actor, action, target, detail FROM "
      "(SELECT * FROM audit ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, limit > 0 ? int64_t{limit} : kAllRows);
  std::vector<AuditRow> rows;
  Status read = s.ForEachRow([&]() -> Status {
    rows.push_back(AuditRow{.seq = s.Int(0),
                            .at = s.Int(1),
                            .by = s.Text(2),
                            .action = s.Text(3),
                            .target = s.Text(4),
                            .detail = s.Text(5)});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return rows;
}

Result<std::vector<TeamRow>> SqliteStore::LoadTeams() {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT name, quota, borrow_limit, weight, updated_at, updated_by FROM teams ORDER BY name");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  std::vector<TeamRow> teams;
  Status read = s.ForEachRow([&]() -> Status {
    TeamRow t;
    t.name = s.Text(0);
    Result<std::map<std::string, MilliGpu>> quota = DecodeMilliMap(s.Text(1));
    if (!quota.ok()) return Corrupt(*read_db_, "team " + t.name + ": quota", quota.status());
    t.quota = std::move(*quota);
    Result<std::map<std::string, MilliGpu>> borrow = DecodeMilliMap(s.Text(2));
    if (!borrow.ok()) {
      return Corrupt(*read_db_, "team " + t.name + ": borrow limit", borrow.status());
    }
    t.borrow_limit = std::move(*borrow);
    t.weight = s.Real(3);
    t.updated_at = s.Int(4);
    t.updated_by = s.Text(5);
    teams.push_back(std::move(t));
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return teams;
}

Result<std::vector<UsageRow>> SqliteStore::QueryUsage(const UsageQuery& query) {
  // Whole UTC days from usage_daily, the hours at the ends from usage_hourly (each a range of its
  // table's primary key).
  const std::vector<UsageRange> ranges = UsageRanges(query);
  static const std::string kSql[2][2] = {
      {"SELECT user, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_hourly WHERE hour >= ?1 AND hour < ?2",
       "SELECT user, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_daily WHERE day >= ?1 AND day < ?2"},
      {"SELECT team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_hourly WHERE hour >= ?1 AND hour < ?2",
       "SELECT team, gpu_type, gpu_milli_ms, cpu_milli_ms, jobs, wait_ms, waits, preemptions, "
       "used_cpu_ms, measured_cpu_milli_ms, peak_memory_mib_ms, asked_memory_mib_ms, "
       "gpu_sampled_milli_ms, gpu_busy_milli_ms, gpu_idle_milli_ms FROM "
       "usage_daily WHERE day >= ?1 AND day < ?2"}};

  // The rows are added up here rather than by GROUP BY: SQLite groups by sorting every row into a
  // temporary b-tree, which cost 3-4x the scan itself (bench/README.md, "Usage accounting").
  UsageTotals totals;
  {
    std::lock_guard<std::mutex> lock(read_mu_);
    // One snapshot for all ranges: a commit between two of them would count its hours but not its
    // days.
    Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
    if (!txn.ok()) return txn.status();
    for (const UsageRange& range : ranges) {
      Result<StatementRef> ref = read_db_->Cached(kSql[query.by_team ? 1 : 0][range.daily ? 1 : 0]);
      if (!ref.ok()) return ref.status();
      Statement& s = **ref;
      s.Bind(1, range.from).Bind(2, range.to);
      Status read = s.ForEachRow([&]() -> Status {
        totals.Add(s.TextView(0), s.TextView(1),
                   BucketSums{.gpu_milli_ms = s.Int(2),
                              .cpu_milli_ms = s.Int(3),
                              .jobs = s.Int(4),
                              .wait_ms = s.Int(5),
                              .waits = s.Int(6),
                              .preemptions = s.Int(7),
                              .used_cpu_ms = s.Int(8),
                              .measured_cpu_milli_ms = s.Int(9),
                              .peak_memory_mib_ms = s.Int(10),
                              .asked_memory_mib_ms = s.Int(11),
                              .gpu_sampled_milli_ms = s.Int(12),
                              .gpu_busy_milli_ms = s.Int(13),
                              .gpu_idle_milli_ms = s.Int(14)});
        return Status::Ok();
      });
      if (!read.ok()) return read;
    }
    BERTH_RETURN_IF_ERROR(txn->Commit());
  }
  return std::move(totals).Finish();
}

Result<std::vector<UsageBucket>> SqliteStore::LoadUsageBuckets(TimeMs since) {
  std::lock_guard<std::mutex> lock(read_mu_);
  Result<Transaction> txn = Transaction::Begin(*read_db_, Transaction::Mode::kRead);
  if (!txn.ok()) return txn.status();
  std::vector<UsageBucket> buckets;
  {
    // Counted first (a fraction of the read's cost), so that a vector of ~100 MB for 70 days of a
    // busy cluster is allocated once rather than grown and copied.
    Result<StatementRef> count =
        read_db_->Cached("SELECT count(*) FROM usage_hourly WHERE hour >= ?1");
    if (!count.ok()) return count.status();
    (*count)->Bind(1, since);
    Result<bool> row = (*count)->Step();
    if (!row.ok()) return row.status();
    if (*row) buckets.reserve(static_cast<size_t>((*count)->Int(0)));
  }
  Result<StatementRef> ref = read_db_->Cached(
      "SELECT hour, user, team, gpu_type, gpu_milli_ms, cpu_milli_ms, gpu_idle_milli_ms FROM "
      "usage_hourly "
      "WHERE hour >= ?1 ORDER BY hour, user, team, gpu_type");
  if (!ref.ok()) return ref.status();
  Statement& s = **ref;
  s.Bind(1, since);
  Status read = s.ForEachRow([&]() -> Status {
    buckets.push_back(
        UsageBucket{.hour = s.Int(0),
                    .user = s.Text(1),
                    .team = s.Text(2),
                    .gpu_type = s.Text(3),
                    .gpu_seconds = static_cast<double>(s.Int(4)) / kMilliMsPerSecond,
                    .cpu_seconds = static_cast<double>(s.Int(5)) / kMilliMsPerSecond,
                    .idle_gpu_seconds = static_cast<double>(s.Int(6)) / kMilliMsPerSecond});
    return Status::Ok();
  });
  if (!read.ok()) return read;
  BERTH_RETURN_IF_ERROR(txn->Commit());
  return buckets;
}

}  // namespace berth
