#include "store/schema.h"

#include <iterator>
#include <string>

namespace berth {
namespace {

// Version 1. Frozen once released: change the schema by adding a migration, never by editing this.
//
// Times are INTEGER milliseconds since the epoch; statuses are their docs/design.md names, so the
// file reads well in the sqlite3 shell; placement, labels and GPU lists are JSON text (written and
// read only by sqlite_store.cpp).
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE specs (
  id   INTEGER PRIMARY KEY,
  body TEXT NOT NULL                 -- the spec as JSON, shared by every job of a submission
);

CREATE TABLE groups (
  id         INTEGER PRIMARY KEY,
  spec_id    INTEGER NOT NULL REFERENCES specs(id),
  size       INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);

-- AUTOINCREMENT: a job id is never handed out twice, even after the newest jobs are deleted, because
-- users and scripts keep ids around.
CREATE TABLE jobs (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  spec_id      INTEGER NOT NULL REFERENCES specs(id),
  group_id     INTEGER REFERENCES groups(id),
  rank         INTEGER,
  name         TEXT NOT NULL,
  user         TEXT NOT NULL,
  priority     INTEGER NOT NULL,
  num_nodes    INTEGER NOT NULL,
  cpus_milli   INTEGER NOT NULL,
  memory_mib   INTEGER NOT NULL,
  gpu_type     TEXT NOT NULL,
  gpu_milli    INTEGER NOT NULL,
  status       TEXT NOT NULL,
  -- 1 while status is not terminal (PENDING, STARTING, SETTING_UP, RUNNING), else 0; written by the
  -- store from IsTerminal(). Not a partial index on `status IN (...)`: SQLite evaluates such a
  -- predicate on every insert by building a temporary b-tree, which tripled the cost of a bulk submit.
  active       INTEGER NOT NULL,
  reason       TEXT NOT NULL,
  attempt      INTEGER NOT NULL,
  submitted_at INTEGER NOT NULL,
  started_at   INTEGER,
  ended_at     INTEGER,
  exit_code    INTEGER,
  placement    TEXT NOT NULL         -- JSON [{"node", "rank", "gpus": [{"index", "milli"}]}]
);

-- `berth queue` and a restart read the few active jobs among the many finished ones; (active, id)
-- serves both halves newest- or oldest-first without touching the other.
CREATE INDEX jobs_by_activity ON jobs(active, id);
CREATE INDEX jobs_group ON jobs(group_id, id) WHERE group_id IS NOT NULL;

CREATE TABLE job_events (
  job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  seq     INTEGER NOT NULL,          -- 1, 2, ... per job
  at      INTEGER NOT NULL,
  status  TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  reason  TEXT NOT NULL,
  PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;                     -- clustered by job: `berth show` reads one contiguous range

CREATE TABLE attempts (
  job_id    INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt   INTEGER NOT NULL,
  placement TEXT NOT NULL,           -- JSON, as jobs.placement
  placed_at INTEGER NOT NULL,
  ended_at  INTEGER,
  outcome   TEXT,                    -- a job status name, NULL while the attempt runs
  reason    TEXT NOT NULL,
  exit_code INTEGER,
  PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

CREATE TABLE nodes (
  name          TEXT PRIMARY KEY,
  node_id       TEXT NOT NULL,
  state         TEXT NOT NULL,
  draining      INTEGER NOT NULL,
  pool          TEXT NOT NULL,
  labels        TEXT NOT NULL,       -- JSON object {"key": "value"}
  address       TEXT NOT NULL,
  cpus_milli    INTEGER NOT NULL,
  memory_mib    INTEGER NOT NULL,
  gpus          TEXT NOT NULL,       -- JSON [{"index", "type"}]
  registered_at INTEGER NOT NULL,
  last_seen     INTEGER NOT NULL,
  down_since    INTEGER
);
)sql";

Status MigrateToV1(SqliteDb& db) { return db.Exec(kSchemaV1); }

// Version 2: who is who. Users' rights, their tokens (hashes only), the audit log of
// administrative actions, and who made each job event. `actor`, not `by`: BY is an SQL keyword.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE users (
  name         TEXT PRIMARY KEY,
  role         TEXT NOT NULL,        -- "user", "operator", "admin"
  max_priority INTEGER NOT NULL,
  team         TEXT NOT NULL,
  updated_at   INTEGER NOT NULL,
  updated_by   TEXT NOT NULL
);

CREATE TABLE tokens (
  name       TEXT PRIMARY KEY,
  user       TEXT NOT NULL,
  hash       TEXT NOT NULL UNIQUE,   -- "sha256:<hex>" of the secret, never the secret
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  revoked_at INTEGER,
  created_by TEXT NOT NULL
);

CREATE TABLE audit (
  seq    INTEGER PRIMARY KEY AUTOINCREMENT,
  at     INTEGER NOT NULL,
  actor  TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  detail TEXT NOT NULL
);

ALTER TABLE job_events ADD COLUMN actor TEXT NOT NULL DEFAULT '';
)sql";

Status MigrateToV2(SqliteDb& db) { return db.Exec(kSchemaV2); }

// Version 3: fair share (docs/fair-share.md). Users' caps (NULL: no limit), teams' quotas, and the
// usage rollups.
//
// usage_hourly keeps one row per (hour, user, team, GPU type); the attempts themselves are not
// kept. GPU and CPU time are INTEGER milli-units x milliseconds (1000 x 3,600,000 per GPU-hour), so
// that splitting a record over hours and adding buckets up is exact: the hours' shares of a record
// sum to exactly its total, whatever the order of additions. An int64 holds ~290,000 GPU-years of
// them (SQLite's sum() fails on overflow rather than wrap). The primary key leads with `hour`:
// `berth usage` and the start-up rebuild both read a range of hours, and WITHOUT ROWID stores the
// rows in that order, so a window is one contiguous range.
//
// usage_daily holds the same sums by UTC day, written in the same transaction as the hours. A
// month's report reads its whole days there and only the hours at its ragged ends in usage_hourly:
// ~45k rows instead of ~430k on a busy cluster (200 users x 3 GPU types), which is what keeps the
// report within its 100 ms (bench/README.md, "Usage accounting"). Slurm keeps hourly, daily and
// monthly usage rollups for the same reason.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE users ADD COLUMN max_running_gpus INTEGER;
ALTER TABLE users ADD COLUMN max_pending_jobs INTEGER;

CREATE TABLE teams (
  name         TEXT PRIMARY KEY,
  quota        TEXT NOT NULL,        -- JSON object {"<GPU type>": milli-GPUs}
  borrow_limit TEXT NOT NULL,        -- JSON object {"<GPU type>": milli-GPUs}
  weight       REAL NOT NULL,
  updated_at   INTEGER NOT NULL,
  updated_by   TEXT NOT NULL
);

CREATE TABLE usage_hourly (
  hour         INTEGER NOT NULL,     -- the hour's start, ms since the epoch (a multiple of 3,600,000)
  user         TEXT NOT NULL,
  team         TEXT NOT NULL,        -- "" = the default team
  gpu_type     TEXT NOT NULL,        -- "" = no GPU
  gpu_milli_ms INTEGER NOT NULL,     -- milli-GPUs x ms used in this hour
  cpu_milli_ms INTEGER NOT NULL,     -- milli-CPUs x ms used in this hour
  jobs         INTEGER NOT NULL,     -- attempts that ended their job in this hour
  wait_ms      INTEGER NOT NULL,     -- queue wait of the attempts placed in this hour
  waits        INTEGER NOT NULL,     -- attempts placed in this hour
  preemptions  INTEGER NOT NULL,     -- attempts preempted or reclaimed in this hour
  PRIMARY KEY (hour, user, team, gpu_type)
) WITHOUT ROWID;

CREATE TABLE usage_daily (
  day          INTEGER NOT NULL,     -- the UTC day's start, ms since the epoch
  user         TEXT NOT NULL,
  team         TEXT NOT NULL,
  gpu_type     TEXT NOT NULL,
  gpu_milli_ms INTEGER NOT NULL,     -- the sums of the day's usage_hourly rows of this key
  cpu_milli_ms INTEGER NOT NULL,
  jobs         INTEGER NOT NULL,
  wait_ms      INTEGER NOT NULL,
  waits        INTEGER NOT NULL,
  preemptions  INTEGER NOT NULL,
  PRIMARY KEY (day, user, team, gpu_type)
) WITHOUT ROWID;
)sql";

