#include "agent/cpu_pins.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

#include "supervise/cpu_set.h"

namespace berth {

void CpuPins::Configure(std::vector<int> node_cpus, std::map<int, std::string> cores) {
  MutexLock lock(mu_);
  node_cpus_ = std::move(node_cpus);
  cores_ = std::move(cores);
}

Result<std::vector<int>> CpuPins::Pin(const std::string& key, int count,
                                      const std::vector<int>& near) {
  MutexLock lock(mu_);
  std::set<int> taken;
  for (const auto& [other, cpus] : pinned_) {
    if (other != key) taken.insert(cpus.begin(), cpus.end());
  }
  std::optional<std::vector<int>> picked;
  if (!near.empty()) {
    std::set<int> far = taken;  // what it may not take to stay near its GPUs
    for (int cpu : node_cpus_) {
      if (!std::binary_search(near.begin(), near.end(), cpu)) far.insert(cpu);
    }
    picked = PickCpus(node_cpus_, far, count, cores_);
  }
  if (!picked) picked = PickCpus(node_cpus_, taken, count, cores_);
  if (!picked) {
    std::vector<int> free;
    for (int cpu : node_cpus_) {
      if (!taken.count(cpu)) free.push_back(cpu);
    }
    // The server counts CPUs, not which ones: a node that offers more CPUs (--cpus) than it has
    // can leave too few.
    return Status::Unavailable(fmt::format(
        "resources.cpu_binding: cores: {} CPU(s) asked, {} free of this node's {} (free: {}; "
        "pinned by other jobs: {})",
        count, free.size(), node_cpus_.size(), free.empty() ? "none" : FormatCpuList(free),
        taken.empty() ? "none" : FormatCpuList({taken.begin(), taken.end()})));
  }
  pinned_[key] = *picked;
  return *picked;
}

void CpuPins::Adopt(const std::string& key, std::vector<int> cpus) {
  MutexLock lock(mu_);
  pinned_[key] = std::move(cpus);
}

void CpuPins::Release(const std::string& key) {
  MutexLock lock(mu_);
  pinned_.erase(key);
}

std::vector<int> CpuPins::Of(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = pinned_.find(key);
  return it == pinned_.end() ? std::vector<int>{} : it->second;
}

}  // namespace berth
