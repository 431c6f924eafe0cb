// Scheduler benchmarks (issue "Scale"): the cost of one Schedule() pass on a large cluster, for the
// four situations a busy server meets (docs/design.md "Scheduling", Cost):
//   EmptyClusterPlacements  one pass placing as much of a 100,000-job queue as fits on an empty
//                           cluster; items/s = placements per second (target >= 50,000/s)
//   CpuJobsFillGpuNodes     one pass placing 100,000 jobs of 1 CPU and no GPU on 1,000 of the nodes
//                           (bench/scale.py's shape: best fit fills node after node)
//   OneJobAmongRunningCpuJobs  one pass placing one job of 1 CPU beside 100,000 such jobs running
//                           on those 1,000 nodes: the pass's cost per running job
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
//   FairShare_*             the same passes with fair share: the 100,000 jobs belong to
//                           200 users in 20 teams with quotas, borrow limits, weights and usage
//                           (see "Fair share" below); the target is at most 1.5x the plain pass. At
//                           the end the binary prints each fair/plain ratio of the medians (real
//                           and CPU time); compare with --benchmark_repetitions=5
//                           --benchmark_enable_random_interleaving=true, so that a machine's load
//                           drifting during the run weighs on both alike.
//
// The cluster: 10,000 nodes with 8 GPUs each (70% H100, 30% A100, interleaved), 128 CPUs and 1 TiB,
// labelled rack=r0..r624 in groups of 16 nodes. The queue mixes 1-, 2-, 4- and 8-GPU jobs, 2-16
// node gangs of 8 GPUs per node and exclusive rack jobs, with priorities 0-3. Everything is
// generated from fixed seeds, so every run sees the same snapshots.
//
// Run: cmake -S . -B build-sched -DCMAKE_BUILD_TYPE=Release -DBERTH_BUILD_BENCH=ON &&
//      cmake --build build-sched --target sched_bench -j1 && ./build-sched/bench/sched_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
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
    s.running.push_back(std::make_shared<const RunningJob>(std::move(r)));
    taken += size;
  }
}

