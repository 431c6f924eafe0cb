// GPU topology inside a node: which GPUs share an NVLink island, a PCIe switch and a NUMA node, and
// the CPUs near each, read from `nvidia-smi topo -m` (on a node with discovered GPUs) or from a
// file in that format (the agent's --gpu-topology, for declared GPUs: tests and demos). The
// scheduler takes a job's GPUs from the best-connected free set (sched/node_state.h); a rank pinned
// with resources.cpu_binding gets CPUs near its GPUs first. docs/topology.md.
//
// The matrix's cells: X (itself), NV# (# bonded NVLinks), PIX / PXB (through one / several PCIe
// bridges: one switch), PHB (through the host bridge), NODE (across host bridges of one NUMA node),
// SYS (across NUMA nodes). Islands are the connected sets of NV# links; switches those of PIX and
// PXB; a GPU's NUMA node is its "NUMA Affinity" column where that says one, else the set of GPUs
// joined by anything but SYS.
//
// Thread-safety: pure functions (agent/discovery.h runs nvidia-smi).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/resources.h"
#include "common/status.h"

namespace berth {

struct GpuLinks {
  int nvlink = 0;         // island number (1, 2, ...), 0: linked by NVLink to no other GPU
  int pcie = 0;           // switch number, 0: shares a PCIe switch with no other GPU
  int numa = -1;          // NUMA node, -1: unknown
  std::vector<int> cpus;  // the CPUs near it ("CPU Affinity"), ascending; empty: unknown
  bool operator==(const GpuLinks&) const = default;
};

using GpuTopology = std::map<int, GpuLinks>;  // by GPU index

// Parses `nvidia-smi topo -m`'s output (tab-separated columns as nvidia-smi prints them, ANSI
// underlining and the legend ignored). Errors name the line: no GPU columns, a row of the wrong
// length, a cell that is no link type, a GPU listed twice.
Result<GpuTopology> ParseTopoMatrix(const std::string& text);

// Sets each GPU's nvlink/pcie/numa from `topology` (GPUs it does not list keep theirs).
void ApplyGpuTopology(const GpuTopology& topology, std::vector<GpuDevice>& gpus);

// Across nodes: the multi-node NVLink domain this node's GPUs belong to (an NVL72 rack's NVLink
// switch fabric), which the agent reports as node label kNvlinkDomainLabel unless --label sets it
// (docs/topology.md). Read from `nvidia-smi -q`: each GPU's "Fabric" section, where "State" is
// "Completed", names its "ClusterUUID" and "CliqueId"; the domain is "<ClusterUUID>.<CliqueId>"
// (GPUs share NVLink across nodes exactly when both match). nullopt where no GPU has one (no
// fabric: "N/A", a zero UUID, registration not completed) or where the GPUs disagree.
inline constexpr char kNvlinkDomainLabel[] = "berth.nvlink_domain";
std::optional<std::string> ParseNvlinkDomain(const std::string& query_output);

}  // namespace berth
