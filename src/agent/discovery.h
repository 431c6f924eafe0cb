// Node discovery: what this machine offers (CPUs, memory, GPUs). GPUs come from `nvidia-smi` when
// it is present; a declared `--gpus TYPE:N` wins (machines without GPUs, tests and demos).
// Thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_topology.h"
#include "agent/mig.h"
#include "common/quantity.h"
#include "common/resources.h"
#include "common/status.h"

namespace berth {

struct NodeResources {
  MilliCpu cpus = 0;
  Mib memory = 0;
  std::vector<GpuDevice> gpus;
};

// "NVIDIA H100 80GB HBM3" -> "H100", "Tesla V100-SXM2-16GB" -> "V100", "NVIDIA A100-SXM4-80GB" ->
// "A100", "NVIDIA GeForce RTX 4090" -> "RTX4090", "NVIDIA L4" -> "L4": the names task files use.
std::string NormalizeGpuName(const std::string& name);
// Parses `nvidia-smi --query-gpu=index,name --format=csv,noheader` output.
std::vector<GpuDevice> ParseNvidiaSmi(const std::string& output);
// Parses a declaration "V100:4" (or "V100:4,T4:2") into devices 0..N-1.
Result<std::vector<GpuDevice>> ParseGpuDeclaration(const std::string& decl);

// Reads this machine's usable CPUs (affinity/cgroup), MemTotal and, when `declared_gpus` is empty,
// the GPUs nvidia-smi lists (none if it is absent or fails).
NodeResources DiscoverNode(const std::string& declared_gpus);

// The device minor of each GPU (by nvidia-smi index): /dev/nvidiaN is named by the minor, which the
// driver assigns and which need not equal the index. From `nvidia-smi --query-gpu=index,pci.bus_id
// --format=csv,noheader` output and the driver's /proc/driver/nvidia/gpus/BUS/information files
// (`information`: bus id -> that file's text). GPUs whose minor is not found are left out.
std::map<int, int> ParseGpuMinors(const std::string& bus_ids,
                                  const std::map<std::string, std::string>& information);
// This machine's, asking nvidia-smi and the driver; empty without them.
std::map<int, int> DiscoverGpuMinors();

// The slices of this machine's GPUs in MIG mode, asking `nvidia-smi -L` (profiles, UUIDs) and
// `nvidia-smi` (the "MIG devices" table: instance ids); empty without nvidia-smi or MIG.
std::vector<MigSlice> DiscoverMigSlices();

// Each GPU's memory (MiB, by index) from `nvidia-smi --query-gpu=index,memory.total
// --format=csv,noheader` output ("0, 81559 MiB"); lines it cannot read are left out.
std::map<int, Mib> ParseGpuMemory(const std::string& output);
// This machine's, asking nvidia-smi; empty without it.
std::map<int, Mib> DiscoverGpuMemory();
// This machine's GPU topology, from `nvidia-smi topo -m`; nullopt without nvidia-smi or when its
// output cannot be read (the GPUs are then placed without topology).
std::optional<GpuTopology> DiscoverGpuTopology();
// The multi-node NVLink domain of this machine's GPUs, from `nvidia-smi -q` (ParseNvlinkDomain,
// agent/gpu_topology.h); nullopt without nvidia-smi or such a domain.
std::optional<std::string> DiscoverNvlinkDomain();
// The memory of one GPU of a declared type (what nvidia-smi says of the type's smallest model:
// "A100" 40960, "H100" 81559, "T4" 15360); none for a type not in the table.
std::optional<Mib> DeclaredGpuMemory(const std::string& type);

}  // namespace berth
