// RankCgroupPool: idle rank cgroups kept for the ranks that come next, on v1 hosts. Making a
// rank's cgroup in each hierarchy it uses and removing it afterwards is most of what isolation
// adds to a short job's launch (bench/isolation.py), and every removed memory cgroup leaves the
// kernel work to do in the background; renaming an idle one to the next rank's name costs a
// fraction of that. An ended rank's cgroup is kept only when nothing of it is left — no process,
// at most kMaxChargedToReuse bytes still charged to it (RankCgroup::Recycle) — and its peak and
// OOM count were reset as they were read (RankCgroup::TakeUsage), so the next rank's are its own.
// It is reused only by a rank whose limits need the same hierarchies, devices and CPUs
// (RankCgroup::FitsSameHierarchies), its memory, CPU and pids limits rewritten where they differ.
// Only v1: cgroupfs renames a v1 cgroup, not a cgroup2 one, so on v2 (and with no cgroups) every
// Take makes a new cgroup and nothing is kept.
//
// An idle cgroup keeps the name of the rank that ran in it last (`<agent cgroup>/<job dir>`, empty)
// until the next rank's name replaces it (one rename per hierarchy, at Take); the node
// supervisor's start and end remove idle ones with the other empty ones (RemoveIdleRankCgroups).
//
// Thread-safety: none; the node supervisor's one thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "supervise/cgroup.h"

namespace berth {

// What may stay charged to an ended rank's memory cgroup for another rank to reuse it: a short
// job leaves 0.4–0.6 MiB of kernel objects and page cache (measured on a v1 host). The next rank's
// peak memory counts it, as a fresh cgroup would count what that rank's own start charges.
inline constexpr int64_t kMaxChargedToReuse = 1 << 20;

// How many idle cgroups a node supervisor keeps: enough for a burst of short jobs on a large node
// to reuse rather than make. Each costs the kernel an empty memory cgroup (a few KiB per CPU), as
// a removed one does until the kernel frees it.
inline constexpr size_t kIdleRankCgroups = 256;

class RankCgroupPool {
 public:
  RankCgroupPool(CgroupHost host, size_t capacity);

  // The cgroup `name` (RankCgroupName) with `limits`: an idle one renamed to it where one fits,
  // else made (RankCgroup::Create, whose errors it returns).
  Result<RankCgroup> Take(const std::string& name, const RankLimits& limits);
  // An ended rank's cgroup, its processes killed: kept for a later Take when it can be, else
  // handed back for the caller to remove. `seen_empty`: as RankCgroup::Recycle's.
  std::optional<RankCgroup> Keep(RankCgroup cgroup, bool seen_empty = false);

  size_t idle() const { return idle_.size(); }
  uint64_t reused() const { return reused_; }  // Takes that renamed an idle cgroup

 private:
  CgroupHost host_;
  size_t capacity_;
  uint64_t reused_ = 0;
  std::vector<RankCgroup> idle_;  // the most recently kept last
};

}  // namespace berth
