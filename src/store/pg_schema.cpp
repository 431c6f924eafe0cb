#include "store/pg_schema.h"

#include <iterator>
#include <string>

namespace berth {
namespace {

// The advisory lock key that serializes migrations between servers: "berth" in ASCII.
constexpr const char* kMigrationLock = "SELECT pg_advisory_xact_lock(426870760552)";

// Version 1. Frozen once released: change the schema by adding a migration, never by editing this.
// Comments on the columns are in store/schema.cpp (the SQLite schema this one mirrors).
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE specs (
  id   BIGSERIAL PRIMARY KEY,
  body TEXT NOT NULL
);

CREATE TABLE groups (
  id          BIGSERIAL PRIMARY KEY,
  spec_id     BIGINT NOT NULL REFERENCES specs(id),
  size        INTEGER NOT NULL,
  created_at  BIGINT NOT NULL,
  max_running INTEGER
);

-- The next job id. A job id is never handed out twice, and a submission's ids are consecutive: the
-- counter row is locked by the UPDATE that takes a range from it until the transaction ends.
CREATE TABLE id_counters (
  name TEXT PRIMARY KEY,
  next BIGINT NOT NULL
);
INSERT INTO id_counters(name, next) VALUES ('job', 1);

CREATE TABLE jobs (
  id           BIGINT PRIMARY KEY,
  spec_id      BIGINT NOT NULL REFERENCES specs(id),
  group_id     BIGINT REFERENCES groups(id),
  rank         INTEGER,
  name         TEXT NOT NULL,
  "user"       TEXT NOT NULL,
  priority     INTEGER NOT NULL,
  num_nodes    INTEGER NOT NULL,
  cpus_milli   BIGINT NOT NULL,
  memory_mib   BIGINT NOT NULL,
  gpu_type     TEXT NOT NULL,
  gpu_milli    BIGINT NOT NULL,
  status       TEXT NOT NULL,
  active       SMALLINT NOT NULL,    -- 1 while status is not terminal, else 0 (from IsTerminal())
  reason       TEXT NOT NULL,
  attempt      INTEGER NOT NULL,
  submitted_at BIGINT NOT NULL,
  started_at   BIGINT,
  ended_at     BIGINT,
  exit_code    INTEGER,
  placement    TEXT NOT NULL,
  restarts     INTEGER NOT NULL DEFAULT 0,
  preemptions  INTEGER NOT NULL DEFAULT 0,
  requeues     INTEGER NOT NULL DEFAULT 0,
  not_before   BIGINT,
  run_ms       BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_activity ON jobs(active, id);
CREATE INDEX jobs_group ON jobs(group_id, id) WHERE group_id IS NOT NULL;

CREATE TABLE job_events (
  job_id  BIGINT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  seq     INTEGER NOT NULL,
  at      BIGINT NOT NULL,
  status  TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  reason  TEXT NOT NULL,
  actor   TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, seq)
);

CREATE TABLE attempts (
  job_id    BIGINT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt   INTEGER NOT NULL,
  placement TEXT NOT NULL,
  placed_at BIGINT NOT NULL,
  ended_at  BIGINT,
  outcome   TEXT,
  reason    TEXT NOT NULL,
  exit_code INTEGER,
  PRIMARY KEY (job_id, attempt)
);

CREATE TABLE nodes (
  name          TEXT PRIMARY KEY,
  node_id       TEXT NOT NULL,
  state         TEXT NOT NULL,
  draining      SMALLINT NOT NULL,
  pool          TEXT NOT NULL,
  labels        TEXT NOT NULL,
  address       TEXT NOT NULL,
  cpus_milli    BIGINT NOT NULL,
  memory_mib    BIGINT NOT NULL,
  gpus          TEXT NOT NULL,
  registered_at BIGINT NOT NULL,
  last_seen     BIGINT NOT NULL,
  down_since    BIGINT
);

CREATE TABLE users (
  name             TEXT PRIMARY KEY,
  role             TEXT NOT NULL,
  max_priority     INTEGER NOT NULL,
  team             TEXT NOT NULL,
  updated_at       BIGINT NOT NULL,
  updated_by       TEXT NOT NULL,
  max_running_gpus INTEGER,
  max_pending_jobs INTEGER
);

CREATE TABLE tokens (
  name       TEXT PRIMARY KEY,
  "user"     TEXT NOT NULL,
  hash       TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL,
  expires_at BIGINT,
  revoked_at BIGINT,
  created_by TEXT NOT NULL
);

CREATE TABLE audit (
  seq    BIGSERIAL PRIMARY KEY,
  at     BIGINT NOT NULL,
  actor  TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  detail TEXT NOT NULL
);

CREATE TABLE teams (
  name         TEXT PRIMARY KEY,
  quota        TEXT NOT NULL,
  borrow_limit TEXT NOT NULL,
  weight       DOUBLE PRECISION NOT NULL,
  updated_at   BIGINT NOT NULL,
  updated_by   TEXT NOT NULL
);

CREATE TABLE usage_hourly (
  hour         BIGINT NOT NULL,
  "user"       TEXT NOT NULL,
  team         TEXT NOT NULL,
  gpu_type     TEXT NOT NULL,
  gpu_milli_ms BIGINT NOT NULL,
  cpu_milli_ms BIGINT NOT NULL,
  jobs         BIGINT NOT NULL,
  wait_ms      BIGINT NOT NULL,
  waits        BIGINT NOT NULL,
  preemptions  BIGINT NOT NULL,
  PRIMARY KEY (hour, "user", team, gpu_type)
);

-- Leadership among the servers sharing this database (store/pg_leader_lease.h): one row. `token`
-- grows with every new holder; berth_fence(token) is called first in every write transaction of
-- the leader and fails once another server holds the lease, and its share lock makes a takeover
-- wait for a write already under way.
CREATE TABLE berth_leader (
  one        INTEGER PRIMARY KEY CHECK (one = 1),
  holder     TEXT NOT NULL,
  url        TEXT NOT NULL,
  token      BIGINT NOT NULL,
  since      BIGINT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL
);
INSERT INTO berth_leader VALUES (1, '', '', 0, 0, '-infinity');

CREATE FUNCTION berth_fence(expected BIGINT) RETURNS void LANGUAGE plpgsql AS $fence$
DECLARE
  current BIGINT;
BEGIN
  SELECT token INTO current FROM berth_leader WHERE one = 1 FOR SHARE;
  IF current IS DISTINCT FROM expected THEN
    RAISE EXCEPTION 'this server no longer leads (its fencing token is %, the lease''s is %)',
      expected, current USING ERRCODE = 'BF001';
  END IF;
END
$fence$;

CREATE TABLE usage_daily (
  day          BIGINT NOT NULL,
  "user"       TEXT NOT NULL,
  team         TEXT NOT NULL,
  gpu_type     TEXT NOT NULL,
  gpu_milli_ms BIGINT NOT NULL,
  cpu_milli_ms BIGINT NOT NULL,
  jobs         BIGINT NOT NULL,
  wait_ms      BIGINT NOT NULL,
  waits        BIGINT NOT NULL,
  preemptions  BIGINT NOT NULL,
  PRIMARY KEY (day, "user", team, gpu_type)
);
)sql";

Status MigrateToV1(PgConn& conn) { return conn.Exec(kSchemaV1); }

// Version 2: jobs' output, so that every server sharing the database serves it after a failover
// (store/log_bytes.h). One row per append of one (job, attempt, rank) log (rank -1: a multi-node
// job's interleaved log), keyed by its first byte's offset.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE log_chunks (
  job_id  BIGINT NOT NULL,
  attempt INTEGER NOT NULL,
  rank    INTEGER NOT NULL,
  start   BIGINT NOT NULL,
  data    BYTEA NOT NULL,
  PRIMARY KEY (job_id, attempt, rank, start)
);
)sql";

