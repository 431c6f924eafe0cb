// What a /metrics scrape costs the server (issue "Seeing the cluster": <= 20 ms at 100k jobs and
// 10k nodes): a Core over a real SQLite store in a temp dir, 10,000 registered nodes (8 V100 each,
// 32 CPUs), 100,000 one-GPU jobs submitted in one group, one pass (80,000 placed, 20,000 left
// waiting, with their reasons). Then, per iteration, the page as the server builds it: build info,
// ReadModel::WriteGauges (one walk of the jobs and nodes under the core's lock), the counters and
// histograms. The page's size is reported.
//
//   BM_Scrape          the whole page
//   BM_ScrapeGauges    ReadModel::WriteGauges alone (the part that holds the core's lock)
//   BM_DashboardQueue  ReadModel::ActiveEntries: what the dashboard's queue page copies under the
//   core's
//                      lock (every active job's id, group, user, status, priority) before the
//                      server sorts, groups and pages it
//   BM_DashboardTotals ReadModel::ClusterTotals: the dashboard overview's counts
//
// Setting up (10,000 registrations, 100,000 submissions, one pass with 160 commits) takes ~10 s
// on a 2-CPU VM. Build and run (bench/README.md):
//   cmake --build build-rel --target metrics_bench && ./build-rel/bench/metrics_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "fakes/fake_clock.h"
#include "fakes/temp_dir.h"
#include "server/core/core.h"
#include "store/store.h"

namespace berth {
namespace {

constexpr int kNodes = 10'000;
constexpr int kGpusPerNode = 8;
constexpr int kJobs = 100'000;

class NullChannel final : public AgentChannel {
 public:
  void Open(const std::string&, const std::string&) override {}
  void Close(const std::string&) override {}
  void Send(const std::string&, const proto::WatchMessage&) override {}
};

void Check(const Status& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, st.message().c_str());
  std::abort();
}

struct World {
  testing::TempDir dir;
  testing::FakeClock clock;
  NullChannel channel;
  std::unique_ptr<Store> store;
  std::unique_ptr<Core> core;

  World() {
    auto opened = OpenSqliteStore(dir.File("berth.db"));
    Check(opened.status(), "open");
    store = std::move(*opened);
    core = std::make_unique<Core>(CoreOptions{}, *store, clock, channel);
    Check(core->Load(), "load");
    for (int i = 0; i < kNodes; ++i) {
      proto::RegisterRequest r;
      char name[16];
      std::snprintf(name, sizeof name, "node-%05d", i);
      r.name = name;
      r.node_id = std::string("id-") + name;
      r.address = "10.0.0.1";
      r.cpus_milli = 32 * 1000;
      r.memory_mib = 256 * 1024;
      for (int d = 0; d < kGpusPerNode; ++d) r.gpus.push_back({d, "V100"});
      Check(core->agents().Register(r, "127.0.0.1").status(), "register");
    }
    JobSpec spec;
    spec.name = "sweep";
    spec.run = "true";
    spec.resources.cpus = 1000;
    spec.resources.gpu_type = "V100";
    spec.resources.gpu_milli = 1000;
    // Ten users, so that the pending gauges have more than one series per reason.
    for (int u = 0; u < 10; ++u) {
      SubmitRequest r{.spec = spec, .user = "user-" + std::to_string(u), .count = kJobs / 10};
      Check(core->admission().Submit(std::move(r)).status(), "submit");
    }
    core->scheduling().RunPass();
  }
};

World& TheWorld() {
  static World* world = new World();  // built once, for every benchmark
  return *world;
}

void BM_Scrape(benchmark::State& state) {
  World& w = TheWorld();
  size_t bytes = 0;
  for (auto _ : state) {
    metrics::ExpositionWriter out;
    out.Family("berth_build_info", "gauge", "Build.");
    out.Sample("berth_build_info", {{"version", "bench"}}, 1);
    w.core->reads().WriteGauges(out);
    w.core->metrics().Write(out);
    bytes = out.text().size();
    benchmark::DoNotOptimize(out.text().data());
  }
  state.counters["page_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Scrape)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ScrapeGauges(benchmark::State& state) {
  World& w = TheWorld();
  for (auto _ : state) {
    metrics::ExpositionWriter out;
    w.core->reads().WriteGauges(out);
    benchmark::DoNotOptimize(out.text().data());
  }
}
BENCHMARK(BM_ScrapeGauges)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DashboardQueue(benchmark::State& state) {
  World& w = TheWorld();
  size_t n = 0;
  for (auto _ : state) {
    auto entries = w.core->reads().ActiveEntries({});
    n = entries.size();
    benchmark::DoNotOptimize(entries.data());
  }
  state.counters["jobs"] = static_cast<double>(n);
}
BENCHMARK(BM_DashboardQueue)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DashboardTotals(benchmark::State& state) {
  World& w = TheWorld();
  for (auto _ : state) {
    auto totals = w.core->reads().ClusterTotals();
    benchmark::DoNotOptimize(totals.cpus);
  }
}
BENCHMARK(BM_DashboardTotals)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace berth

BENCHMARK_MAIN();
