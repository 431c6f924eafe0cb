// Cgroups: what the node keeps of a placement's promise. Each job rank runs in a cgroup of its own,
// made by its supervisor (never by the job) under the supervisor's own cgroup, with the rank's
// limits written before any of its processes joins; the rank's processes join it between their
// clone and their exec, or on v2 are born in it (supervise/step.h), so no process of a job ever
// runs outside it. At the end the supervisor reads what the rank used and whether the kernel
// killed it for memory, kills what is left in it, and removes it. docs/security.md "Isolation"
// says what is enforced where.
//
// Three host layouts, told apart by DetectCgroups from /proc/self/cgroup and /proc/self/mountinfo:
//   v2     one unified hierarchy (production hosts: Debian 12, Ubuntu 22.04+, RHEL 9): memory.max,
//          memory.swap.max, memory.oom.group, cpu.max, pids.max, cpuset.cpus; a BPF device program
//          (supervise/device_filter.h); memory.peak, cpu.stat, memory.events; cgroup.kill.
//          Controllers are enabled in the supervisor's cgroup's subtree_control, the supervisor
//          moving itself into a leaf `supervisor` first where the kernel's no-internal-processes
//          rule asks it to.
//   v1     v1 controllers under <root>/<controller> (older hosts, and the hybrid layout of the
//          machines berth is built on): memory (limit, memsw, oom_control's oom_kill,
//          max_usage_in_bytes), cpu (CFS quota), pids, devices, cpuset; each only where the rank
//          has such a limit. A kill is a sweep of cgroup.procs.
//   none   no cgroup can be made (not root, a read-only cgroupfs): nothing is enforced, and the
//          reason says why.
// Every path is under a root given at detection ("/" on a real host), so that tests run the v2
// code against a fake cgroupfs tree in a temporary directory (tests/unit/agent/cgroup_test.cpp).
//
// Thread-safety: none needed; the supervisors that use it are single-threaded. The functions are
// reentrant.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace berth {

enum class CgroupLayout { kNone, kV1, kV2 };

// v2: the leaf below the agent's cgroup that its processes move into, so that the cgroup may
// enable controllers for the ranks' cgroups beside it (the no-internal-processes rule).
inline constexpr char kSupervisorLeaf[] = "supervisor";

// What this process's host offers.
struct CgroupHost {
  CgroupLayout layout = CgroupLayout::kNone;
  std::string reason;  // why kNone
  // v2: this process's cgroup directory.
  std::string unified_dir;
  // v1: controller ("memory", "cpu", "pids", "devices", "cpuset") -> this process's directory.
  std::map<std::string, std::string> v1_dirs;
  bool memsw = false;  // v1: swap is accounted (memory.memsw.*)
  // v2: of cpu, pids and cpuset, those this process's cgroup is not given (its cgroup.controllers
  // lacks them): ranks run without CPU limits, a process limit or CPU pinning.
  std::vector<std::string> undelegated;

  // "v2", "v1" or "none: REASON", as `berth nodes` shows it.
  std::string Describe() const;
};

// Reads the layout from the text of /proc/self/cgroup and /proc/self/mountinfo, with every mount
// point taken under `root` ("" for the real one). Checks that the directories found are writable.
CgroupHost DetectCgroupsFrom(const std::string& proc_self_cgroup, const std::string& mountinfo,
                             const std::string& root);
// This process's.
CgroupHost DetectCgroups();

// What a rank may use. Zero: no limit of that kind.
struct RankLimits {
  int64_t memory_bytes = 0;
  int64_t cpu_milli = 0;  // CFS quota (1000 is one CPU's time), and the rank's CPU weight
  int64_t pids_max = 0;
  // Character devices the rank may not open (major, minor): the node's other GPUs.
  std::vector<std::pair<int, int>> denied_devices;
  // The CPUs it is pinned to (resources.cpu_binding: cores); empty: not pinned.
  std::vector<int> cpus;
  // Not the rank's: the node's CPUs (1000 each), the CPU weight of the agent's cgroup, which holds
  // all its ranks (CpuWeightOf). 0: left as it is.
  int64_t node_cpu_milli = 0;

  bool empty() const {
    return memory_bytes == 0 && cpu_milli == 0 && pids_max == 0 && denied_devices.empty() &&
           cpus.empty();
  }
};

// What a rank used, read at its end (-1: unknown).
struct RankUsage {
  int64_t peak_memory_bytes = -1;
  int64_t oom_kills = 0;  // processes of it the kernel's OOM killer killed (any OOM)
  // Times it reached its own memory limit (v2 memory.events "oom"; v1 failcnt, or 1 when its peak
  // is at the limit).
  int64_t limit_hits = 0;
};

// How a step's child enters a rank's cgroup (supervise/step.h): it is born in `clone_into`, a
// cgroup2 directory (the v2 layout's; supervise/clone_into_cgroup.h), and joins each of `join`
// (cgroup.procs files) by writing "0" to it; where the kernel cannot start it in clone_into, it
// joins that one's cgroup.procs too, last.
struct CgroupEntry {
  std::string clone_into;         // empty: none
  std::vector<std::string> join;  // the other hierarchies'
};

