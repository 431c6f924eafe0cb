// Store benchmarks: the cost of one bulk submission (docs/design.md "Bulk submission": 1000 jobs,
// one request, one transaction), of the reads a restart and `berth queue` make, and of usage
// accounting: `berth usage` over a month of a busy cluster's history, and the start-up
// rebuild).
//
// Run: cmake --build build --target store_bench && ./build/bench/store_bench
// The PostgreSQL side (BM_SubmitGroupPostgres) needs a server: BERTH_BENCH_PG=postgresql://...
// (e.g. BERTH_PG_FSYNC=on tests/support/pg_cluster.sh start /tmp/pg prints one); without it, it is
// skipped. Each Submit iteration uses a fresh database file in a temp directory, so the numbers
// include the WAL writes and the checkpoint a real first submit pays, and none of the file growth
// of earlier iterations. The usage benchmarks share one database, built once (5-8 s on 2 cores).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "server/log_store.h"
#include "store/log_bytes.h"
#include "store/pg.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace berth {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "berth_bench_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

Submission MakeGroup(int count) {
  Submission s;
  s.spec_json =
      R"({"name":"sweep","run":"python train.py --lr $LR","resources":{"accelerators":{"H100":1}}})";
  s.name = "sweep";
  s.user = "ada";
  s.resources =
      ResourceRequest{.cpus = 4000, .memory = 16 * 1024, .gpu_type = "H100", .gpu_milli = 1000};
  s.count = count;
  s.as_group = true;
  s.now = 1'790'000'000'000;
  return s;
}

std::unique_ptr<Store> MustOpen(const std::string& path, benchmark::State& state) {
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  if (!store.ok()) {
    state.SkipWithError(store.status().message().c_str());
    return nullptr;
  }
  return std::move(*store);
}

