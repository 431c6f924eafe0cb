#include "common/cpu_budget.h"

#include <sched.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/files.h"

namespace berth {
namespace {

std::optional<double> CgroupV1Quota() {
  auto quota = ReadFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  auto period = ReadFile("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  long q = std::atol(quota->c_str());
  long p = std::atol(period->c_str());
  if (q <= 0 || p <= 0) return std::nullopt;
  return static_cast<double>(q) / static_cast<double>(p);
}

}  // namespace

std::optional<double> ParseCgroupV2CpuMax(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  char* end = nullptr;
  long q = std::strtol(quota.c_str(), &end, 10);
  if (end == quota.c_str() || q <= 0) return std::nullopt;
  return static_cast<double>(q) / static_cast<double>(period);
}

CpuBudget ReadCpuBudget() {
  CpuBudget b;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) b.affinity = CPU_COUNT(&set);
  if (b.affinity <= 0) b.affinity = 1;
  if (auto v2 = ReadFile("/sys/fs/cgroup/cpu.max")) {
    b.quota = ParseCgroupV2CpuMax(*v2);
  } else {
    b.quota = CgroupV1Quota();
  }
  double usable = b.affinity;
  if (b.quota && *b.quota < usable) usable = *b.quota;
  b.usable = std::max(1, static_cast<int>(std::ceil(usable)));
  return b;
}

}  // namespace berth
