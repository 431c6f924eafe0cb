// Sweeping the running jobs of a snapshot: each RunningJob is an allocation of its own (the server
// shares them between passes), so a loop over 100,000 of them misses the cache once per job and
// waits for each miss in turn. Prefetching a few jobs ahead lets those misses overlap
// (bench/sched_bench.cpp OneJobAmongRunningCpuJobs). Internal to sched/. Pure functions.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "sched/cluster.h"

namespace berth::sched::internal {

// How many jobs ahead of the one in hand a sweep prefetches.
inline constexpr size_t kRunningPrefetchAhead = 8;

// Asks for running[k]'s cache lines (nothing when k is past the end).
inline void PrefetchRunning(const std::vector<std::shared_ptr<const RunningJob>>& running,
                            size_t k) {
  if (k >= running.size()) return;
  const char* p = reinterpret_cast<const char*>(running[k].get());
  for (size_t off = 0; off < sizeof(RunningJob); off += 64) __builtin_prefetch(p + off);
}

}  // namespace berth::sched::internal
