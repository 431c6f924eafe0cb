// The node's GPU sampler (agent/gpu_watch.h): what one sample costs the agent on a node
// with 8 GPUs running 8 one-GPU jobs. The target is at most 1 % of one core at the default
// interval (10 s), i.e. at most 100 ms of CPU per sample. Figures in bench/README.md.
//
// BM_ReadAndAttribute: nvidia-smi's two CSV answers parsed and the sample attributed to the 8
// ranks (the agent's own work). BM_SampleThroughProcesses: a whole sample as the agent takes it,
// the two questions asked of a stand-in nvidia-smi (a shell script printing the same CSV) through
// the real ProcessRunner: fork, exec, pipes and waits; its children's CPU (the shell and cat) is
// counted apart (children_cpu_ms). A real nvidia-smi costs its own CPU on top (not measurable
// here: no GPU on these machines).
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "agent/gpu_sampler.h"
#include "agent/gpu_usage.h"
#include "fakes/fake_clock.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

std::string GpuCsv() {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out += std::to_string(i) + ", GPU-5f0e9d8c-aaaa-bbbb-cccc-ddddeeeeff0" + std::to_string(i) +
           ", " + std::to_string(i * 11) + ", " + std::to_string(30'000 + i) + "\n";
  }
  return out;
}

std::string AppsCsv() {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out += "GPU-5f0e9d8c-aaaa-bbbb-cccc-ddddeeeeff0" + std::to_string(i) + ", " +
           std::to_string(4000 + i) + ", " + std::to_string(29'000 + i) + "\n";
  }
  return out;
}

void BM_ReadAndAttribute(benchmark::State& state) {
  const std::string gpus = GpuCsv(), apps = AppsCsv();
  GpuUsageBook book(5);
  for (int j = 0; j < 8; ++j) book.Hold({j + 1, 1, 0}, {j});
  TimeMs at = 1'000'000;
  for (auto _ : state) {
    GpuSample sample;
    sample.at = at += 10'000;
    sample.gpus = *ParseGpuQuery(gpus);
    (void)AddComputeApps(apps, sample.gpus);
    book.Record(sample, at);
    benchmark::DoNotOptimize(book.Of({1, 1, 0}));
  }
}
BENCHMARK(BM_ReadAndAttribute)->Unit(benchmark::kMicrosecond);

int64_t ChildrenCpuMs() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000;
}

void BM_SampleThroughProcesses(benchmark::State& state) {
  testing::TempDir dir;
  const std::string bin = dir.path() + "/bin";
  ::mkdir(bin.c_str(), 0755);
  std::ofstream(dir.path() + "/gpus.csv") << GpuCsv();
  std::ofstream(dir.path() + "/apps.csv") << AppsCsv();
  {
    std::ofstream smi(bin + "/nvidia-smi");
    smi << "#!/bin/sh\ncase \"$1\" in --query-gpu=*) cat '" << dir.path()
        << "/gpus.csv' ;; *) cat '" << dir.path() << "/apps.csv' ;; esac\n";
  }
  ::chmod((bin + "/nvidia-smi").c_str(), 0755);
  const std::string path =
      bin + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  ::setenv("PATH", path.c_str(), 1);
  testing::FakeClock clock;
  ProcessRunner runner;
  NvidiaSmiSampler sampler(runner, clock);
  GpuUsageBook book(5);
  for (int j = 0; j < 8; ++j) book.Hold({j + 1, 1, 0}, {j});
  const int64_t children_before = ChildrenCpuMs();
  for (auto _ : state) {
    clock.Advance(10'000);
    Result<GpuSample> sample = sampler.Sample();
    if (!sample.ok()) state.SkipWithError(sample.status().message().c_str());
    book.Record(sample, clock.Now());
  }
  state.counters["children_cpu_ms"] = benchmark::Counter(
      static_cast<double>(ChildrenCpuMs() - children_before) / state.iterations());
}
BENCHMARK(BM_SampleThroughProcesses)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace berth

BENCHMARK_MAIN();
