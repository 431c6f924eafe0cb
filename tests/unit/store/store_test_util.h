// Test helpers for the store: a temp directory per test and a second, raw connection to the same
// file.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "fakes/temp_dir.h"
#include "store/sqlite.h"

namespace berth::store_test {

using TempDir = berth::testing::TempDir;

// Opens `path` as another process would see it, bypassing the store. Fails the test if it cannot.
inline std::unique_ptr<SqliteDb> OpenRaw(const std::string& path) {
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path, /*create=*/false);
  if (!db.ok()) {
    ADD_FAILURE() << db.status().message();
    return nullptr;
  }
  return std::move(*db);
}

// The single integer a query returns, or -1 (and a test failure) if it fails.
inline int64_t QueryInt(SqliteDb& db, const std::string& sql) {
  Result<int64_t> v = db.QueryInt(sql);
  if (!v.ok()) {
    ADD_FAILURE() << sql << ": " << v.status().message();
    return -1;
  }
  return *v;
}

}  // namespace berth::store_test