// One Submit of range(0) jobs as one group into an empty database.
void BM_SubmitGroup(benchmark::State& state) {
  const Submission submission = MakeGroup(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    state.PauseTiming();
    auto dir = std::make_unique<TempDir>();
    std::unique_ptr<Store> store = MustOpen(dir->File("berth.db"), state);
    if (store == nullptr) return;
    state.ResumeTiming();

    Result<SubmitResult> r = store->Submit(submission);

    state.PauseTiming();
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    store.reset();
    dir.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SubmitGroup)->Arg(1'000)->Arg(10'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// A store in `dir` with one group of `count` submitted jobs, their ids in `ids`; null after
// skipping the benchmark with the reason.
std::unique_ptr<Store> StoreWithJobs(const TempDir& dir, int count, benchmark::State& state,
                                     std::vector<int64_t>& ids) {
  std::unique_ptr<Store> store = MustOpen(dir.File("berth.db"), state);
  if (store == nullptr) return nullptr;
  Result<SubmitResult> submitted = store->Submit(MakeGroup(count));
  if (!submitted.ok()) {
    state.SkipWithError(submitted.status().message().c_str());
    return nullptr;
  }
  ids = submitted->ids;
  return store;
}

// Commits of the batches `fill(batch)` makes (untimed), 1,000 items each; items/s = items per
// second.
template <class Fill>
void TimedCommits(benchmark::State& state, Store& store, Fill fill) {
  for (auto _ : state) {
    state.PauseTiming();
    Batch batch;
    fill(batch);
    state.ResumeTiming();
    if (Status st = store.Commit(batch); !st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}

// One Commit appending an event to each of 1,000 jobs (what a pass's chunk of placements appends:
// "placed on ..."), into a database of 100,000 submitted jobs; items/s = events per second.
void BM_AppendEvents(benchmark::State& state) {
  TempDir dir;
  std::vector<int64_t> ids;
  std::unique_ptr<Store> store = StoreWithJobs(dir, 100'000, state, ids);
  if (store == nullptr) return;
  size_t next = 0;
  TimedCommits(state, *store, [&](Batch& batch) {
    for (int k = 0; k < 1000; ++k, next = (next + 1) % ids.size()) {
      batch.events.emplace_back(ids[next], JobEvent{.at = 1'790'000'000'000,
                                                    .status = JobStatus::kStarting,
                                                    .attempt = 1,
                                                    .reason = "placed on node-00001"});
    }
  });
}
BENCHMARK(BM_AppendEvents)->Unit(benchmark::kMillisecond)->UseRealTime();

// One Commit updating 1,000 of 100,000 pending jobs to STARTING with a placement (what a pass's
// chunk of placements writes besides its events and attempts); items/s = job updates per second.
void BM_UpdateJobs(benchmark::State& state) {
  TempDir dir;
  std::vector<int64_t> ids;
  std::unique_ptr<Store> store = StoreWithJobs(dir, 100'000, state, ids);
  if (store == nullptr) return;
  Result<std::vector<JobRow>> rows = store->GetJobs(ids);
  if (!rows.ok()) {
    state.SkipWithError(rows.status().message().c_str());
    return;
  }
  for (JobRow& row : *rows) {
    row.status = JobStatus::kStarting;
    row.attempt = 1;
    row.placement = {{.node = "node-00001", .rank = 0, .gpus = {{.index = 0, .milli = 1000}}}};
  }
  size_t next = 0;
  TimedCommits(state, *store, [&](Batch& batch) {
    for (int k = 0; k < 1000; ++k, next = (next + 1) % rows->size()) {
      batch.jobs.push_back((*rows)[next]);
    }
  });
}
BENCHMARK(BM_UpdateJobs)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same into PostgreSQL (target: 1000 jobs <= 50 ms, 10,000 <= 200 ms), side by side:
// a database of its own, emptied between iterations; one store opened for all of them (a server's
// connections stay open).
// A fresh database `name` on the server BERTH_BENCH_PG names, dropped again when this dies; its
// URI, or "" after skipping the benchmark with the reason.
class BenchDatabase {
 public:
  BenchDatabase(const std::string& name, benchmark::State& state) : name_(name) {
    const char* admin = std::getenv("BERTH_BENCH_PG");
    if (admin == nullptr || *admin == '\0') {
      state.SkipWithError("set BERTH_BENCH_PG=postgresql://USER@HOST:PORT/postgres to run it");
      return;
    }
    const std::string admin_uri = admin;
    Result<std::unique_ptr<PgConn>> conn = PgConn::Connect(admin_uri);
    if (!conn.ok()) {
      state.SkipWithError(conn.status().message().c_str());
      return;
    }
    admin_ = std::move(*conn);
    (void)admin_->Exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    if (Status st = admin_->Exec("CREATE DATABASE " + name_); !st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    uri_ = admin_uri.substr(0, admin_uri.rfind('/')) + "/" + name_;
  }
  ~BenchDatabase() {
    if (!uri_.empty()) (void)admin_->Exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }
  const std::string& uri() const { return uri_; }

 private:
  std::string name_;
  std::unique_ptr<PgConn> admin_;
  std::string uri_;
};

void BM_SubmitGroupPostgres(benchmark::State& state) {
  BenchDatabase db("berth_bench", state);
  if (db.uri().empty()) return;
  Result<std::unique_ptr<Store>> store = OpenStore(db.uri());
  Result<std::unique_ptr<PgConn>> raw = PgConn::Connect(db.uri());
  if (!store.ok() || !raw.ok()) {
    state.SkipWithError("cannot open the benchmark's database");
    return;
  }
  const Submission submission = MakeGroup(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    Result<SubmitResult> r = (*store)->Submit(submission);
    state.PauseTiming();
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    (void)(*raw)->Exec("TRUNCATE job_events, attempts, jobs, groups, specs");
    (void)(*raw)->Exec("VACUUM ANALYZE");
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
// Jobs' output: one 4 KiB append (what an agent ships from a chatty job) through the server's
// LogStore, into files (arg 0, one server) or PostgreSQL (arg 1, several servers; docs/ha.md), and
// reading 64 KiB back. The logs grow over the iterations, as a long job's do.
void BM_LogAppend(benchmark::State& state) {
  const bool pg = state.range(0) == 1;
  TempDir dir;
  std::unique_ptr<BenchDatabase> db;
  std::unique_ptr<LogStore> logs;
  if (pg) {
    db = std::make_unique<BenchDatabase>("berth_bench_logs", state);
    if (db->uri().empty()) return;
    Result<std::unique_ptr<Store>> store = OpenStore(db->uri());  // migrates
    Result<std::unique_ptr<LogBytes>> bytes = OpenPgLogBytes(db->uri());
    if (!store.ok() || !bytes.ok()) {
      state.SkipWithError("cannot open the benchmark's database");
      return;
    }
    logs = std::make_unique<LogStore>(std::move(*bytes));
  } else {
    logs = std::make_unique<LogStore>(dir.File("logs"));
  }
  const std::string chunk(4096, 'x');
  int64_t offset = 0;
  for (auto _ : state) {
    Result<int64_t> size = logs->Append(7, 1, 0, offset, chunk);
    if (!size.ok()) {
      state.SkipWithError(size.status().message().c_str());
      return;
    }
    offset = *size;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(chunk.size()));
  const std::string back = logs->Read(7, 1, 0, 0, 64 << 10);
  if (back.size() != std::min<size_t>(64 << 10, static_cast<size_t>(offset))) {
    state.SkipWithError("read back the wrong amount");
  }
}
BENCHMARK(BM_LogAppend)->ArgName("postgres")->Arg(0)->Arg(1)->UseRealTime();

BENCHMARK(BM_SubmitGroupPostgres)
    ->Arg(1'000)
    ->Arg(10'000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A server restart with a long history: 100,000 finished jobs and range(0) active ones. Thanks to
// the (active, id) index, LoadActiveJobs should cost in proportion to the active jobs only.
void BM_LoadActiveJobs(benchmark::State& state) {
  TempDir dir;
  std::unique_ptr<Store> store = MustOpen(dir.File("berth.db"), state);
  if (store == nullptr) return;
  Result<SubmitResult> old = store->Submit(MakeGroup(100'000));
  Result<std::vector<JobRow>> rows = old.ok() ? store->LoadActiveJobs() : old.status();
  if (!rows.ok()) {
    state.SkipWithError(rows.status().message().c_str());
    return;
  }
  Batch finish;
  for (JobRow& job : *rows) {
    job.status = JobStatus::kSucceeded;
    finish.jobs.push_back(std::move(job));
  }
  Status st = store->Commit(finish);
  Result<SubmitResult> active = st.ok() ? store->Submit(MakeGroup(static_cast<int>(state.range(0))))
                                        : Result<SubmitResult>(st);
  if (!active.ok()) {
    state.SkipWithError(active.status().message().c_str());
    return;
  }
  for (auto _ : state) {
    Result<std::vector<JobRow>> jobs = store->LoadActiveJobs();
    if (!jobs.ok() || jobs->size() != static_cast<size_t>(state.range(0))) {
      state.SkipWithError("LoadActiveJobs failed or returned the wrong jobs");
      return;
    }
    benchmark::DoNotOptimize(jobs);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_LoadActiveJobs)->Arg(100)->Arg(10'000)->Unit(benchmark::kMillisecond);

// ---- Usage accounting ----
//
// A cluster's 60 days: 1,000,000 attempts of 200 users in 20 teams on 3 GPU types, each 10 min to
// 6 h long (uniform), ending uniformly over the 60 days, written in end order in Commits of 10,000
// records as a server would write them. That is ~860k hourly buckets (1440 hours x 600 user-type
// pairs) and ~36k daily ones. Then `berth usage` over the last 30 days (by user, by team; the
// window does not start or end on an hour) and the start-up read of the last 70 days. The floor is
// SQLite scanning a plain 1M-row table the same way (same pragmas, same default page cache), so
// that the figures read as ratios on any machine.

constexpr int kUsageRecords = 1'000'000;
constexpr int kUsageBatch = 10'000;
constexpr int kUsers = 200;
constexpr int kTeams = 20;
constexpr DurationMs kMinuteMs = 60'000;
constexpr DurationMs kHourMs = 60 * kMinuteMs;
constexpr DurationMs kDayMs = 24 * kHourMs;
constexpr TimeMs kUsageEnd = 1'790'000'000'000;  // "now": the end of the 60 days
constexpr TimeMs kUsageStart = kUsageEnd - 60 * kDayMs;

class UsageFixture {
 public:
  UsageFixture() {
    const auto start = std::chrono::steady_clock::now();
    if (!Build().ok()) return;
    setup_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "usage fixture: %d records committed, floor table built: %.1f s\n",
                 kUsageRecords, setup_seconds_);
  }

  // Not ok when building failed; the benchmarks then skip with its message.
  const Status& status() const { return status_; }
  Store& store() { return *store_; }
  SqliteDb& raw() { return *raw_; }
  SqliteDb& floor() { return *floor_; }

 private:
  Status Build() {
    Result<std::unique_ptr<Store>> store = OpenSqliteStore(dir_.File("berth.db"));
    if (!store.ok()) return status_ = store.status();
    store_ = std::move(*store);

    std::mt19937_64 rng(12);
    const std::array<std::string, 3> types = {"H100", "A100", "L40S"};
    const std::array<MilliGpu, 4> gpus = {1'000, 2'000, 4'000, 8'000};
    const DurationMs slice = (kUsageEnd - kUsageStart) / (kUsageRecords / kUsageBatch);
    for (int b = 0; b < kUsageRecords / kUsageBatch; ++b) {
      // This batch's attempts end in its slice of the 60 days, in order.
      std::vector<TimeMs> ends(kUsageBatch);
      for (TimeMs& end : ends) {
        end = kUsageStart + b * slice + static_cast<TimeMs>(rng() % static_cast<uint64_t>(slice));
      }
      std::sort(ends.begin(), ends.end());
      Batch batch;
      batch.usage.reserve(kUsageBatch);
      for (TimeMs end : ends) {
        const int user = static_cast<int>(rng() % kUsers);
        const MilliGpu gpu_milli = gpus[rng() % gpus.size()];
        const DurationMs length =
            10 * kMinuteMs + static_cast<DurationMs>(rng() % (6 * kHourMs - 10 * kMinuteMs + 1));
        const uint64_t outcome = rng() % 10;
        batch.usage.push_back(UsageRecord{.user = "user" + std::to_string(user),
                                          .team = "team" + std::to_string(user % kTeams),
                                          .gpu_type = types[rng() % types.size()],
                                          .gpu_milli = gpu_milli,
                                          .cpu_milli = 4 * gpu_milli,
                                          .placed_at = end - length,
                                          .ended_at = end,
                                          .wait_ms = static_cast<DurationMs>(rng() % kHourMs),
                                          .job_ended = outcome < 8,
                                          .preempted = outcome == 9});
      }
      if (Status st = store_->Commit(batch); !st.ok()) return status_ = st;
    }

    Result<std::unique_ptr<SqliteDb>> raw = SqliteDb::Open(dir_.File("berth.db"), false);
    if (!raw.ok()) return status_ = raw.status();
    raw_ = std::move(*raw);

    // The floor: 1M rows of one small integer, in a file of its own with the store's pragmas.
    Result<std::unique_ptr<SqliteDb>> floor = SqliteDb::Open(dir_.File("floor.db"));
    if (!floor.ok()) return status_ = floor.status();
    floor_ = std::move(*floor);
    Result<std::string> mode = floor_->QueryText("PRAGMA journal_mode = WAL");
    if (!mode.ok()) return status_ = mode.status();
    if (Status st = floor_->Exec(
            "PRAGMA synchronous = NORMAL;"
            "CREATE TABLE t (x INTEGER NOT NULL);"
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < 1000000) "
            "INSERT INTO t(x) SELECT i % 1000 FROM n;");
        !st.ok()) {
      return status_ = st;
    }
    return status_;
  }

  TempDir dir_;  // declared first: destroyed after the connections to its files
  Status status_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<SqliteDb> raw_;
  std::unique_ptr<SqliteDb> floor_;
  double setup_seconds_ = 0;
};

// Built on first use, kept for every usage benchmark; destroyed (its files removed) at exit.
UsageFixture& Usage() {
  static UsageFixture fixture;
  return fixture;
}

// The floor: SELECT sum(x) over 1,000,000 rows.
void BM_UsageFloorScan1M(benchmark::State& state) {
  UsageFixture& f = Usage();
  if (!f.status().ok()) {
    state.SkipWithError(f.status().message().c_str());
    return;
  }
  for (auto _ : state) {
    Result<int64_t> sum = f.floor().QueryInt("SELECT sum(x) FROM t");
    if (!sum.ok() || *sum != 499'500'000) {
      state.SkipWithError("floor scan failed or summed wrong");
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * 1'000'000);
}
BENCHMARK(BM_UsageFloorScan1M)->Unit(benchmark::kMillisecond);

// What the report would cost from the hourly buckets alone (before usage_daily): counting the
// window's hourly rows (the least any reading of them costs), and SQLite's GROUP BY over them.
void BM_UsageHourlyCount30d(benchmark::State& state) {
  UsageFixture& f = Usage();
  if (!f.status().ok()) {
    state.SkipWithError(f.status().message().c_str());
    return;
  }
  const std::string sql =
      "SELECT count(*) FROM usage_hourly WHERE hour >= " + std::to_string(kUsageEnd - 30 * kDayMs) +
      " AND hour < " + std::to_string(kUsageEnd);
  int64_t rows = 0;
  for (auto _ : state) {
    Result<int64_t> n = f.raw().QueryInt(sql);
    if (!n.ok()) {
      state.SkipWithError(n.status().message().c_str());
      return;
    }
    rows = *n;
  }
  state.counters["buckets"] = static_cast<double>(rows);
  state.SetItemsProcessed(state.iterations() * rows);
}
BENCHMARK(BM_UsageHourlyCount30d)->Unit(benchmark::kMillisecond);

void BM_UsageHourlyGroupBy30d(benchmark::State& state) {
  UsageFixture& f = Usage();
  if (!f.status().ok()) {
    state.SkipWithError(f.status().message().c_str());
    return;
  }
  const std::string sql =
      "SELECT user, gpu_type, sum(gpu_milli_ms), sum(cpu_milli_ms), sum(jobs), sum(wait_ms), "
      "sum(waits), sum(preemptions) FROM usage_hourly WHERE hour >= " +
      std::to_string(kUsageEnd - 30 * kDayMs - (kUsageEnd - 30 * kDayMs) % kHourMs) +
      " AND hour < " + std::to_string(kUsageEnd) +
      " GROUP BY user, gpu_type ORDER BY user, gpu_type";
  Result<Statement> stmt = f.raw().Prepare(sql);
  if (!stmt.ok()) {
    state.SkipWithError(stmt.status().message().c_str());
    return;
  }
  for (auto _ : state) {
    int rows = 0;
    for (;;) {
      Result<bool> row = stmt->Step();
      if (!row.ok()) {
        state.SkipWithError(row.status().message().c_str());
        return;
      }
      if (!*row) break;
      ++rows;
    }
    stmt->Reset();
    if (rows != kUsers * 3) {
      state.SkipWithError("GROUP BY returned the wrong rows");
      return;
    }
  }
}
BENCHMARK(BM_UsageHourlyGroupBy30d)->Unit(benchmark::kMillisecond);

// `berth usage --since 30d` (range(0) = 0) and `berth usage --since 30d --by-team` (1).
void BM_QueryUsage30d(benchmark::State& state) {
  UsageFixture& f = Usage();
  if (!f.status().ok()) {
    state.SkipWithError(f.status().message().c_str());
    return;
  }
  const UsageQuery query{
      .since = kUsageEnd - 30 * kDayMs, .until = kUsageEnd, .by_team = state.range(0) == 1};
  const size_t expected = query.by_team ? kTeams : kUsers;
  for (auto _ : state) {
    Result<std::vector<UsageRow>> rows = f.store().QueryUsage(query);
    if (!rows.ok() || rows->size() != expected) {
      state.SkipWithError("QueryUsage failed or returned the wrong rows");
      return;
    }
    benchmark::DoNotOptimize(rows);
  }
}
BENCHMARK(BM_QueryUsage30d)->ArgName("by_team")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The start-up rebuild of decayed fair-share usage: every bucket of the last 70 days (all of them).
void BM_LoadUsageBuckets70d(benchmark::State& state) {
  UsageFixture& f = Usage();
  if (!f.status().ok()) {
    state.SkipWithError(f.status().message().c_str());
    return;
  }
  size_t buckets = 0;
  for (auto _ : state) {
    Result<std::vector<UsageBucket>> rows = f.store().LoadUsageBuckets(kUsageEnd - 70 * kDayMs);
    if (!rows.ok() || rows->empty()) {
      state.SkipWithError("LoadUsageBuckets failed or returned nothing");
      return;
    }
    buckets = rows->size();
    benchmark::DoNotOptimize(rows);
  }
  state.counters["buckets"] = static_cast<double>(buckets);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(buckets));
}
BENCHMARK(BM_LoadUsageBuckets70d)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace berth

BENCHMARK_MAIN();
