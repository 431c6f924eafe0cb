#include "sched/matching.h"

#include <algorithm>

#include "common/strings.h"

namespace berth::sched {

std::string RequestProblem(const JobRequest& job) {
  const ResourceRequest& r = job.per_node;
  if (job.num_nodes < 1) return "num_nodes must be at least 1";
  if (r.cpus < 0 || r.memory < 0 || r.gpu_milli < 0) return "resources must not be negative";
  if (r.gpu_milli > 0 && r.gpu_type.empty()) return "a GPU request needs a GPU type";
  if (r.gpu_milli > kMilliPerGpu && r.gpu_milli % kMilliPerGpu != 0) {
    return "more than one GPU must be a whole number of GPUs";
  }
  if (job.topology.required == kUndefinedLevel || job.topology.preferred == kUndefinedLevel) {
    return "its placement.topology names a level this cluster does not define (berth server "
           "--topology-levels)";
  }
  return "";
}

bool InPoolAndSelector(const NodeView& node, const JobRequest& job) {
  if (!job.pool.empty() && node.pool != job.pool) return false;
  for (const auto& [key, value] : job.node_selector) {
    if (key == kNodeNameSelector) {
      if (node.name != value) return false;
      continue;
    }
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  for (const std::string& path : job.container_mounts) {
    if (std::none_of(node.container_mounts.begin(), node.container_mounts.end(),
                     [&](const std::string& root) { return IsPathUnder(path, root); })) {
      return false;
    }
  }
  return true;
}

int DevicesOfType(const NodeView& node, const std::string& type) {
  return static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(),
                                        [&](const Device& d) { return d.type == type; }));
}

}  // namespace berth::sched