Status MigrateToV3(SqliteDb& db) { return db.Exec(kSchemaV3); }

// Version 4: pipelines (docs/user-guide.md "Pipelines"). Why a job's earlier attempts went back to
// the queue (failures restarted by its retry policy, preemptions, other requeues), a restart's
// backoff (`not_before`, wall ms), the running time of its earlier attempts (for time_limit_scope:
// job), and a bulk group's max_running, which its owner may change after submission.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN not_before INTEGER;
ALTER TABLE jobs ADD COLUMN run_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE groups ADD COLUMN max_running INTEGER;
)sql";

Status MigrateToV4(SqliteDb& db) { return db.Exec(kSchemaV4); }

// Version 5: idempotency keys of submissions (docs/api.md "Idempotency-Key"), so that a client
// that lost the answer to a submission can send it again and get the jobs it made the first time.
// Kept kSubmitKeyRetentionMs; `first_id` and `count` give the jobs (their ids are consecutive).
constexpr const char* kSchemaV5 = R"sql(
CREATE TABLE submit_keys (
  user         TEXT NOT NULL,
  key          TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  spec_id      INTEGER NOT NULL,
  group_id     INTEGER,
  first_id     INTEGER NOT NULL,
  count        INTEGER NOT NULL,
  created_at   INTEGER NOT NULL,
  PRIMARY KEY (user, key)
) WITHOUT ROWID;
CREATE INDEX submit_keys_created ON submit_keys(created_at);
)sql";