// A snapshot's running jobs are shared and immutable: a copy of `view` to change, in its place.
RunningJob& Mutable(std::shared_ptr<const RunningJob>& view) {
  auto copy = std::make_shared<RunningJob>(*view);
  RunningJob& r = *copy;
  view = std::move(copy);
  return r;
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
    s.running.push_back(std::make_shared<const RunningJob>(std::move(r)));
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

// Passes over `s` for its one pending job, beside its running jobs.
void OneJobPasses(benchmark::State& state, const Snapshot& s) {
  PassResult last;
  for (auto _ : state) {
    last = Schedule(s, Config{});
    benchmark::DoNotOptimize(last);
  }
  state.counters["running"] = static_cast<double>(s.running.size());
  Report(state, last);
}

// Passes over `s`; items/s = placements per second.
void PlacementPasses(benchmark::State& state, const Snapshot& s) {
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

// Reservations, for the BM_Reserved_* twins: the plain benchmarks' clusters and queues
// with 100 operators' reservations (docs/reservations.md) of 10 nodes each, spread over the cluster
// (reservation r holds nodes 100r .. 100r+9): the even ones in force for user "ops" (whose jobs are
// none of the queue's), the odd ones starting 30 min to 50 h from now. 1,000 of the 10,000 nodes
// are reserved; the pass must keep the queue off the ones in force and let only jobs that end in
// time onto the others.
void AddReservations(Snapshot& s) {
  constexpr int kReservations = 100;
  constexpr int kReservedNodes = 10;
  const int stride = static_cast<int>(s.nodes.size()) / kReservations;
  for (int r = 0; r < kReservations; ++r) {
    ReservedWindow w;
    w.name = "resv-" + std::to_string(r);
    w.start = r % 2 == 0 ? kNow - 3'600'000 : kNow + (r + 1) * 1'800'000LL;
    w.end = w.start + 4 * 3'600'000LL;
    w.users = {"ops"};
    for (int k = 0; k < kReservedNodes; ++k) {
      w.nodes.push_back(s.nodes[static_cast<size_t>(r * stride + k)].name);
    }
    s.reserved.push_back(std::move(w));
  }
}

// Passes over `s` whose decisions are freed outside the timing.
void FreedPasses(benchmark::State& state, const Snapshot& s) {
  PassResult last;
  for (auto _ : state) {
    PassResult result = Schedule(s, Config{});
    state.PauseTiming();
    last = std::move(result);
    state.ResumeTiming();
  }
  Report(state, last);
}

void EmptyClusterPlacements(benchmark::State& state, bool reserved) {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  s.pending = MakeQueue(kPending, 1);
  if (reserved) AddReservations(s);
  PlacementPasses(state, s);
}
void BM_EmptyClusterPlacements(benchmark::State& state) { EmptyClusterPlacements(state, false); }
void BM_Reserved_EmptyClusterPlacements(benchmark::State& state) {
  EmptyClusterPlacements(state, true);
}
BENCHMARK(BM_EmptyClusterPlacements)->Unit(benchmark::kMillisecond)->UseRealTime();

// The first 1,000 nodes of MakeNodes(), all free: bench/scale.py's cluster.
Snapshot ThousandNodes() {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  s.nodes.resize(1000);
  return s;
}

// bench/scale.py's shape: 100,000 jobs of 1 CPU and no GPU placed in one pass on 1,000 of the
// nodes (8 GPUs, 128 CPUs each). Best fit fills one node after another, so that every node of the
// index (which orders them by free GPUs, then CPUs) is full before the first that fits; a scan that
// walked past the full ones cost the pass O(full nodes) per placement.
void BM_CpuJobsFillGpuNodes(benchmark::State& state) {
  Snapshot s = ThousandNodes();
  for (int k = 0; k < kPending; ++k) {
    JobRequest j;
    j.id = 1'000'000 + k;
    j.submitted_at = kNow - 100'000 + k;
    j.per_node.cpus = kMilliPerCpu;
    s.pending.push_back(std::move(j));
  }
  PlacementPasses(state, s);
}
BENCHMARK(BM_CpuJobsFillGpuNodes)->Unit(benchmark::kMillisecond)->UseRealTime();

// bench/scale.py once its jobs run: 100,000 jobs of 1 CPU (user "bench") running on 1,000 of the
// nodes, and one more job of 1 CPU: what a pass costs for the running jobs alone. The running jobs
// are allocated in a shuffled order, as a server that placed and ended jobs over time has them
// scattered over its heap (sweeping them in id order then misses the cache as it does there).
void BM_OneJobAmongRunningCpuJobs(benchmark::State& state) {
  Snapshot s = ThousandNodes();
  std::vector<int> order(kPending);
  for (int k = 0; k < kPending; ++k) order[static_cast<size_t>(k)] = k;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::vector<std::shared_ptr<const RunningJob>> running(kPending);
  for (int k : order) {
    RunningJob r;
    r.id = 1 + k;
    r.user = "bench";
    r.per_node.cpus = kMilliPerCpu;
    NodeView& node = s.nodes[static_cast<size_t>(k % 1000)];
    node.cpus_free -= kMilliPerCpu;
    r.placement.push_back({node.name, 0, {}});
    r.started_at = kNow - 1000;
    running[static_cast<size_t>(k)] = std::make_shared<const RunningJob>(std::move(r));
  }
  s.running = std::move(running);
  JobRequest job;
  job.id = 5'000'000;
  job.user = "bench";
  job.submitted_at = kNow;
  job.per_node.cpus = kMilliPerCpu;
  s.pending = {job};
  OneJobPasses(state, s);
}
BENCHMARK(BM_OneJobAmongRunningCpuJobs)->Unit(benchmark::kMicrosecond)->UseRealTime();

void FullClusterNothingFits(benchmark::State& state, bool reserved) {
  Snapshot s = FullCluster(/*priority=*/10);  // above every pending job: nobody may preempt
  s.pending = MakeQueue(kPending, 2);
  if (reserved) AddReservations(s);
  FreedPasses(state, s);
}
void BM_FullClusterNothingFits(benchmark::State& state) { FullClusterNothingFits(state, false); }
void BM_Reserved_FullClusterNothingFits(benchmark::State& state) {
  FullClusterNothingFits(state, true);
}
BENCHMARK(BM_FullClusterNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();

// Every GPU taken by priority-0 jobs, and the queue's priorities 1-3 outrank them: the pass evicts
// its way through the cluster (every preemption scans the nodes for the cheapest victims).
void BM_FullClusterMassPreemption(benchmark::State& state) {
  Snapshot s = FullCluster(/*priority=*/0);
  s.pending = MakeQueue(kPending, 2);
  FreedPasses(state, s);
}
BENCHMARK(BM_FullClusterMassPreemption)->Unit(benchmark::kMillisecond)->UseRealTime();

void OneJobIntoBusyCluster(benchmark::State& state, bool reserved) {
  Snapshot s = BusyCluster();
  if (reserved) AddReservations(s);
  JobRequest job;
  job.id = 5'000'000;
  job.priority = 1;
  job.submitted_at = kNow;
  job.per_node = PerNode("H100", 2);
  s.pending = {job};
  OneJobPasses(state, s);
}
void BM_OneJobIntoBusyCluster(benchmark::State& state) { OneJobIntoBusyCluster(state, false); }
void BM_Reserved_OneJobIntoBusyCluster(benchmark::State& state) {
  OneJobIntoBusyCluster(state, true);
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

// ---- MIG slices ----
//
// bench/scale.py's 1,000 nodes of 8 GPUs, whole or sliced. Sliced: GPUs 4-7 of every node are in
// MIG mode, seven 1g.10gb slices each, offered as devices of their own (agent/mig.h: index 100 x
// (GPU + 1) + position, type "H100-1g.10gb"), so a node has 4 + 28 devices. Each queue holds
// 100,000 one-device jobs of the nodes' types (70% H100), and on the sliced cluster 7 of 8 ask for
// a slice, as its devices are; the whole pass places 8,000 and the sliced one 32,000. Compared per
// placement (what a device more costs a placement), and full with nothing fitting (what 32 devices
// a node cost the scan that finds nothing).

constexpr int kSlicedGpus = 4;
constexpr int kSlicesPerGpu = 7;

Snapshot SlicedNodes(bool sliced, bool full) {
  Snapshot s = ThousandNodes();
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    NodeView& n = s.nodes[i];
    if (sliced) {
      n.gpus.resize(kGpusPerNode - kSlicedGpus);
      for (int g = kGpusPerNode - kSlicedGpus; g < kGpusPerNode; ++g) {
        for (int k = 0; k < kSlicesPerGpu; ++k) {
          n.gpus.push_back(
              {100 * (g + 1) + k, GpuTypeOf(static_cast<int>(i)) + "-1g.10gb", kMilliPerGpu});
        }
      }
    }
    if (full) {
      for (Device& d : n.gpus) d.free = 0;
    }
  }
  return s;
}

std::vector<JobRequest> OneDeviceQueue(bool sliced) {
  std::mt19937 rng(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<JobRequest> jobs;
  jobs.reserve(kPending);
  for (int k = 0; k < kPending; ++k) {
    JobRequest j;
    j.id = 1'000'000 + k;
    j.priority = pick(0, 3);
    j.submitted_at = kNow - 100'000 + k;
    std::string type = pick(0, 9) < 7 ? "H100" : "A100";
    if (sliced && pick(0, 7) < 7) type += "-1g.10gb";
    j.per_node = PerNode(type, 1);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

void SlicePasses(benchmark::State& state, bool sliced, bool full) {
  Snapshot s = SlicedNodes(sliced, full);
  s.now = kNow;
  s.pending = OneDeviceQueue(sliced);
  PlacementPasses(state, s);
}
void BM_WholeGpus_OneDevicePlacements(benchmark::State& state) { SlicePasses(state, false, false); }
void BM_Slices_OneDevicePlacements(benchmark::State& state) { SlicePasses(state, true, false); }
void BM_WholeGpus_FullNothingFits(benchmark::State& state) { SlicePasses(state, false, true); }
void BM_Slices_FullNothingFits(benchmark::State& state) { SlicePasses(state, true, true); }
BENCHMARK(BM_WholeGpus_OneDevicePlacements)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Slices_OneDevicePlacements)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WholeGpus_FullNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Slices_FullNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();

// The control for the sliced nothing-fits pass: whole GPUs only, but four types as the sliced
// cluster has (GPUs 4-7 of each node typed "<type>-b"), and the sliced queue's mix of types. What
// costs the same here as sliced is the number of types (and failing shapes), not slices.
void BM_WholeFourTypes_FullNothingFits(benchmark::State& state) {
  Snapshot s = SlicedNodes(false, true);
  for (NodeView& n : s.nodes) {
    for (size_t d = kGpusPerNode - kSlicedGpus; d < n.gpus.size(); ++d)
      n.gpus[d].type += "-1g.10gx";
  }
  s.now = kNow;
  s.pending = OneDeviceQueue(true);
  for (JobRequest& j : s.pending) {
    if (const size_t dash = j.per_node.gpu_type.find('-'); dash != std::string::npos) {
      j.per_node.gpu_type = j.per_node.gpu_type.substr(0, dash) + "-1g.10gx";
    }
  }
  PlacementPasses(state, s);
}
BENCHMARK(BM_WholeFourTypes_FullNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- Topology levels ----
//
// The 10,000 nodes in three levels: block (1,000 nodes each), rack (16) and switch (4), labelled
// block=b0..b9, rack=r0..r624, switch=s0..s3 (a switch named within its rack). The queue: 5,000
// gangs of 2-64 nodes x 8 GPUs of the node's type, a third requiring one rack (those of at most 16
// nodes; the rest one block), a third requiring one block, a third requiring nothing (preferring
// switches, as every gang does). Passes with and without --topology-levels block,rack,switch on the
// same snapshot (without: the plain gang placement, best fit node by node); the target is the
// topology-aware pass within 1.5x of the plain one. On an empty cluster (~300 gangs placed, the
// rest failing once per shape) and on a cluster 90% full (~90 placed).

Snapshot TopologyCluster(bool busy) {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    NodeView& n = s.nodes[i];
    n.labels["block"] = "b" + std::to_string(i / 1000);
    n.labels["switch"] = "s" + std::to_string(i % kNodesPerRack / 4);
  }
  if (busy) {
    std::mt19937 rng(11);
    JobId next = 1;
    for (int i = 0; i < kNodes; ++i) {
      if (std::uniform_int_distribution<int>(0, 9)(rng) != 0)
        Fill(s, i, kGpusPerNode, 0, next, rng);
    }
  }
  std::mt19937 rng(12);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int k = 0; k < 5'000; ++k) {
    JobRequest j;
    j.id = 1'000'000 + k;
    j.priority = pick(0, 3);
    j.submitted_at = kNow - 100'000 + k;
    j.num_nodes = pick(2, 64);
    j.per_node = PerNode(pick(0, 9) < 7 ? "H100" : "A100", kGpusPerNode);
    const int how = pick(0, 2);
    if (how == 0) j.topology.required = j.num_nodes <= kNodesPerRack ? 1 : 0;
    if (how == 1) j.topology.required = 0;
    s.pending.push_back(std::move(j));
  }
  return s;
}

void TopologyPasses(benchmark::State& state, bool levels, bool busy, bool reserved = false) {
  Snapshot s = TopologyCluster(busy);
  if (reserved) AddReservations(s);
  Config config;
  config.preemption = false;
  if (levels) config.topology_levels = {"block", "rack", "switch"};
  PassResult last;
  for (auto _ : state) {
    last = Schedule(s, config);
    benchmark::DoNotOptimize(last);
  }
  Report(state, last);
}
void BM_PlainGangs_Empty(benchmark::State& state) { TopologyPasses(state, false, false); }
void BM_TopologyGangs_Empty(benchmark::State& state) { TopologyPasses(state, true, false); }
void BM_PlainGangs_Busy(benchmark::State& state) { TopologyPasses(state, false, true); }
void BM_TopologyGangs_Busy(benchmark::State& state) { TopologyPasses(state, true, true); }
BENCHMARK(BM_PlainGangs_Empty)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TopologyGangs_Empty)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlainGangs_Busy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TopologyGangs_Busy)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_Reserved_TopologyGangs_Busy(benchmark::State& state) {
  TopologyPasses(state, true, true, /*reserved=*/true);
}

// ---- Fair share ----
//
// The same clusters and queues, owned: 200 users (user-000..199) in 20 teams (team-00..19, ten
// users each). Team t weighs 1 + t % 3 and has a nominal quota per GPU type in proportion to
// 1 + 7t % 5; teams with t % 5 == 4 have no A100 quota and teams with t % 7 == 3 no H100 quota. The
// quotas of a type sum to 101% of the cluster's GPUs of that type. Borrow limits: teams with
// t % 4 == 1 may borrow a quarter of their quota of each type; team-02 and team-06 may not borrow
// A100 at all (limit 0); the rest have none (unlimited). Every user has decayed usage (1-2000
// GPU-hours; a team's is its users' sum); every tenth user has max_running_gpus = 64. The pending
// queue is the plain benchmarks' queue (same shapes, priorities and ids), submitted in sweeps:
// runs of 1-100 consecutive jobs, each run by a random user, so every user's jobs interleave with
// everyone's. H100-seconds weigh 2, A100-seconds 1; the rest of Config is the default (admission
// charge 1h, reclaim 3 per team per minute).
constexpr int kTeams = 20;
constexpr int kUsers = 200;

std::string TeamName(int t) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "team-%02d", t);
  return buf;
}

