// ResourceRequest: what one node of a job asks for. Shared vocabulary of spec/, sched/ and server/.
//
// A plain value type. `gpu_milli` is 0 when the job wants no GPU; below 1000 it is a share of one
// device (T4:0.5 -> 500); otherwise a whole number of devices times 1000 (V100:4 -> 4000).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/quantity.h"

namespace berth {

// The node_selector key that matches a node's name, not a label: {berth.node: gpu-7} places a job
// on gpu-7 only (Slurm's --nodelist of one node, Kubernetes' kubernetes.io/hostname). A label of
// that name on a node means nothing (sched/matching.cpp).
inline constexpr char kNodeNameSelector[] = "berth.node";

// A job that names no CPUs asks for half a CPU and no memory, as SkyPilot's job queue does.
constexpr MilliCpu kDefaultJobCpus = 500;

struct ResourceRequest {
  MilliCpu cpus = kDefaultJobCpus;
  Mib memory = 0;
  std::string gpu_type;  // empty when gpu_milli == 0
  MilliGpu gpu_milli = 0;

  bool wants_gpu() const { return gpu_milli > 0; }
  bool fractional_gpu() const { return gpu_milli > 0 && gpu_milli < kMilliPerGpu; }
  // Number of whole devices; 1 for a fractional request.
  int gpu_devices() const {
    return gpu_milli == 0
               ? 0
               : (gpu_milli < kMilliPerGpu ? 1 : static_cast<int>(gpu_milli / kMilliPerGpu));
  }
  bool operator==(const ResourceRequest&) const = default;
};

// "V100:4", "T4:0.5", or "-" for no GPU.
std::string FormatGpus(const std::string& type, MilliGpu milli);

}  // namespace berth

namespace berth {

// What a job got on one node: the devices (with the share of each) and the rank of that node in the
// job. CPUs and memory granted are the job's per-node request.
struct GpuGrant {
  int index = 0;          // device index on the node (what CUDA_VISIBLE_DEVICES lists)
  MilliGpu milli = 1000;  // 1000 for a whole device, less for a share
  bool operator==(const GpuGrant&) const = default;
};

struct NodeGrant {
  std::string node;
  int rank = 0;
  std::vector<GpuGrant> gpus;
  bool operator==(const NodeGrant&) const = default;
};

using Placement = std::vector<NodeGrant>;  // one entry per node of the job, in rank order

// Whether `placement` puts rank `rank` on `node` (kAnyRank: any of its ranks).
constexpr int kAnyRank = -1;
inline bool PlacedOn(const Placement& placement, const std::string& node, int rank = kAnyRank) {
  for (const NodeGrant& g : placement) {
    if (g.node == node && (rank == kAnyRank || g.rank == rank)) return true;
  }
  return false;
}

// What a job holds over all its nodes: its per-node request times the nodes it is placed on.
inline MilliGpu TotalGpuMilli(const ResourceRequest& per_node, const Placement& placement) {
  return per_node.gpu_milli * static_cast<MilliGpu>(placement.size());
}
inline MilliCpu TotalCpuMilli(const ResourceRequest& per_node, const Placement& placement) {
  return per_node.cpus * static_cast<MilliCpu>(placement.size());
}

// One GPU of a node, as its agent discovered or declared it: a whole GPU, or a MIG slice of one
// (agent/mig.h), which is a device of its own typed by its profile ("A100-3g.40gb").
struct GpuDevice {
  int index = 0;     // the device's index on the node: what grants name
  std::string type;  // "V100", "A100-3g.40gb"
  int parent = -1;   // a slice's GPU index; -1 for a whole GPU
  // Its place in the node's GPU topology (agent/gpu_topology.h, from `nvidia-smi topo -m` or the
  // agent's --gpu-topology): its NVLink island and PCIe switch as group numbers 1, 2, ... (0: not
  // connected that way to another GPU of the node, or unknown) and its NUMA node (-1: unknown). A
  // slice has its GPU's.
  int nvlink = 0;
  int pcie = 0;
  int numa = -1;
  bool slice() const { return parent >= 0; }
  int gpu() const { return slice() ? parent : index; }  // the GPU it is, or is a slice of
  bool operator==(const GpuDevice&) const = default;
};

// The GPU that device `index` of `devices` is on: a slice's parent, else the index itself. Health
// probes, and their faults, are about GPUs: a fault on a GPU is a fault of each of its slices.
inline int GpuOfDevice(const std::vector<GpuDevice>& devices, int index) {
  for (const GpuDevice& d : devices) {
    if (d.index == index) return d.gpu();
  }
  return index;
}

// What a MIG slice's device type says of its GPU ("A100-3g.40gb", agent/mig.h): the GPU's type and
// the compute slices of the seven a GPU has that it takes ("A100-3g.40gb" -> {"A100", 3};
// "H100-1c.3g.40gb" -> {"H100", 1}; "H100-1g.10gb-me" -> {"H100", 1}). nullopt for a type that is
// not a slice's ("A100", "RTX4090").
struct SliceShare {
  std::string gpu_type;
  int sevenths = 0;
  bool operator==(const SliceShare&) const = default;
};
std::optional<SliceShare> SliceShareOf(const std::string& type);

// The weight of one GPU-second of `type` (fair share and usage): the operator's for that type
// (`weights`: --gpu-weights), else, for a MIG slice, its GPU type's times its share of that GPU (a
// 3g.40gb slice of an A100 weighs 3/7 of an A100), else 1.
double GpuTypeWeight(const std::map<std::string, double>& weights, const std::string& type);

// "0,1,3": the CUDA_VISIBLE_DEVICES value for a grant.
std::string CudaVisibleDevices(const NodeGrant& grant);

}  // namespace berth
