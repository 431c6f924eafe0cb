// CpuPins: which of a node's CPUs each rank pinned with resources.cpu_binding holds, by rank key,
// from its launch until its exit is seen — so that two pinned ranks never share a CPU. Pin picks
// whole cores first (supervise/cpu_set.h) and, when too few are free, says what is free and what
// the other ranks hold.
//
// Thread-safe: its own lock. Configure before the agent's threads start.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace berth {

class CpuPins {
 public:
  // The CPUs the agent may run its jobs on, and their physical cores (cpu -> core id).
  void Configure(std::vector<int> node_cpus, std::map<int, std::string> cores) EXCLUDES(mu_);
  // Pins `count` CPUs for rank `key` (again: its earlier pins are free to it): all of them from
  // `near` (the CPUs near its GPUs, NodeGpus::NearCpus) where that many are free there, else
  // anywhere.
  Result<std::vector<int>> Pin(const std::string& key, int count, const std::vector<int>& near = {})
      EXCLUDES(mu_);
  // A rank found running at start, with the CPUs its run plan pinned.
  void Adopt(const std::string& key, std::vector<int> cpus) EXCLUDES(mu_);
  // Rank `key`'s processes are gone: its CPUs are free.
  void Release(const std::string& key) EXCLUDES(mu_);
  // The CPUs rank `key` holds (empty when none).
  std::vector<int> Of(const std::string& key) const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::vector<int> node_cpus_ GUARDED_BY(mu_);
  std::map<int, std::string> cores_ GUARDED_BY(mu_);
  std::map<std::string, std::vector<int>> pinned_ GUARDED_BY(mu_);
};

}  // namespace berth