std::string UserName(int u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "user-%03d", u);
  return buf;
}

int TeamOfUser(int u) { return u / (kUsers / kTeams); }

// GPUs of each type in the cluster.
std::map<std::string, int64_t> Capacity() {
  std::map<std::string, int64_t> cap;
  for (int i = 0; i < kNodes; ++i) cap[GpuTypeOf(i)] += kGpusPerNode;
  return cap;
}

std::vector<TeamView> MakeTeams() {
  const std::map<std::string, int64_t> cap = Capacity();
  auto has_quota = [](int t, const std::string& type) {
    return type == "A100" ? t % 5 != 4 : t % 7 != 3;
  };
  std::vector<TeamView> teams(kTeams);
  for (const auto& [type, gpus] : cap) {
    int share_sum = 0;
    for (int t = 0; t < kTeams; ++t) {
      if (has_quota(t, type)) share_sum += 1 + (7 * t) % 5;
    }
    for (int t = 0; t < kTeams; ++t) {
      if (!has_quota(t, type)) continue;
      const int64_t quota =
          static_cast<int64_t>(1.01 * static_cast<double>(gpus) * (1 + (7 * t) % 5) / share_sum);
      teams[static_cast<size_t>(t)].quota[type] = quota * kMilliPerGpu;
      if (t % 4 == 1) teams[static_cast<size_t>(t)].borrow_limit[type] = quota / 4 * kMilliPerGpu;
    }
  }
  teams[2].borrow_limit["A100"] = 0;
  teams[6].borrow_limit["A100"] = 0;
  for (int t = 0; t < kTeams; ++t) {
    teams[static_cast<size_t>(t)].name = TeamName(t);
    teams[static_cast<size_t>(t)].weight = 1 + t % 3;
  }
  return teams;
}