// One rank's cgroup: a directory per hierarchy.
class RankCgroup {
 public:
  // Makes `name` (a relative path, e.g. "berth-1a2b/12.1.0") under `host`'s directories and writes
  // `limits`. Fails (naming the file and the kernel's error, and leaving nothing behind) when one
  // cannot be made or a limit cannot be written.
  static Result<RankCgroup> Create(const CgroupHost& host, const std::string& name,
                                   const RankLimits& limits);

  // Each v1 hierarchy's `tasks` (v2: its `cgroup.procs`): a single-threaded process joins by
  // writing "0" to each (a step's child does, before anything else: supervise/step.h). Not v1's
  // `cgroup.procs`, which moves a whole thread group: the kernel then write-locks every thread
  // group's membership (cgroup_threadgroup_rwsem), which waits for an RCU grace period while it
  // holds the cgroup mutex: joins and the pool's renames stalled 8-15 ms about once per hundred
  // jobs (measured on Linux 6.18; bench/README.md, session 39). A thread that moves itself is
  // spared that lock there; a kernel that takes it anyway is no slower than with cgroup.procs.
  std::vector<std::string> JoinFiles() const;
  // How a step's child enters it: on v2 born in its directory, on v1 by JoinFiles.
  CgroupEntry Entry() const;
  // The processes in it (read from the first hierarchy); ReadPids: nullopt when that cannot be
  // read.
  std::set<pid_t> Pids() const;
  std::optional<std::set<pid_t>> ReadPids() const;
  // SIGKILL to every process in it: cgroup.kill where there is one, else each process listed.
  void Kill() const;
  // What it used since it was made, or since it was last taken: on v1 reading its peak and
  // failure count resets them, and its OOM-kill count becomes the next reading's zero, so that a
  // rank that reuses it (RankCgroup::Recycle) starts from nothing; v2's cannot be reset (there is
  // no reuse on v2).
  RankUsage TakeUsage();
  // Removes the directories (once empty); quiet about what is gone already. False when one is
  // still in use (a process of it not yet reaped).
  bool Remove() const;

  // For reuse by another rank (supervise/cgroup_pool.h; v1 only, where cgroupfs can rename):
  // Recycle checks that an ended rank's cgroup, its usage taken (TakeUsage), is fit for another:
  // no process is left in it (not read again where `seen_empty`: the caller has just read it
  // empty and started nothing into it since) and at most `max_charged` bytes stay charged to it
  // (page cache, kernel objects its processes left).
  Status Recycle(int64_t max_charged, bool seen_empty = false) const;
  // Renames its directory in every hierarchy to `leaf` (the last part of a cgroup name; the
  // parents stay), all or none.
  Status Rename(const std::string& leaf);
  // Writes those of `limits` that differ from the ones it holds; `limits` must need the same
  // hierarchies and devices (FitsSameHierarchies).
  Status Rewrite(const RankLimits& limits);
  // Whether a cgroup made for `a` can hold `b` by Rewrite: the same hierarchies, the same denied
  // devices and pinned CPUs.
  static bool FitsSameHierarchies(const RankLimits& a, const RankLimits& b);

  const std::vector<std::string>& dirs() const { return dirs_; }
  const RankLimits& limits() const { return limits_; }

 private:
  CgroupLayout layout_ = CgroupLayout::kNone;
  std::vector<std::string> dirs_;               // v1: memory's first
  std::string memory_dir_, unified_dir_;        // unified_dir_: v2 only
  std::map<std::string, std::string> v1_dirs_;  // v1: controller -> its directory
  RankLimits limits_;                           // as written
  bool memsw_ = false;                          // v1: swap accounted (memory.memsw.limit_in_bytes)
  int64_t oom_kills_before_ = 0;  // v1: the OOM-kill count when its usage was last taken
};

// CPU weights, so that CPU time a busy machine shares out goes as the CPUs asked for: a rank's
// cgroup weighs its request, and the agent's cgroup (every rank of the node together) the node's
// CPUs, as Kubernetes weighs pods and its pods' cgroup. Without the second, the node's jobs
// together would weigh as much as any one process outside them (the agent's, the node supervisor's,
// any other), and get as little of a contended machine. v1 cpu.shares: 1024 per CPU (2..262144); v2
// cpu.weight: 100 per CPU (1..10000).
int64_t CpuSharesOf(int64_t cpu_milli);
int64_t CpuWeightOf(int64_t cpu_milli);

// The cgroup name of rank `key` (its job directory's name) of the agent whose state directory is
// `state_dir`: "berth-<FNV-1a of state_dir, 8 hex digits>/<key>". Several agents may share a cgroup
// (tests, several nodes on one machine); their state directories tell their ranks apart.
std::string AgentCgroupName(const std::string& state_dir);
std::string RankCgroupName(const std::string& state_dir, const std::string& key);

// The processes in the rank cgroup `name` (RankCgroupName) made on `host` by another process
// (the node supervisor); nullopt where the host has no cgroups, or that cgroup is not found.
std::optional<std::set<pid_t>> RankCgroupPids(const CgroupHost& host, const std::string& name);

// Removes the rank cgroups under `agent` (AgentCgroupName) that hold no process: those a node
// supervisor killed with -9 left behind. The kernel refuses to remove one in use.
void RemoveIdleRankCgroups(const CgroupHost& host, const std::string& agent);

// The reason an attempt that the kernel killed for memory ends with.
std::string OutOfMemoryReason(int64_t limit_bytes);

}  // namespace berth
