// SqliteStore: the embedded Store, one SQLite database file in WAL mode (docs/design.md "Store").
//
// Durability: WAL with synchronous=NORMAL. A transaction that returned ok survives the process
// being killed (kill -9, crash): it is in the WAL file, which the next open replays. Only a power
// loss or OS crash can lose the last few transactions before a checkpoint, and even then the file
// stays consistent. Checkpoints run on a thread of their own (WalCheckpointer), not in a commit.
// SQLite's documentation calls NORMAL the right choice for most WAL databases; FULL would add an
// fsync to every commit, i.e. to every scheduling pass.
//
// Thread-safety: every public method takes mu_, which guards the one connection db_ and its
// statement cache. Methods are therefore serialized; each runs as one transaction. Several
// processes may open the same file (SQLite's file locks and the busy timeout arbitrate), but berth
// runs one server per file.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/row_codec.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "store/wal_checkpointer.h"

namespace berth {

class SqliteStore final : public Store {
 public:
  // How long a write waits for another connection's write lock before failing with kUnavailable.
  static constexpr int kBusyTimeoutMs = 5000;

  // Opens (creating if needed) the database at `path`, sets its pragmas and migrates the schema to
  // kSchemaVersion. Errors name the path and carry SQLite's message.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);

  Result<std::vector<SubmitResult>> SubmitMany(const std::vector<Submission>& submissions) override;
  // Job rows are replaced by id: every column except id, spec_id, group_id, rank and submitted_at,
  // which are fixed at submission. A job id that does not exist fails the whole batch (kNotFound).
  // Usage records are checked before anything is written: a negative quantity or wait, more than
  // kMaxUsageMilli GPUs or CPUs, or an attempt longer than kMaxUsageSpanMs (an unset placed_at,
  // most likely) fails the whole batch with kInvalidArgument. Records of one batch that fall in the
  // same bucket are added up first, so each bucket costs one upsert per batch.
  Result<std::optional<KeyedSubmission>> FindSubmission(const std::string& user,
                                                        const std::string& key) override;
  Status Commit(const Batch& batch) override;
  Result<std::vector<JobRow>> LoadActiveJobs() override;
  Result<std::vector<JobRow>> ListJobs(const JobQuery& query) override;
  Result<std::vector<JobRow>> GetJobs(const std::vector<int64_t>& ids) override;
  // Ascending seq (the order they were appended).
  Result<std::vector<JobEvent>> GetEvents(int64_t job) override;
  // Ascending attempt.
  Result<std::vector<AttemptRow>> GetAttempts(int64_t job) override;
  Result<std::string> GetSpec(int64_t spec_id) override;
  Result<int> GroupSize(int64_t group) override;
  Result<std::map<int64_t, std::map<JobStatus, int>>> GroupStatusCounts(
      const std::vector<int64_t>& groups) override;
  Result<GroupInfo> GetGroup(int64_t group) override;
  Result<std::map<int64_t, int>> LoadGroupLimits() override;
  // Ascending name.
  Result<std::vector<NodeRow>> LoadNodes() override;
  Result<std::vector<UserRow>> LoadUsers() override;
  Result<std::vector<TokenRow>> LoadTokens() override;
  Result<std::vector<AuditRow>> ListAudit(int limit) override;
  Result<std::vector<TeamRow>> LoadTeams() override;
  // Reads the window's whole UTC days from the daily rollup and only the hours at its ends from
  // the hourly one, in one read snapshot, and adds the rows up in memory.
  Result<std::vector<UsageRow>> QueryUsage(const UsageQuery& query) override;
  // Ordered by hour, then user, team and GPU type (the primary key).
  Result<std::vector<UsageBucket>> LoadUsageBuckets(TimeMs since) override;
  Result<std::vector<NotifySinkRow>> LoadNotifySinks() override;
  Result<std::vector<ReservationRow>> LoadReservations() override;
  Result<std::vector<NoticeRow>> DueNotices(TimeMs now, int limit) override;
  Status UpdateNotice(const NoticeUpdate& update) override;
  Result<std::vector<NoticeRow>> ListNotices(const std::string& user, std::optional<int64_t> job,
                                             int limit) override;

  // Bounds on a usage record (store/row_codec.h).
  static constexpr DurationMs kMaxUsageSpanMs = store_codec::kMaxUsageSpanMs;
  static constexpr int64_t kMaxUsageMilli = store_codec::kMaxUsageMilli;

 private:
  SqliteStore(std::unique_ptr<SqliteDb> db, std::unique_ptr<SqliteDb> read_db)
      : db_(std::move(db)), read_db_(std::move(read_db)) {}

  // Helpers; all require mu_ held.
  // Runs on `db` (db_ with mu_ held, or read_db_ with read_mu_ held).
  Result<std::vector<JobRow>> QueryJobs(SqliteDb& db, const std::string& sql,
                                        const std::vector<int64_t>& params);
  Result<SubmitResult> InsertSubmission(const Submission& submission);
  Status InsertSubmitKey(const Submission& submission, const SubmitResult& result);
  Status UpdateJob(const JobRow& job);
  Status AppendEvent(int64_t job, const JobEvent& event);
  Status UpsertAttempt(int64_t job, const AttemptRow& attempt);
  Status UpsertNode(const NodeRow& node);
  Status UpsertUser(const UserRow& user);
  Status UpsertToken(const TokenRow& token);
  Status AppendAudit(const AuditRow& row);
  Status UpsertTeam(const TeamRow& team);
  Status AddUsage(const std::vector<UsageRecord>& usage);
  // The batch's sinks and notices (store/sqlite_notify.cpp).
  Status WriteNotifications(const Batch& batch);
  Status WriteReservations(const Batch& batch);

  std::mutex mu_;
  std::unique_ptr<SqliteDb> db_;  // guarded by mu_ (the connection and its statement cache)
  std::mutex read_mu_;
  std::unique_ptr<SqliteDb>
      read_db_;  // guarded by read_mu_: reads that must not wait for a big write
  // Checkpoints db_'s WAL on its own thread (destroyed first: it unhooks itself from db_).
  std::unique_ptr<WalCheckpointer> checkpointer_;

 public:
  const WalCheckpointer& checkpointer() const { return *checkpointer_; }
};

}  // namespace berth