std::vector<UserView> MakeUsers(std::vector<TeamView>& teams) {
  std::mt19937 rng(12);
  std::vector<UserView> users;
  for (int u = 0; u < kUsers; ++u) {
    UserView v;
    v.name = UserName(u);
    v.team = TeamName(TeamOfUser(u));
    v.usage = std::uniform_int_distribution<int>(1, 2000)(rng) * 3600.0;
    if (u % 10 == 9) v.max_running_gpus = 64 * kMilliPerGpu;
    teams[static_cast<size_t>(TeamOfUser(u))].usage += v.usage;
    users.push_back(std::move(v));
  }
  return users;
}

Config FairConfig() {
  Config c;
  c.gpu_weights = {{"A100", 1.0}, {"H100", 2.0}};
  return c;
}

// Teams, users, and the pending jobs' owners, in sweeps (see above).
void AddOwners(Snapshot& s) {
  s.teams = MakeTeams();
  s.users = MakeUsers(s.teams);
  std::mt19937 rng(13);
  size_t k = 0;
  while (k < s.pending.size()) {
    const size_t run = static_cast<size_t>(std::uniform_int_distribution<int>(1, 100)(rng));
    const std::string user = UserName(std::uniform_int_distribution<int>(0, kUsers - 1)(rng));
    for (size_t end = std::min(k + run, s.pending.size()); k < end; ++k) s.pending[k].user = user;
  }
}

