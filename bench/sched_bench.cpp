// Scheduler benchmarks (issue "Scale"): the cost of one Schedule() pass on a large cluster, for the
// four situations a busy server meets (DESIGN.md "Cost"):
//   EmptyClusterPlacements  one pass placing as much of a 100,000-job queue as fits on an empty
//                           cluster; items/s = placements per second (target >= 50,000/s)
//   FullClusterNothingFits  one pass over 100,000 pending jobs when every GPU is taken and no job
//                           may preempt (target <= 20 ms)
//   OneJobIntoBusyCluster   one pass placing a single new job on a cluster ~90% full (target
//                           <= 1 ms)
//   PreemptGang/PreemptExclusive  one pass in which a high-priority 8-node gang (or an exclusive
//                           8-node rack job) has to evict low-priority jobs from a full cluster
//   FullClusterMassPreemption  one pass over 100,000 pending jobs of priorities 0-3 on a cluster
//                           full of priority-0 jobs: the queue evicts its way in (~15,000
//                           preemptions)
//   SnapshotCopy*           what it costs the server to copy a snapshot of that size (the passes
//                           above time Schedule() alone)
//
// The cluster: 10,000 nodes with 8 GPUs each (70% H100, 30% A100, interleaved), 128 CPUs and 1 TiB,
// labelled rack=r0..r624 in groups of 16 nodes. The queue mixes 1-, 2-, 4- and 8-GPU jobs, 2-16
// node gangs of 8 GPUs per node and exclusive rack jobs, with priorities 0-3. Everything is
// generated from fixed seeds, so every run sees the same snapshots.
//
// Run: cmake -S . -B build-sched -DCMAKE_BUILD_TYPE=Release -DBERTH_BUILD_BENCH=ON &&
//      cmake --build build-sched --target sched_bench -j1 && ./build-sched/bench/sched_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace berth::sched {
namespace {

constexpr int kNodes = 10'000;
constexpr int kGpusPerNode = 8;
constexpr int kNodesPerRack = 16;
constexpr int kPending = 100'000;
constexpr TimeMs kNow = 1'000'000'000;

std::string NodeName(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "node-%05d", i);
  return buf;
}

std::string GpuTypeOf(int node) { return node % 10 < 3 ? "A100" : "H100"; }

std::vector<NodeView> MakeNodes() {
  std::vector<NodeView> nodes;
  nodes.reserve(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    NodeView n;
    n.name = NodeName(i);
    n.labels["rack"] = "r" + std::to_string(i / kNodesPerRack);
    n.cpus_total = n.cpus_free = 128 * kMilliPerCpu;
    n.memory_total = n.memory_free = 1024 * kMibPerGib;
    for (int d = 0; d < kGpusPerNode; ++d) n.gpus.push_back({d, GpuTypeOf(i), kMilliPerGpu});
    nodes.push_back(std::move(n));
  }
  return nodes;
}

ResourceRequest PerNode(const std::string& type, int gpus) {
  ResourceRequest r;
  r.gpu_type = type;
  r.gpu_milli = gpus * kMilliPerGpu;
  r.cpus = 4 * kMilliPerCpu * gpus;
  r.memory = 16 * kMibPerGib * gpus;
  return r;
}

