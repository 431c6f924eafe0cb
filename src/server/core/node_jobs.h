// NodeJobs: which jobs in memory may be placed on each node, so that what concerns one node (its
// registration's reconcile, its lease expiring, a GPU found faulty) looks at that node's jobs, not
// at every job in memory. At a million jobs on 10,000 nodes, a restart's 10,000 re-registrations
// walked every job each (10^10 steps), and every expired lease another million: the nodes of a
// restarted server expired one every ~80 ms, all under the Core's lock (bench/README.md, session
// 41).
//
// Entries may be stale (a job since requeued, placed elsewhere, or gone from memory): callers check
// each job's own placement, as they did when they walked every job. An entry is never missing for
// a job whose placement names the node: each placement is added when it is set (Lifecycle::Place, a
// load, a held ended attempt), and an undo asks for a rebuild. The stale ones are bounded: past
// kSlack entries per job in memory (plus kFloor), the next look rebuilds the index from the jobs.
//
// Thread-safety: none; the Core owns one and guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/resources.h"

namespace berth {

class NodeJobs {
 public:
  static constexpr size_t kSlack = 4;
  static constexpr size_t kFloor = 4096;

  // Job `job` may now be on each node of `placement`.
  void Add(int64_t job, const Placement& placement);
  // Forgets everything; the caller adds every job's placement again (a rebuild).
  void Clear();
  // A rebuild is due before the next look: asked for (MarkStale, e.g. after an undo), or more
  // stale entries than the bound allows for `jobs_in_memory`.
  bool NeedsRebuild(size_t jobs_in_memory) const;
  void MarkStale() { stale_ = true; }
  // The jobs that may be on `node`, by id, each once (stale ones included: check each).
  std::vector<int64_t> Of(const std::string& node);
  size_t entries() const { return entries_; }

 private:
  std::unordered_map<std::string, std::vector<int64_t>> by_node_;
  size_t entries_ = 0;
  bool stale_ = false;
};

}  // namespace berth