// Gives every running job an owner (a random user of the chosen team).
// kWithinQuota: per GPU type, the running jobs in order fill team after team up to its quota, so
// no team borrows and nobody may reclaim (the quotas exceed the cluster by 1%, enough for all).
// kSomeOverQuota: each job goes to a random team, in proportion to its quota times 0.5, 1 or 1.5
// (t-dependent; 1% of the type's capacity for a team without a quota of it), so that some teams
// are over their quota (borrowing) and others under it (they may reclaim).
enum class Owners { kWithinQuota, kSomeOverQuota };
void OwnRunning(Snapshot& s, Owners how) {
  std::mt19937 rng(14);
  auto user_of = [&](int team) {
    return UserName(team * (kUsers / kTeams) +
                    std::uniform_int_distribution<int>(0, kUsers / kTeams - 1)(rng));
  };
  const std::map<std::string, int64_t> cap = Capacity();
  if (how == Owners::kWithinQuota) {
    std::map<std::string, std::pair<int, MilliGpu>> fill;  // type -> (team, what it holds)
    for (auto& view : s.running) {
      RunningJob& r = Mutable(view);
      auto& [team, held] = fill[r.per_node.gpu_type];
      const MilliGpu gpus = r.per_node.gpu_milli * static_cast<MilliGpu>(r.placement.size());
      auto quota = [&](int t) {
        const auto& q = s.teams[static_cast<size_t>(t)].quota;
        auto it = q.find(r.per_node.gpu_type);
        return it == q.end() ? MilliGpu{0} : it->second;
      };
      while (team < kTeams && held + gpus > quota(team)) {
        ++team;
        held = 0;
      }
      if (team == kTeams) {
        std::fprintf(stderr, "OwnRunning: the quotas do not cover the cluster\n");
        std::abort();
      }
      held += gpus;
      r.user = user_of(team);
    }
    return;
  }
  std::map<std::string, std::discrete_distribution<int>> pick;
  for (const auto& [type, gpus] : cap) {
    std::vector<double> w;
    for (int t = 0; t < kTeams; ++t) {
      const auto& q = s.teams[static_cast<size_t>(t)].quota;
      auto it = q.find(type);
      const double factor = 0.5 * (1 + (2 * t + 1) % 3);
      w.push_back(it == q.end() ? 0.01 * static_cast<double>(gpus)
                                : factor * static_cast<double>(it->second) / kMilliPerGpu);
    }
    pick[type] = std::discrete_distribution<int>(w.begin(), w.end());
  }
  for (auto& view : s.running) {
    RunningJob& r = Mutable(view);
    r.user = user_of(pick[r.per_node.gpu_type](rng));
  }
}

