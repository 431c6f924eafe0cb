// The store's SQLite schema and its migrations.
//
// The schema version lives in `PRAGMA user_version`. A database at version v is brought to
// kSchemaVersion by running migrations v+1, ..., kSchemaVersion in order, each in its own
// transaction together with the user_version bump, so a crash mid-way leaves a database at some
// whole version. A database newer than this binary is refused rather than misread. Not thread-safe:
// call with the connection held exclusively (SqliteStore does it while opening).
#pragma once

#include "common/status.h"
#include "store/sqlite.h"

namespace berth {

// The version this binary writes. Adding version 6: write `Status MigrateToV6(SqliteDb&)` in
// schema.cpp, append it to kMigrations there, and bump this.
constexpr int kSchemaVersion = 10;

// Brings the schema of `db` to kSchemaVersion. Fails (changing nothing beyond the migrations that
// completed) if a migration fails or the database is newer than kSchemaVersion.
Status MigrateSchema(SqliteDb& db);

// Brings the schema of `db` to version `target` (<= kSchemaVersion) with the same migrations, and
// stops there: for tests that need a database as an older berth left it. A database already past
// `target` is left as it is (ok when it is at most kSchemaVersion).
Status MigrateSchemaTo(SqliteDb& db, int target);

}  // namespace berth
