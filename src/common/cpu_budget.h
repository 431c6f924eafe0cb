// How many CPUs this process may really use: the smallest of the CPU affinity mask, the cgroup (v2
// or v1) CPU quota, and the online CPU count. The server sizes its worker threads from this, not
// from the host's core count (SkyPilot #4885: 128 workers on a machine that granted 10 cores made
// start-up time out). Thread-safe; reads /sys and /proc each call.
#pragma once

#include <optional>
#include <string>

namespace berth {

struct CpuBudget {
  int affinity = 0;             // CPUs in the affinity mask
  std::optional<double> quota;  // cgroup quota in CPUs, if limited
  int usable = 1;               // min of the above, rounded up, at least 1
};

CpuBudget ReadCpuBudget();
// Parses a cgroup v2 "cpu.max" line ("max 100000" or "150000 100000"). nullopt when unlimited or
// malformed.
std::optional<double> ParseCgroupV2CpuMax(const std::string& text);

}  // namespace berth
