#include "sched/node_fit.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace berth::sched {

std::string RequestProblem(const JobRequest& job) {
  const ResourceRequest& r = job.per_node;
  if (job.num_nodes < 1) return "num_nodes must be at least 1";
  if (r.cpus < 0 || r.memory < 0 || r.gpu_milli < 0) return "resources must not be negative";
  if (r.gpu_milli > 0 && r.gpu_type.empty()) return "a GPU request needs a GPU type";
  if (r.gpu_milli > kMilliPerGpu && r.gpu_milli % kMilliPerGpu != 0) {
    return "more than one GPU must be a whole number of GPUs";
  }
  return "";
}

bool InPoolAndSelector(const NodeView& node, const JobRequest& job) {
  if (!job.pool.empty() && node.pool != job.pool) return false;
  for (const auto& [key, value] : job.node_selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  return true;
}

namespace {

// Devices are addressed by their `index`, which need not match their position in NodeView::gpus.
std::optional<std::vector<GpuGrant>> PickDevices(const NodeView& node,
                                                 const ResourceRequest& request) {
  std::vector<GpuGrant> grants;
  if (!request.wants_gpu()) return grants;
  if (request.fractional_gpu()) {
    const Device* best = nullptr;
    for (const Device& d : node.gpus) {
      if (d.type != request.gpu_type || d.free < request.gpu_milli) continue;
      if (best == nullptr || d.free < best->free ||
          (d.free == best->free && d.index < best->index)) {
        best = &d;
      }
    }
    if (best == nullptr) return std::nullopt;
    grants.push_back({best->index, request.gpu_milli});
    return grants;
  }
  std::vector<int> whole;
  for (const Device& d : node.gpus) {
    if (d.type == request.gpu_type && d.free == kMilliPerGpu) whole.push_back(d.index);
  }
  const size_t needed = static_cast<size_t>(request.gpu_devices());
  if (whole.size() < needed) return std::nullopt;
  std::partial_sort(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(needed),
                    whole.end());
  for (size_t i = 0; i < needed; ++i) grants.push_back({whole[i], kMilliPerGpu});
  return grants;
}

}  // namespace

std::optional<NodeFit> FitOnNode(const NodeView& node, const ResourceRequest& request) {
  if (request.cpus > node.cpus_free || request.memory > node.memory_free) return std::nullopt;
  std::optional<std::vector<GpuGrant>> gpus = PickDevices(node, request);
  if (!gpus) return std::nullopt;
  NodeFit fit;
  fit.gpus = std::move(*gpus);
  fit.key.gpus_left = request.wants_gpu() ? FreeOfType(node, request.gpu_type) - request.gpu_milli
                                          : FreeOfAllTypes(node);
  fit.key.cpus_left = node.cpus_free - request.cpus;
  fit.key.memory_left = node.memory_free - request.memory;
  fit.key.node = node.name;
  return fit;
}

void TakeResources(NodeView& node, const ResourceRequest& request,
                   const std::vector<GpuGrant>& gpus) {
  node.cpus_free -= request.cpus;
  node.memory_free -= request.memory;
  for (const GpuGrant& g : gpus) {
    auto it = std::find_if(node.gpus.begin(), node.gpus.end(),
                           [&](const Device& d) { return d.index == g.index; });
    // A grant for a device the node lacks means the pass's own bookkeeping is broken.
    if (it == node.gpus.end()) std::abort();
    it->free -= g.milli;
  }
}

int DevicesOfType(const NodeView& node, const std::string& type) {
  return static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(),
                                        [&](const Device& d) { return d.type == type; }));
}

int WholeFreeDevices(const NodeView& node, const std::string& type) {
  return static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(), [&](const Device& d) {
    return d.type == type && d.free == kMilliPerGpu;
  }));
}

MilliGpu LargestDeviceFree(const NodeView& node, const std::string& type) {
  MilliGpu best = 0;
  for (const Device& d : node.gpus) {
    if (d.type == type) best = std::max(best, d.free);
  }
  return best;
}

MilliGpu FreeOfType(const NodeView& node, const std::string& type) {
  MilliGpu sum = 0;
  for (const Device& d : node.gpus) {
    if (d.type == type) sum += d.free;
  }
  return sum;
}

MilliGpu FreeOfAllTypes(const NodeView& node) {
  MilliGpu sum = 0;
  for (const Device& d : node.gpus) sum += d.free;
  return sum;
}

}  // namespace berth::sched