Status MigrateToV5(SqliteDb& db) { return db.Exec(kSchemaV5); }

// Version 6: whom a node may speak for through its user socket (docs/security.md "Node
// credentials"), on node credentials and the join tokens that make them; what each attempt used
// (docs/security.md "Isolation").
constexpr const char* kSchemaV6 = R"sql(
ALTER TABLE tokens ADD COLUMN speaks_for TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN peak_memory_bytes INTEGER;
ALTER TABLE attempts ADD COLUMN cpu_ms INTEGER;
)sql";

Status MigrateToV6(SqliteDb& db) { return db.Exec(kSchemaV6); }

// Version 7: the rollups count what measured attempts used against what they were allotted, for
// `berth usage`'s efficiency columns (store_codec::BucketSums says what each column holds).
constexpr const char* kSchemaV7 = R"sql(
ALTER TABLE usage_hourly ADD COLUMN used_cpu_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN measured_cpu_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN peak_memory_mib_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN asked_memory_mib_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN used_cpu_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN measured_cpu_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN peak_memory_mib_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN asked_memory_mib_ms INTEGER NOT NULL DEFAULT 0;
)sql";

Status MigrateToV7(SqliteDb& db) { return db.Exec(kSchemaV7); }

// Version 8: the rollups count what sampled GPUs did (docs/idle.md): the GPU time under sampling,
// that time weighted by SM utilisation, and the GPU time idle, for `berth usage`'s GPU efficiency
// and idle GPU-hours (store_codec::BucketSums).
constexpr const char* kSchemaV8 = R"sql(
ALTER TABLE usage_hourly ADD COLUMN gpu_sampled_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN gpu_busy_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN gpu_idle_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_sampled_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_busy_milli_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_idle_milli_ms INTEGER NOT NULL DEFAULT 0;
)sql";