void CountReclaims(benchmark::State& state, const PassResult& last) {
  int reclaims = 0;
  for (const PreemptDecision& d : last.preemptions) reclaims += d.reclaim ? 1 : 0;
  state.counters["reclaims"] = reclaims;
}

// Times Schedule() on `s` as the plain benchmarks do (freeing the result is not timed).
void FairPasses(benchmark::State& state, const Snapshot& s, bool count_placements = false) {
  const Config config = FairConfig();
  PassResult last;
  int64_t placed = 0;
  for (auto _ : state) {
    PassResult result = Schedule(s, config);
    placed += static_cast<int64_t>(result.placements.size());
    state.PauseTiming();
    last = std::move(result);
    state.ResumeTiming();
  }
  if (count_placements) state.SetItemsProcessed(placed);
  state.counters["running"] = static_cast<double>(s.running.size());
  Report(state, last);
  CountReclaims(state, last);
}

void BM_FairShare_EmptyClusterPlacements(benchmark::State& state) {
  Snapshot s;
  s.now = kNow;
  s.nodes = MakeNodes();
  s.pending = MakeQueue(kPending, 1);
  AddOwners(s);
  FairPasses(state, s, /*count_placements=*/true);
}
BENCHMARK(BM_FairShare_EmptyClusterPlacements)->Unit(benchmark::kMillisecond)->UseRealTime();

