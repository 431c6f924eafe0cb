// MIG slices: a GPU in MIG mode offers its GPU instances as devices of their own, typed by profile
// ("A100-3g.40gb"), each with its UUID (what CUDA_VISIBLE_DEVICES names) and its capability device
// files (/dev/nvidia-caps/nvidia-capN, which the driver checks on open). This file parses the
// declared form (`--mig`), nvidia-smi's `-L` listing and the driver's capability table, and names
// the types; agent/node_gpus.h decides which files a rank may open. docs/gpus.md has the rules.
//
// Plain functions of their arguments: thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/resources.h"
#include "common/status.h"

namespace berth {

// One slice: a GPU instance with one compute instance, of a GPU in MIG mode.
struct MigSlice {
  int index = 0;        // its device index on the node (MigDeviceIndex), what grants name
  int gpu = 0;          // its GPU's index
  std::string profile;  // as nvidia-smi names it: "3g.40gb", "1g.10gb+me"
  std::string uuid;     // "MIG-…"
  int gi = 0;           // its GPU instance's id on that GPU
  int ci = 0;           // its compute instance's id in that GPU instance
  bool operator==(const MigSlice&) const = default;
};

// A slice's device index: 100 × (its GPU's index + 1) + its position on that GPU (GPU 0's first
// slice is 100, GPU 1's third 202). Whole GPUs keep their own indices (below 100), so the two never
// meet, and a node that keeps its layout keeps its indices across restarts.
constexpr int kMigIndexBase = 100;
constexpr int MigDeviceIndex(int gpu, int position) { return kMigIndexBase * (gpu + 1) + position; }

// Whether `profile` is a MIG profile name as nvidia-smi prints it: "3g.40gb", "1g.10gb+me",
// "1c.3g.40gb" (a compute instance of part of its GPU instance).
bool IsMigProfile(std::string_view profile);

// The device type of a slice: the GPU's type, "-", the profile with "+" written "-" (a type is a
// name: letters, digits, ".", "_", "-"). ("A100", "3g.40gb") -> "A100-3g.40gb"; ("H100",
// "1g.10gb+me") -> "H100-1g.10gb-me".
std::string MigTypeName(const std::string& gpu_type, const std::string& profile);

// Parses a declared layout, `--mig '0=3g.40gb,3g.40gb;1=1g.10gb*7'`: GPU index "=" its slices'
// profiles, "*N" repeating one, ";" between GPUs; a GPU not named stays whole. `gpus` is the
// number of GPUs declared. Slice k of GPU g (from 0, in the order written) gets GPU instance k + 1
// and compute instance 0, and a UUID made from `node`, g and k, stable across restarts. Errors name
// the part that is wrong: an unknown GPU, a GPU named twice, a bad profile, more than seven compute
// slices on one GPU.
Result<std::vector<MigSlice>> ParseMigDeclaration(const std::string& decl, int gpus,
                                                  const std::string& node);

// The slices of declared GPU `gpu` laid out as `profiles`, as ParseMigDeclaration makes them (slice
// k: GPU instance k + 1, compute instance 0, a UUID from `node`, `gpu` and k). What a declared GPU
// has after a re-slice (agent/mig_layout.h).
std::vector<MigSlice> DeclaredSlices(const std::string& node, int gpu,
                                     const std::vector<std::string>& profiles);

// Parses `nvidia-smi -L`: "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-…)" lines, each followed by
// its "  MIG 3g.20gb     Device  0: (UUID: MIG-…)" lines. Returns the slices in that order with
// their GPU, profile and UUID, each at position "Device N" on its GPU (MigDeviceIndex). GPU and
// compute instance ids are not in this listing (0): WithInstanceIds adds them.
std::vector<MigSlice> ParseNvidiaSmiMigList(const std::string& output);

// Parses the "MIG devices" table of `nvidia-smi`'s default output, whose rows begin
// "|  0    1   0   0  |": GPU index, GPU instance id, compute instance id, MIG device number (the
// "Device N" of `nvidia-smi -L`). (GPU, device) -> (GI id, CI id).
std::map<std::pair<int, int>, std::pair<int, int>> ParseMigDevicesTable(const std::string& output);

// `slices` (ParseNvidiaSmiMigList's) with their GPU and compute instance ids from `ids`
// (ParseMigDevicesTable's). A slice `ids` lacks is left out: without its ids its capability files
// are unknown, and under device isolation no rank could open it.
std::vector<MigSlice> WithInstanceIds(
    std::vector<MigSlice> slices, const std::map<std::pair<int, int>, std::pair<int, int>>& ids);

// Parses the driver's capability table (/proc/driver/nvidia-caps/mig-minors): "config 1",
// "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13". Name -> the minor of its nvidia-capN file. The
// "gpuN" there is the GPU's device minor, not its index.
std::map<std::string, int> ParseMigMinors(const std::string& text);

// The capability files a rank on `slice` opens: its GPU instance's and its compute instance's
// (`caps_dir`/nvidia-capN), from `minors` (ParseMigMinors) with `gpu_minor` its GPU's device
// minor. Those the table lacks are left out.
std::vector<std::string> MigCapFiles(const MigSlice& slice, int gpu_minor,
                                     const std::map<std::string, int>& minors,
                                     const std::string& caps_dir);

// The devices a node offers: its GPUs not in MIG mode (no slice names them) as they are, then each
// slice as a device of its own, typed MigTypeName(its GPU's type, its profile).
std::vector<GpuDevice> OfferedDevices(const std::vector<GpuDevice>& gpus,
                                      const std::vector<MigSlice>& slices);

}  // namespace berth