Status MigrateToV8(SqliteDb& db) { return db.Exec(kSchemaV8); }

// Version 9: notifications (docs/notifications.md): each user's sinks, and the outbox of notices
// written with the changes they tell of, each delivered at least once.
constexpr const char* kSchemaV9 = R"sql(
CREATE TABLE notify_sinks (
  user       TEXT NOT NULL,
  kind       TEXT NOT NULL,
  target     TEXT NOT NULL,
  secret     TEXT NOT NULL,
  format     TEXT NOT NULL,
  events     TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (user, kind)
) WITHOUT ROWID;
CREATE TABLE notices (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id   TEXT NOT NULL,
  user       TEXT NOT NULL,
  sink       TEXT NOT NULL,
  type       TEXT NOT NULL,
  job        INTEGER NOT NULL,
  grp        INTEGER,
  created_at INTEGER NOT NULL,
  payload    TEXT NOT NULL,
  state      TEXT NOT NULL,
  attempts   INTEGER NOT NULL,
  next_at    INTEGER NOT NULL,
  last_error TEXT NOT NULL,
  sent_at    INTEGER,
  UNIQUE (event_id, sink)
);
CREATE INDEX notices_due ON notices(state, next_at);
CREATE INDEX notices_user ON notices(user, seq);
CREATE INDEX notices_job ON notices(job);
CREATE INDEX notices_created ON notices(created_at);
)sql";

Status MigrateToV9(SqliteDb& db) { return db.Exec(kSchemaV9); }

// Version 10: operators' reservations (docs/reservations.md), each a JSON definition by name.
constexpr const char* kSchemaV10 = R"sql(
CREATE TABLE reservations (
  name       TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  updated_by TEXT NOT NULL
) WITHOUT ROWID;
)sql";

Status MigrateToV10(SqliteDb& db) { return db.Exec(kSchemaV10); }

using Migration = Status (*)(SqliteDb&);

// kMigrations[v] takes a database from version v to v + 1.
constexpr Migration kMigrations[] = {
    &MigrateToV1, &MigrateToV2, &MigrateToV3, &MigrateToV4, &MigrateToV5,
    &MigrateToV6, &MigrateToV7, &MigrateToV8, &MigrateToV9, &MigrateToV10,
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration per schema version");

}  // namespace

Status MigrateSchema(SqliteDb& db) { return MigrateSchemaTo(db, kSchemaVersion); }

Status MigrateSchemaTo(SqliteDb& db, int target) {
  if (target < 0 || target > kSchemaVersion) {
    return Status::Invalid("cannot migrate to schema version " + std::to_string(target) +
                           ": this berth knows versions 0 to " + std::to_string(kSchemaVersion));
  }
  // Read and migrate under one write lock per step, so two servers opening a fresh file at once
  // cannot both run migration 1: the second waits, then sees version 1.
  for (;;) {
    Result<Transaction> txn = Transaction::Begin(db, Transaction::Mode::kWrite);
    if (!txn.ok()) return txn.status();
    Result<int64_t> version = db.QueryInt("PRAGMA user_version");
    if (!version.ok()) return version.status();
    if (*version < 0 || *version > kSchemaVersion) {
      return Status::Internal(db.path() + ": database schema version " + std::to_string(*version) +
                              " is newer than this berth understands (" +
                              std::to_string(kSchemaVersion) + "); upgrade berth to open it");
    }
    if (*version >= target) return txn->Commit();
    BERTH_RETURN_IF_ERROR(kMigrations[*version](db));
    BERTH_RETURN_IF_ERROR(db.Exec("PRAGMA user_version = " + std::to_string(*version + 1)));
    BERTH_RETURN_IF_ERROR(txn->Commit());
  }
}

}  // namespace berth