Status MigrateToV2(PgConn& conn) { return conn.Exec(kSchemaV2); }

// Version 3: idempotency keys of submissions (as SQLite's version 5).
constexpr const char* kSchemaV3 = R"sql(
CREATE TABLE submit_keys (
  "user"       TEXT NOT NULL,
  key          TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  spec_id      BIGINT NOT NULL,
  group_id     BIGINT,
  first_id     BIGINT NOT NULL,
  count        INTEGER NOT NULL,
  created_at   BIGINT NOT NULL,
  PRIMARY KEY ("user", key)
);
CREATE INDEX submit_keys_created ON submit_keys(created_at);
)sql";

Status MigrateToV3(PgConn& conn) { return conn.Exec(kSchemaV3); }

// Version 4: whom a node may speak for, and what each attempt used (as SQLite's version 6).
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE tokens ADD COLUMN speaks_for TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN peak_memory_bytes BIGINT;
ALTER TABLE attempts ADD COLUMN cpu_ms BIGINT;
)sql";

Status MigrateToV4(PgConn& conn) { return conn.Exec(kSchemaV4); }

// Version 5: measured use in the usage rollups (as SQLite's version 7).
constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE usage_hourly ADD COLUMN used_cpu_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN measured_cpu_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN peak_memory_mib_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN asked_memory_mib_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN used_cpu_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN measured_cpu_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN peak_memory_mib_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN asked_memory_mib_ms BIGINT NOT NULL DEFAULT 0;
)sql";

Status MigrateToV5(PgConn& conn) { return conn.Exec(kSchemaV5); }

// Version 6: uploaded workdirs and file mounts (store/blob_store.h): blobs as chunks, who uploaded
// what, and pieces of big blobs still arriving (per owner).
constexpr const char* kSchemaV6 = R"sql(
CREATE TABLE upload_blobs (
  digest    TEXT PRIMARY KEY,
  size      BIGINT NOT NULL,
  stored_ms BIGINT NOT NULL
);
CREATE TABLE upload_chunks (
  digest TEXT NOT NULL,
  start  BIGINT NOT NULL,
  data   BYTEA NOT NULL,
  PRIMARY KEY (digest, start)
);
CREATE TABLE upload_owners (
  owner     TEXT NOT NULL,
  digest    TEXT NOT NULL,
  stored_ms BIGINT NOT NULL,
  PRIMARY KEY (owner, digest)
);
CREATE TABLE upload_pieces (
  owner  TEXT NOT NULL,
  digest TEXT NOT NULL,
  start  BIGINT NOT NULL,
  data   BYTEA NOT NULL,
  PRIMARY KEY (owner, digest, start)
);
)sql";

