#include "store/schema.h"

#include <iterator>
#include <string>

namespace berth {
namespace {

// Version 1. Frozen once released: change the schema by adding a migration, never by editing this.
//
// Times are INTEGER milliseconds since the epoch; statuses are their DESIGN.md names, so the file
// reads well in the sqlite3 shell; placement, labels and GPU lists are JSON text (written and read
// only by sqlite_store.cpp).
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

using Migration = Status (*)(SqliteDb&);

// kMigrations[v] takes a database from version v to v + 1.
constexpr Migration kMigrations[] = {
    &MigrateToV1,
    &MigrateToV2,
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration per schema version");

}  // namespace

Status MigrateSchema(SqliteDb& db) {
  // Read and migrate under one write lock per step, so two servers opening a fresh file at once
  // cannot both run migration 1: the second waits, then sees version 1.
  for (;;) {
    Result<Transaction> txn = Transaction::Begin(db, Transaction::Mode::kWrite);
    if (!txn.ok()) return txn.status();
    Result<int64_t> version = db.QueryInt("PRAGMA user_version");
    if (!version.ok()) return version.status();
    if (*version == kSchemaVersion) return txn->Commit();
    if (*version < 0 || *version > kSchemaVersion) {
      return Status::Internal(db.path() + ": database schema version " + std::to_string(*version) +
                              " is newer than this berth understands (" +
                              std::to_string(kSchemaVersion) + "); upgrade berth to open it");
    }
    BERTH_RETURN_IF_ERROR(kMigrations[*version](db));
    BERTH_RETURN_IF_ERROR(db.Exec("PRAGMA user_version = " + std::to_string(*version + 1)));
    BERTH_RETURN_IF_ERROR(txn->Commit());
  }
}

}  // namespace berth
