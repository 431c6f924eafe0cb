// Test helpers for the store: a temp directory per test, a second, raw connection to the same
// SQLite file, and the submissions, times and usage records the store tests share.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fakes/temp_dir.h"
#include "store/sqlite.h"
#include "store/store.h"

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

constexpr TimeMs kT0 = 1'790'000'000'000;  // some fixed wall time, in ms
constexpr DurationMs kMinute = 60'000;
constexpr DurationMs kHour = 3'600'000;
constexpr TimeMs kH0 = kT0 - kT0 % kHour;  // the start of the hour containing kT0
static_assert(kH0 % kHour == 0 && kT0 - kH0 < kHour);
constexpr DurationMs kDay = 24 * kHour;
constexpr TimeMs kD0 = kT0 - kT0 % kDay;  // the start of the UTC day containing kT0

// `count` jobs of ada's "train" (priority 5, 2 nodes of 8 CPUs, 32 GiB and 4 H100s), at kT0.
inline Submission MakeSubmission(int count, bool as_group,
                                 std::string spec = R"({"run":"train.py"})") {
  Submission s;
  s.spec_json = std::move(spec);
  s.name = "train";
  s.user = "ada";
  s.priority = 5;
  s.num_nodes = 2;
  s.resources =
      ResourceRequest{.cpus = 8000, .memory = 32 * 1024, .gpu_type = "H100", .gpu_milli = 4000};
  s.count = count;
  s.as_group = as_group;
  s.now = kT0;
  return s;
}

// An attempt of `user` (in `team`) holding `gpu_milli` of `gpu_type` and `cpu_milli` CPUs over
// [placed, ended).
inline UsageRecord Use(std::string user, std::string team, std::string gpu_type, MilliGpu gpu_milli,
                       MilliCpu cpu_milli, TimeMs placed, TimeMs ended) {
  return UsageRecord{.user = std::move(user),
                     .team = std::move(team),
                     .gpu_type = std::move(gpu_type),
                     .gpu_milli = gpu_milli,
                     .cpu_milli = cpu_milli,
                     .placed_at = placed,
                     .ended_at = ended};
}

// The one row of `rows` named `name`, or an empty row (and a test failure).
inline UsageRow RowOf(const std::vector<UsageRow>& rows, const std::string& name) {
  for (const UsageRow& row : rows) {
    if (row.name == name) return row;
  }
  ADD_FAILURE() << "no usage row for \"" << name << "\"";
  return UsageRow{};
}

inline std::vector<std::string> NamesOf(const std::vector<UsageRow>& rows) {
  std::vector<std::string> names;
  for (const UsageRow& row : rows) names.push_back(row.name);
  return names;
}

}  // namespace berth::store_test
