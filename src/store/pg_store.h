// PgStore: the Store in a PostgreSQL database (docs/ha.md), for control planes of several servers
// that must survive losing one machine. Passes the same store test suite as SqliteStore.
//
// Durability: a method returns ok once PostgreSQL has committed its transaction (synchronous_commit
// as the database is configured; PostgreSQL's default flushes the WAL at every commit). When the
// connection is lost during COMMIT, the outcome is unknown and the method says so (kUnavailable):
// callers treat it like any failed commit and apply nothing.
//
// Connections: two, as SqliteStore has two: one for writes (Submit, Commit) and one for reads, so
// that listings never wait behind a big write. Statements are prepared once per connection; a
// commit's writes go out in pipeline mode (one round trip per few hundred statements). A lost
// connection answers kUnavailable and is re-established by the next call.
//
// Thread-safety: every public method takes the mutex of the connection it uses (mu_ or read_mu_).
// Several servers may share one database; the store itself does not arbitrate between them
// (leadership and fencing are the server's, docs/ha.md).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "store/pg.h"
#include "store/store.h"

namespace berth {

class PgStore final : public Store {
 public:
  // Connects twice to `conninfo` (a postgresql:// URI) and migrates the schema to
  // kPgSchemaVersion. Errors name the server (never the password).
  static Result<std::unique_ptr<PgStore>> Open(const std::string& conninfo);

  Result<std::vector<SubmitResult>> SubmitMany(const std::vector<Submission>& submissions) override;
  // As SqliteStore::Commit: a job or group id that does not exist fails the whole batch
  // (kNotFound); implausible usage records fail it before anything is sent (kInvalidArgument).
  Result<std::optional<KeyedSubmission>> FindSubmission(const std::string& user,
                                                        const std::string& key) override;
  Status Commit(const Batch& batch) override;
  Result<std::vector<JobRow>> LoadActiveJobs() override;
  Result<std::vector<JobRow>> ListJobs(const JobQuery& query) override;
  Result<std::vector<JobRow>> GetJobs(const std::vector<int64_t>& ids) override;
  Result<std::vector<JobEvent>> GetEvents(int64_t job) override;
  Result<std::vector<AttemptRow>> GetAttempts(int64_t job) override;
  Result<std::string> GetSpec(int64_t spec_id) override;
  Result<int> GroupSize(int64_t group) override;
  Result<std::map<int64_t, std::map<JobStatus, int>>> GroupStatusCounts(
      const std::vector<int64_t>& groups) override;
  Result<GroupInfo> GetGroup(int64_t group) override;
  Result<std::map<int64_t, int>> LoadGroupLimits() override;
  Result<std::vector<NodeRow>> LoadNodes() override;
  Result<std::vector<UserRow>> LoadUsers() override;
  Result<std::vector<TokenRow>> LoadTokens() override;
  Result<std::vector<AuditRow>> ListAudit(int limit) override;
  Result<std::vector<TeamRow>> LoadTeams() override;
  Result<std::vector<UsageRow>> QueryUsage(const UsageQuery& query) override;
  Result<std::vector<UsageBucket>> LoadUsageBuckets(TimeMs since) override;
  Result<std::vector<NotifySinkRow>> LoadNotifySinks() override;
  Result<std::vector<ReservationRow>> LoadReservations() override;
  Result<std::vector<NoticeRow>> DueNotices(TimeMs now, int limit) override;
  Status UpdateNotice(const NoticeUpdate& update) override;
  Result<std::vector<NoticeRow>> ListNotices(const std::string& user, std::optional<int64_t> job,
                                             int limit) override;

  // Fencing (docs/ha.md): with a token set, every write transaction first checks that the leader
  // lease still carries it (berth_fence), and fails with kUnavailable ("this server no longer
  // leads") otherwise, writing nothing. Unset (the default): writes are not fenced.
  void SetFence(std::optional<int64_t> token) EXCLUDES(mu_);
  // Whether a commit's outcome was ever unknown (the connection broke during COMMIT): the write may
  // have landed though the caller was told it failed, so state in memory may miss it. Whoever holds
  // state built on this store should load it again (docs/ha.md). Thread-safe.
  bool commit_uncertain() const { return commit_uncertain_.load(); }
  // LoadActiveJobs reads the jobs this many at a time (tests make pages small).
  void SetLoadPageRowsForTesting(int64_t rows) { load_page_rows_ = rows; }

 private:
  // Within LoadActiveJobs' read-only transaction: every active job, a page at a time.
  Result<std::vector<JobRow>> LoadActiveJobPages() REQUIRES(read_mu_);
  // Within a write transaction: the fence check, when a token is set.
  Status CheckFence() REQUIRES(mu_);
  // Commits `txn` (on db_), noting an unknown outcome.
  Status FinishCommit(PgTransaction& txn) REQUIRES(mu_);

  PgStore(std::unique_ptr<PgConn> db, std::unique_ptr<PgConn> read_db)
      : db_(std::move(db)), read_db_(std::move(read_db)) {}

  Result<SubmitResult> InsertSubmission(const Submission& submission) REQUIRES(mu_);
  // The batch's sinks and notices (store/pg_notify.cpp).
  static void AddNotificationCalls(const Batch& batch, std::vector<PgCall>& calls);
  static void AddReservationCalls(const Batch& batch, std::vector<PgCall>& calls);
  static PgCall InsertSubmitKeyCall(const Submission& submission, const SubmitResult& result);

  Mutex mu_;
  std::unique_ptr<PgConn> db_ GUARDED_BY(mu_);
  std::optional<int64_t> fence_ GUARDED_BY(mu_);
  std::atomic<bool> commit_uncertain_{false};
  // Rows per page of LoadActiveJobs: the whole answer at once held every active job's row in
  // libpq beside the JobRows made from them (bench/README.md, "PostgreSQL failover at a million
  // jobs").
  std::atomic<int64_t> load_page_rows_{20'000};
  Mutex read_mu_;
  std::unique_ptr<PgConn> read_db_ GUARDED_BY(read_mu_);
};

// Opens the PostgreSQL store at `conninfo`.
Result<std::unique_ptr<Store>> OpenPgStore(const std::string& conninfo);

}  // namespace berth