// Nobody may preempt by priority, and every team runs within its quota: nobody may reclaim.
void BM_FairShare_FullClusterNothingFits(benchmark::State& state) {
  Snapshot s = FullCluster(/*priority=*/10);
  s.pending = MakeQueue(kPending, 2);
  AddOwners(s);
  OwnRunning(s, Owners::kWithinQuota);
  FairPasses(state, s);
}
BENCHMARK(BM_FairShare_FullClusterNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();

// As above, but some teams borrow: the teams under their quota reclaim, up to the rate limit
// (3 each), and every other in-quota job's waiting reason names the limit.
void BM_FairShare_FullClusterReclaimLimited(benchmark::State& state) {
  Snapshot s = FullCluster(/*priority=*/10);
  s.pending = MakeQueue(kPending, 2);
  AddOwners(s);
  OwnRunning(s, Owners::kSomeOverQuota);
  FairPasses(state, s);
}
BENCHMARK(BM_FairShare_FullClusterReclaimLimited)->Unit(benchmark::kMillisecond)->UseRealTime();

// The mass preemption, with teams: priority preempts only a job's own team's work or borrowed
// work, and teams under their quota reclaim (rate-limited).
void BM_FairShare_FullClusterMassPreemption(benchmark::State& state) {
  Snapshot s = FullCluster(/*priority=*/0);
  s.pending = MakeQueue(kPending, 2);
  AddOwners(s);
  OwnRunning(s, Owners::kSomeOverQuota);
  FairPasses(state, s);
}
BENCHMARK(BM_FairShare_FullClusterMassPreemption)->Unit(benchmark::kMillisecond)->UseRealTime();

// One job of one user into the busy cluster, whose running jobs belong to the 200 users: the
// queue's order is plain, but the pass still builds the teams' holdings from every running job.
void BM_FairShare_OneJobIntoBusyCluster(benchmark::State& state) {
  Snapshot s = BusyCluster();
  s.teams = MakeTeams();
  s.users = MakeUsers(s.teams);
  OwnRunning(s, Owners::kSomeOverQuota);
  JobRequest job;
  job.id = 5'000'000;
  job.user = UserName(0);
  job.priority = 1;
  job.submitted_at = kNow;
  job.per_node = PerNode("H100", 2);
  s.pending = {job};
  const Config config = FairConfig();
  PassResult last;
  for (auto _ : state) {
    last = Schedule(s, config);
    benchmark::DoNotOptimize(last);
  }
  state.counters["running"] = static_cast<double>(s.running.size());
  Report(state, last);
}
BENCHMARK(BM_FairShare_OneJobIntoBusyCluster)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The reservations' twins (AddReservations), after the benchmarks they are measured against.
BENCHMARK(BM_Reserved_EmptyClusterPlacements)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Reserved_FullClusterNothingFits)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Reserved_OneJobIntoBusyCluster)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Reserved_TopologyGangs_Busy)->Unit(benchmark::kMillisecond)->UseRealTime();

