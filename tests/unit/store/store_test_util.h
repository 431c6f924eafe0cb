// Test helpers for the store: a temp directory per test and a second, raw connection to the same
// file.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "store/sqlite.h"

namespace berth::store_test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "berth_store_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp(" << pattern << ") failed";
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

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