// The queue: 45% 1 GPU, 25% 2, 12% 4, 12% 8, 5% gangs of 2-16 nodes x 8 GPUs, 1% exclusive rack
// jobs of 2-16 nodes x 8 GPUs; 70% H100. Submitted within the last 100 s, so nobody starves.
std::vector<JobRequest> MakeQueue(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<JobRequest> jobs;
  jobs.reserve(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    JobRequest j;
    j.id = 1'000'000 + k;
    j.priority = pick(0, 3);
    j.submitted_at = kNow - 100'000 + k;
    const std::string type = pick(0, 9) < 7 ? "H100" : "A100";
    const int r = pick(0, 99);
    int gpus = 8;
    if (r < 45) {
      gpus = 1;
    } else if (r < 70) {
      gpus = 2;
    } else if (r < 82) {
      gpus = 4;
    } else if (r < 94) {
      gpus = 8;
    } else {
      j.num_nodes = pick(2, 16);
      if (r >= 99) j.exclusive = "rack";
    }
    j.per_node = PerNode(type, gpus);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// Fills node `i` with running jobs of 1, 2, 4 or 8 GPUs until `used` of its 8 GPUs are taken.
void Fill(Snapshot& s, int i, int used, int priority, JobId& next, std::mt19937& rng) {
  static const int kSizes[] = {1, 2, 4, 8};
  NodeView& node = s.nodes[static_cast<size_t>(i)];
  int taken = 0;
  while (taken < used) {
    int size = kSizes[std::uniform_int_distribution<int>(0, 3)(rng)];
    while (taken + size > used) size /= 2;
    RunningJob r;
    r.id = next++;
    r.priority = priority;
    r.per_node = PerNode(GpuTypeOf(i), size);
    r.started_at = kNow - std::uniform_int_distribution<int>(1, 86'400'000)(rng);
    NodeGrant g{node.name, 0, {}};
    for (int d = taken; d < taken + size; ++d) {
      g.gpus.push_back({d, kMilliPerGpu});
      node.gpus[static_cast<size_t>(d)].free = 0;
    }
    node.cpus_free -= r.per_node.cpus;
    node.memory_free -= r.per_node.memory;
    r.placement.push_back(std::move(g));
    s.running.push_back(std::move(r));
    taken += size;
  }
}

// Every GPU taken by jobs of `priority`.
Snapshot FullCluster(int priority) {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  std::mt19937 rng(7);
  JobId next = 1;
  for (int i = 0; i < kNodes; ++i) Fill(s, i, kGpusPerNode, priority, next, rng);
  return s;
}

// About 90% of the GPUs taken: 70% of the nodes full, the rest with 4-7 GPUs in use; the first 20
// racks are held by exclusive 16-node jobs.
Snapshot BusyCluster() {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  std::mt19937 rng(11);
  JobId next = 1;
  constexpr int kExclusiveRacks = 20;
  for (int rack = 0; rack < kExclusiveRacks; ++rack) {
    RunningJob r;
    r.id = next++;
    r.priority = 2;
    r.exclusive = "rack";
    r.per_node = PerNode(GpuTypeOf(0), kGpusPerNode);  // A100 nodes are only 30%: CPUs, memory
    r.per_node.gpu_type.clear();
    r.per_node.gpu_milli = 0;
    r.started_at = kNow - 3'600'000;
    for (int k = 0; k < kNodesPerRack; ++k) {
      const int i = rack * kNodesPerRack + k;
      NodeView& node = s.nodes[static_cast<size_t>(i)];
      node.cpus_free -= r.per_node.cpus;
      node.memory_free -= r.per_node.memory;
      r.placement.push_back({node.name, k, {}});
    }
    s.running.push_back(std::move(r));
  }
  for (int i = kExclusiveRacks * kNodesPerRack; i < kNodes; ++i) {
    const int used = std::uniform_int_distribution<int>(0, 9)(rng) < 7
                         ? kGpusPerNode
                         : std::uniform_int_distribution<int>(4, 7)(rng);
    Fill(s, i, used, std::uniform_int_distribution<int>(0, 3)(rng), next, rng);
  }
  return s;
}

void Report(benchmark::State& state, const PassResult& last) {
  state.counters["placed"] = static_cast<double>(last.placements.size());
  state.counters["preempted"] = static_cast<double>(last.preemptions.size());
  state.counters["waiting"] = static_cast<double>(last.waiting.size());
}

void BM_EmptyClusterPlacements(benchmark::State& state) {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  s.pending = MakeQueue(kPending, 1);
  PassResult last;
  int64_t placed = 0;
  for (auto _ : state) {
    PassResult result = Schedule(s, Config{});
    placed += static_cast<int64_t>(result.placements.size());
    state.PauseTiming();  // freeing 100,000 decisions is the caller's cost, not the pass's
    last = std::move(result);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(placed);
  Report(state, last);
}
BENCHMARK(BM_EmptyClusterPlacements)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FullClusterNothingFits(benchmark::State& state) {
  Snapshot s = FullCluster(/*priority=*/10);  // above every pending job: nobody may preempt
  s.pending = MakeQueue(kPending, 2);
  PassResult last;
  for (auto _ : state) {
    PassResult result = Schedule(s, Config{});
    state.PauseTiming();
    last = std::move(result);
    state.ResumeTiming();
  }
  Report(state, last);
}
BENCHMARK(BM_FullClusterNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();

// Every GPU taken by priority-0 jobs, and the queue's priorities 1-3 outrank them: the pass evicts
// its way through the cluster (every preemption scans the nodes for the cheapest victims).
void BM_FullClusterMassPreemption(benchmark::State& state) {
  Snapshot s = FullCluster(/*priority=*/0);
  s.pending = MakeQueue(kPending, 2);
  PassResult last;
  for (auto _ : state) {
    PassResult result = Schedule(s, Config{});
    state.PauseTiming();
    last = std::move(result);
    state.ResumeTiming();
  }
  Report(state, last);
}
BENCHMARK(BM_FullClusterMassPreemption)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_OneJobIntoBusyCluster(benchmark::State& state) {
  Snapshot s = BusyCluster();
  JobRequest job;
  job.id = 5'000'000;
  job.priority = 1;
  job.submitted_at = kNow;
  job.per_node = PerNode("H100", 2);
  s.pending = {job};
  PassResult last;
  for (auto _ : state) {
    last = Schedule(s, Config{});
    benchmark::DoNotOptimize(last);
  }
  state.counters["running"] = static_cast<double>(s.running.size());
  Report(state, last);
}
BENCHMARK(BM_OneJobIntoBusyCluster)->Unit(benchmark::kMicrosecond)->UseRealTime();

void Preempt(benchmark::State& state, bool exclusive) {
  Snapshot s = FullCluster(/*priority=*/0);
  JobRequest job;
  job.id = 5'000'000;
  job.priority = 100;
  job.submitted_at = kNow;
  job.num_nodes = 8;
  job.per_node = PerNode("H100", kGpusPerNode);
  if (exclusive) job.exclusive = "rack";
  s.pending = {job};
  PassResult last;
  for (auto _ : state) {
    last = Schedule(s, Config{});
    benchmark::DoNotOptimize(last);
  }
  state.counters["victims"] =
      last.preemptions.empty() ? 0.0 : static_cast<double>(last.preemptions[0].victims.size());
  Report(state, last);
}
void BM_PreemptGang(benchmark::State& state) { Preempt(state, false); }
void BM_PreemptExclusive(benchmark::State& state) { Preempt(state, true); }
BENCHMARK(BM_PreemptGang)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PreemptExclusive)->Unit(benchmark::kMillisecond)->UseRealTime();

// The server copies its state into a Snapshot before every pass.
void BM_SnapshotCopyBusyCluster(benchmark::State& state) {
  Snapshot s = BusyCluster();
  for (auto _ : state) {
    Snapshot copy = s;
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_SnapshotCopyBusyCluster)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SnapshotCopyFullQueue(benchmark::State& state) {
  Snapshot s = FullCluster(10);
  s.pending = MakeQueue(kPending, 2);
  for (auto _ : state) {
    Snapshot copy = s;
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_SnapshotCopyFullQueue)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace berth::sched

BENCHMARK_MAIN();
