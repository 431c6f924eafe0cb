// CPU sets for `resources.cpu_binding: cores`: the node's CPUs, their physical cores, and which
// ones a pinned rank gets. The agent picks (agent/agent.h, PinCpus); the rank's cgroup holds it
// (supervise/cgroup.h, RankLimits::cpus). docs/security.md "Isolation".
//
// Thread-safety: pure functions, except ReadCoreIds and AllowedCpus, which read the system and
// are reentrant.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace berth {

// "0-3,6" (the kernel's list format, as cpuset.cpus and Cpus_allowed_list write it).
std::string FormatCpuList(const std::vector<int>& cpus);
// The CPUs of such a list, ascending; nullopt when it is not one.
std::optional<std::vector<int>> ParseCpuList(const std::string& text);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

// Which physical core each of `cpus` is on: "<package>:<core>" from
// <sys_cpu_dir>/cpuN/topology/{physical_package_id,core_id} ("/sys/devices/system/cpu" on a real
// host). A CPU whose topology cannot be read is a core of its own.
std::map<int, std::string> ReadCoreIds(const std::string& sys_cpu_dir,
                                       const std::vector<int>& cpus);

// `count` CPUs of `cpus` not in `taken`: whole physical cores first (all of a core's hyperthreads
// together, so that two pinned jobs do not share a core's caches and execution units), then the
// rest; lowest numbers first within each. nullopt when fewer than `count` are free.
std::optional<std::vector<int>> PickCpus(const std::vector<int>& cpus, const std::set<int>& taken,
                                         int count, const std::map<int, std::string>& core_of);

}  // namespace berth
