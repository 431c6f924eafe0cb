// The store's PostgreSQL schema and its migrations.
//
// The version lives in the one-row table berth_schema. Migrations run at start, each in its own
// transaction together with the version bump, under a transaction-scoped advisory lock: several
// servers starting at once against a fresh database migrate it once (the others wait, then see
// the new version). A database newer than this binary is refused rather than misread.
// Not thread-safe: call with the connection held exclusively (PgStore does it while opening).
//
// Version 1 is the SQLite schema at its version 4 (store/schema.h), with PostgreSQL's types:
// BIGINT times and ids, job ids handed out by a counter row (so a bulk submission's ids are
// consecutive even with other writers), and "user" quoted (a reserved word here). Version 2 adds
// log_chunks, version 3 submit_keys (SQLite's version 5).
#pragma once

#include "common/status.h"
#include "store/pg.h"

namespace berth {

constexpr int kPgSchemaVersion = 10;

// Brings the schema of the database `conn` is connected to to kPgSchemaVersion.
Status MigratePgSchema(PgConn& conn);

}  // namespace berth
