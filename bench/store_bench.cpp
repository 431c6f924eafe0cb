// Store benchmarks: the cost of one bulk submission (DESIGN.md "Bulk submission": 1000 jobs, one
// request, one transaction) and of the reads a restart and `berth queue` make.
//
// Run: cmake --build build --target store_bench && ./build/bench/store_bench
// Each Submit iteration uses a fresh database file in a temp directory, so the numbers include the
// WAL writes and the checkpoint a real first submit pays, and none of the file growth of earlier
// iterations.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

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

}  // namespace
}  // namespace berth

BENCHMARK_MAIN();
