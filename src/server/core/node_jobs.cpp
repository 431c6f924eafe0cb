#include "server/core/node_jobs.h"

#include <algorithm>

namespace berth {

void NodeJobs::Add(int64_t job, const Placement& placement) {
  for (const NodeGrant& grant : placement) {
    by_node_[grant.node].push_back(job);
    ++entries_;
  }
}

void NodeJobs::Clear() {
  by_node_.clear();
  entries_ = 0;
  stale_ = false;
}

bool NodeJobs::NeedsRebuild(size_t jobs_in_memory) const {
  return stale_ || entries_ > kSlack * jobs_in_memory + kFloor;
}

std::vector<int64_t> NodeJobs::Of(const std::string& node) {
  auto it = by_node_.find(node);
  if (it == by_node_.end()) return {};
  // In id order and each once (a job placed on the node again is added again), as a walk over
  // every job would meet them; duplicates found here are dropped for good.
  std::vector<int64_t>& ids = it->second;
  std::sort(ids.begin(), ids.end());
  const size_t before = ids.size();
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  entries_ -= before - ids.size();
  return ids;
}

}  // namespace berth
