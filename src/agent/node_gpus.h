// NodeGpus: the agent's view of its node's GPUs. The GPUs themselves (whole, or in MIG mode with
// their slices, agent/mig.h), their device files under the device dir (/dev/nvidiaN, named by the
// driver's minor; a slice's nvidia-caps/nvidia-capN), and from those, for a rank's grant: the
// devices it may not open, the files a container gets, and what CUDA_VISIBLE_DEVICES says.
//
// Built once when the agent starts and read-only afterwards: safe to read from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/gpu_topology.h"
#include "agent/mig.h"
#include "agent/mps.h"
#include "common/resources.h"
#include "common/status.h"

namespace berth {

class NodeGpus {
 public:
  NodeGpus() = default;
  // `gpus`: the node's GPUs; `slices`: those of the GPUs in MIG mode; `minors`: GPU index -> the
  // minor of its /dev/nvidiaN where it differs from the index; `mig_minors`: the driver's
  // capability table (ParseMigMinors); `device_dir`: where nvidiaN and nvidia-caps/ are.
  NodeGpus(std::vector<GpuDevice> gpus, std::vector<MigSlice> slices, std::map<int, int> minors,
           std::map<std::string, int> mig_minors, std::string device_dir);

  // The devices the node offers the scheduler: whole GPUs not in MIG mode, then every slice.
  const std::vector<GpuDevice>& offered() const { return offered_; }
  // The GPUs' indices (never a slice's): what health probes look at.
  std::vector<int> gpu_indices() const;
  const std::map<int, int>& minors() const { return minors_; }

  // The character devices (major, minor) a rank holding devices `granted` may not open: every GPU
  // that is neither granted whole nor the GPU of a granted slice, and every capability file of a
  // slice not granted. Only files that exist as character devices count.
  std::vector<std::pair<int, int>> Denied(const std::vector<int>& granted) const;
  // The GPUs whose device file a rank holding `granted` opens: those granted whole, and the GPUs
  // of granted slices.
  std::vector<int> GpusOpened(const std::vector<int>& granted) const;
  // The capability files of the granted slices (paths under the device dir).
  std::vector<std::string> CapFiles(const std::vector<int>& granted) const;
  // CUDA_VISIBLE_DEVICES for a grant of slices: their UUIDs joined by ","; nullopt for whole GPUs.
  std::optional<std::string> SliceUuids(const std::vector<int>& granted) const;

  // The slices of GPU `gpu` (empty: whole, or no slice).
  std::vector<MigSlice> SlicesOf(int gpu) const;
  // This node with GPU `gpu`'s slices replaced by `fresh` (a re-slice, agent/mig_layout.h) and the
  // driver's capability table read again from `mig_minors` (ParseMigMinors).
  NodeGpus WithSlices(int gpu, std::vector<MigSlice> fresh,
                      std::map<std::string, int> mig_minors) const;

  // Each GPU's memory (MiB, by index) as nvidia-smi says; set once, before the agent's threads.
  void set_memory(std::map<int, Mib> memory) { memory_ = std::move(memory); }
  // What MPS needs to know of `device` for a rank holding `milli` of it (agent/mps.h): how CUDA
  // names it (a GPU's index, a slice's UUID) and its memory: a slice's from its profile
  // ("3g.40gb": 40 GiB), a GPU's from nvidia-smi or else its declared type (DeclaredGpuMemory).
  MpsShare MpsShareOf(int device, MilliGpu milli) const;

  // The node's GPU topology (agent/gpu_topology.h); set once, before the agent's threads.
  void set_topology(GpuTopology topology) { topology_ = std::move(topology); }
  // The CPUs near the GPUs a rank holding `granted` opens (their "CPU Affinity"), ascending; empty
  // when unknown. A rank pinned with resources.cpu_binding gets these first.
  std::vector<int> NearCpus(const std::vector<int>& granted) const;

 private:
  const MigSlice* SliceAt(int index) const;
  std::string GpuFile(int gpu) const;

  std::vector<GpuDevice> gpus_;
  std::vector<MigSlice> slices_;
  std::map<int, int> minors_;
  std::map<std::string, int> mig_minors_;
  std::string device_dir_;
  std::vector<GpuDevice> offered_;
  std::map<int, Mib> memory_;
  GpuTopology topology_;
};

// The driver's capability table: `device_dir`/nvidia-caps/mig-minors where that exists, else
// /proc/driver/nvidia-caps/mig-minors.
std::string ReadMigMinorsTable(const std::string& device_dir);

// The node's GPUs: declared (`declared_gpus` "A100:2", and `declared_mig` a --mig layout of
// those, ParseMigDeclaration) or else `discovered` (nvidia-smi's, whose device minors are asked of
// the driver). The capability table is read from `device_dir`/nvidia-caps/mig-minors where that
// exists (tests write one beside their mknod'ed files), else from the driver's
// /proc/driver/nvidia-caps/mig-minors. The GPUs' topology comes from `topology_file` (the
// agent's --gpu-topology: nvidia-smi topo -m's output) where given, else, for discovered GPUs,
// from nvidia-smi. Errors: a bad declaration, --mig without --gpus, a topology file that cannot be
// read or names a GPU the node lacks.
Result<NodeGpus> LoadNodeGpus(const std::string& declared_gpus, const std::string& declared_mig,
                              const std::string& node, std::vector<GpuDevice> discovered,
                              const std::string& device_dir, const std::string& topology_file = "");

}  // namespace berth