Status MigrateToV6(PgConn& conn) { return conn.Exec(kSchemaV6); }

// Version 7: when each piece of a blob still arriving came, so that pieces nobody goes on with
// expire (BlobStore::Collect).
constexpr const char* kSchemaV7 = R"sql(
ALTER TABLE upload_pieces ADD COLUMN stored_ms BIGINT NOT NULL DEFAULT 0;
)sql";

Status MigrateToV7(PgConn& conn) { return conn.Exec(kSchemaV7); }

// Version 8: the sampled GPUs' time, busy time and idle time in the usage rollups (as SQLite's
// version 8).
constexpr const char* kSchemaV8 = R"sql(
ALTER TABLE usage_hourly ADD COLUMN gpu_sampled_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN gpu_busy_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN gpu_idle_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_sampled_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_busy_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_idle_milli_ms BIGINT NOT NULL DEFAULT 0;
)sql";

Status MigrateToV8(PgConn& conn) { return conn.Exec(kSchemaV8); }

// Version 9: notifications' sinks and outbox (as SQLite's version 9).
constexpr const char* kSchemaV9 = R"sql(
CREATE TABLE notify_sinks (
  "user"     TEXT NOT NULL,
  kind       TEXT NOT NULL,
  target     TEXT NOT NULL,
  secret     TEXT NOT NULL,
  format     TEXT NOT NULL,
  events     TEXT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY ("user", kind)
);
CREATE TABLE notices (
  seq        BIGSERIAL PRIMARY KEY,
  event_id   TEXT NOT NULL,
  "user"     TEXT NOT NULL,
  sink       TEXT NOT NULL,
  type       TEXT NOT NULL,
  job        BIGINT NOT NULL,
  grp        BIGINT,
  created_at BIGINT NOT NULL,
  payload    TEXT NOT NULL,
  state      TEXT NOT NULL,
  attempts   INTEGER NOT NULL,
  next_at    BIGINT NOT NULL,
  last_error TEXT NOT NULL,
  sent_at    BIGINT,
  UNIQUE (event_id, sink)
);
CREATE INDEX notices_due ON notices(state, next_at);
CREATE INDEX notices_user ON notices("user", seq);
CREATE INDEX notices_job ON notices(job);
CREATE INDEX notices_created ON notices(created_at);
)sql";

Status MigrateToV9(PgConn& conn) { return conn.Exec(kSchemaV9); }

// Version 10: operators' reservations (as SQLite's version 10).
constexpr const char* kSchemaV10 = R"sql(
CREATE TABLE reservations (
  name       TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  updated_by TEXT NOT NULL
);
)sql";

Status MigrateToV10(PgConn& conn) { return conn.Exec(kSchemaV10); }

using Migration = Status (*)(PgConn&);

// kMigrations[v] takes a database from version v to v + 1.
constexpr Migration kMigrations[] = {
    &MigrateToV1, &MigrateToV2, &MigrateToV3, &MigrateToV4, &MigrateToV5,
    &MigrateToV6, &MigrateToV7, &MigrateToV8, &MigrateToV9, &MigrateToV10,
};
static_assert(std::size(kMigrations) == kPgSchemaVersion, "one migration per schema version");

}  // namespace

Status MigratePgSchema(PgConn& conn) {
  for (;;) {
    Result<PgTransaction> txn = PgTransaction::Begin(conn);
    if (!txn.ok()) return txn.status();
    BERTH_RETURN_IF_ERROR(conn.Exec(kMigrationLock));
    BERTH_RETURN_IF_ERROR(conn.Exec(
        "CREATE TABLE IF NOT EXISTS berth_schema (one INTEGER PRIMARY KEY CHECK (one = 1), "
        "version INTEGER NOT NULL)"));
    Result<PgResult> row = conn.Query("SELECT version FROM berth_schema");
    if (!row.ok()) return row.status();
    const int64_t version = row->rows() == 0 ? 0 : row->Int(0, 0);
    if (version < 0 || version > kPgSchemaVersion) {
      return Status::Internal(conn.where() + ": database schema version " +
                              std::to_string(version) + " is newer than this berth understands (" +
                              std::to_string(kPgSchemaVersion) + "); upgrade berth to open it");
    }
    if (version == kPgSchemaVersion) return txn->Commit();
    BERTH_RETURN_IF_ERROR(kMigrations[version](conn));
    BERTH_RETURN_IF_ERROR(
        conn.Run("INSERT INTO berth_schema(one, version) VALUES (1, $1) "
                 "ON CONFLICT (one) DO UPDATE SET version = excluded.version",
                 PgParams().Add(version + 1)));
    BERTH_RETURN_IF_ERROR(txn->Commit());
  }
}

}  // namespace berth