// The display reporter the command line asks for, which also keeps every run's real time and, at
// the end, prints each ratio of a benchmark to its baseline (fair share to plain, slices to whole
// GPUs): of medians (of the repetitions; one run: its time), per pass or per placement.
class RatioReporter : public benchmark::BenchmarkReporter {
 public:
  explicit RatioReporter(benchmark::BenchmarkReporter* inner) : inner_(inner) {}
  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      Times& t = times_[r.run_name.function_name];
      t.unit = r.time_unit;
      if (r.run_type == Run::RT_Iteration) {
        t.real.runs.push_back(r.GetAdjustedRealTime());
        t.cpu.runs.push_back(r.GetAdjustedCPUTime());
      } else if (r.aggregate_name == "median") {
        t.real.median = r.GetAdjustedRealTime();
        t.cpu.median = r.GetAdjustedCPUTime();
      }
      // From the runs themselves: the aggregates' counters are statistics of them (a cv is 0).
      if (auto placed = r.counters.find("placed");
          r.run_type == Run::RT_Iteration && placed != r.counters.end()) {
        t.placed = placed->second;
      }
    }
    inner_->ReportRuns(runs);
  }
  void Finalize() override {
    inner_->Finalize();
    // {benchmark, its baseline, target ratio (0: none), per placement (else per pass)}
    static const struct {
      const char* fair;
      const char* plain;
      double target;
      bool per_placement;
    } kPairs[] = {
        {"BM_FairShare_FullClusterNothingFits", "BM_FullClusterNothingFits", 1.5, false},
        {"BM_FairShare_FullClusterReclaimLimited", "BM_FullClusterNothingFits", 1.5, false},
        {"BM_FairShare_EmptyClusterPlacements", "BM_EmptyClusterPlacements", 1.5, false},
        {"BM_FairShare_FullClusterMassPreemption", "BM_FullClusterMassPreemption", 1.5, false},
        {"BM_FairShare_OneJobIntoBusyCluster", "BM_OneJobIntoBusyCluster", 0, false},
        {"BM_Slices_OneDevicePlacements", "BM_WholeGpus_OneDevicePlacements", 1.3, true},
        {"BM_Slices_FullNothingFits", "BM_WholeGpus_FullNothingFits", 1.3, false},
        {"BM_WholeFourTypes_FullNothingFits", "BM_WholeGpus_FullNothingFits", 0, false},
        {"BM_Slices_FullNothingFits", "BM_WholeFourTypes_FullNothingFits", 1.3, false},
        {"BM_TopologyGangs_Empty", "BM_PlainGangs_Empty", 1.5, false},
        {"BM_TopologyGangs_Busy", "BM_PlainGangs_Busy", 1.5, false},
        {"BM_Reserved_EmptyClusterPlacements", "BM_EmptyClusterPlacements", 1.2, false},
        {"BM_Reserved_FullClusterNothingFits", "BM_FullClusterNothingFits", 1.2, false},
        {"BM_Reserved_OneJobIntoBusyCluster", "BM_OneJobIntoBusyCluster", 1.2, false},
        {"BM_Reserved_TopologyGangs_Busy", "BM_TopologyGangs_Busy", 1.2, false},
    };
    bool header = false;
    for (const auto& p : kPairs) {
      const Times* fair = Find(p.fair);
      const Times* plain = Find(p.plain);
      if (fair == nullptr || plain == nullptr) continue;
      if (p.per_placement && (fair->placed <= 0 || plain->placed <= 0)) continue;
      if (!header) {
        std::cout << "\nbenchmark / its baseline, medians (real time; CPU time), per pass or "
                     "per placement:\n";
        header = true;
      }
      // Per placement: µs per job placed; per pass: ms.
      const double fair_div = p.per_placement ? fair->placed / 1e3 : 1.0;
      const double plain_div = p.per_placement ? plain->placed / 1e3 : 1.0;
      const double f =
          fair->real.Median() / benchmark::GetTimeUnitMultiplier(fair->unit) / fair_div;
      const double q =
          plain->real.Median() / benchmark::GetTimeUnitMultiplier(plain->unit) / plain_div;
      const double fc =
          fair->cpu.Median() / benchmark::GetTimeUnitMultiplier(fair->unit) / fair_div;
      const double qc =
          plain->cpu.Median() / benchmark::GetTimeUnitMultiplier(plain->unit) / plain_div;
      const double ratio = f / q;
      char line[256];
      std::snprintf(line, sizeof line,
                    "  %-40s %9.3f / %9.3f %s = %5.2fx; CPU %9.3f / %9.3f = %5.2fx", p.fair,
                    f * 1e3, q * 1e3, p.per_placement ? "us/placement" : "ms", ratio, fc * 1e3,
                    qc * 1e3, fc / qc);
      std::cout << line;
      if (p.target > 0) {
        std::cout << (ratio <= p.target ? "  (target <= " : "  (MISSED: target <= ") << p.target
                  << "x)";
      }
      std::cout << "\n";
    }
  }

 private:
  struct Series {
    std::vector<double> runs;
    double median = -1;
    double Median() const {
      if (runs.empty()) return median;
      std::vector<double> v = runs;
      std::sort(v.begin(), v.end());
      const size_t n = v.size();
      return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
  };
  struct Times {
    benchmark::TimeUnit unit = benchmark::kMillisecond;
    Series real;
    Series cpu;
    double placed = 0;  // the "placed" counter of its last run
  };
  const Times* Find(const std::string& name) const {
    auto it = times_.find(name);
    if (it == times_.end() || it->second.real.Median() < 0) return nullptr;
    return &it->second;
  }
  benchmark::BenchmarkReporter* inner_;
  std::map<std::string, Times> times_;
};

}  // namespace
}  // namespace berth::sched

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The library's own reporter (--benchmark_format): a static it owns.
  berth::sched::RatioReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
