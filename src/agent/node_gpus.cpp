#include "agent/node_gpus.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "agent/discovery.h"
#include "common/files.h"
#include "common/strings.h"

namespace berth {

namespace {

std::optional<std::pair<int, int>> CharDevice(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return std::nullopt;
  return std::make_pair(static_cast<int>(major(st.st_rdev)), static_cast<int>(minor(st.st_rdev)));
}

bool Holds(const std::vector<int>& granted, int index) {
  return std::find(granted.begin(), granted.end(), index) != granted.end();
}

}  // namespace

NodeGpus::NodeGpus(std::vector<GpuDevice> gpus, std::vector<MigSlice> slices,
                   std::map<int, int> minors, std::map<std::string, int> mig_minors,
                   std::string device_dir)
    : gpus_(std::move(gpus)),
      slices_(std::move(slices)),
      minors_(std::move(minors)),
      mig_minors_(std::move(mig_minors)),
      device_dir_(std::move(device_dir)),
      offered_(OfferedDevices(gpus_, slices_)) {}

std::vector<int> NodeGpus::gpu_indices() const {
  std::vector<int> indices;
  for (const GpuDevice& gpu : gpus_) indices.push_back(gpu.index);
  return indices;
}

const MigSlice* NodeGpus::SliceAt(int index) const {
  auto it = std::find_if(slices_.begin(), slices_.end(),
                         [&](const MigSlice& s) { return s.index == index; });
  return it == slices_.end() ? nullptr : &*it;
}

std::string NodeGpus::GpuFile(int gpu) const {
  auto minor = minors_.find(gpu);
  return device_dir_ + "/nvidia" + std::to_string(minor == minors_.end() ? gpu : minor->second);
}

std::vector<int> NodeGpus::GpusOpened(const std::vector<int>& granted) const {
  std::set<int> opened;
  for (int index : granted) {
    const MigSlice* slice = SliceAt(index);
    opened.insert(slice ? slice->gpu : index);
  }
  return {opened.begin(), opened.end()};
}

std::vector<std::string> NodeGpus::CapFiles(const std::vector<int>& granted) const {
  std::vector<std::string> files;
  for (int index : granted) {
    const MigSlice* slice = SliceAt(index);
    if (slice == nullptr) continue;
    auto minor = minors_.find(slice->gpu);
    const int gpu_minor = minor == minors_.end() ? slice->gpu : minor->second;
    for (std::string& f : MigCapFiles(*slice, gpu_minor, mig_minors_, device_dir_ + "/nvidia-caps"))
      files.push_back(std::move(f));
  }
  return files;
}

std::vector<std::pair<int, int>> NodeGpus::Denied(const std::vector<int>& granted) const {
  std::vector<std::pair<int, int>> denied;
  const std::vector<int> opened = GpusOpened(granted);
  for (const GpuDevice& gpu : gpus_) {
    if (Holds(opened, gpu.index)) continue;
    if (auto device = CharDevice(GpuFile(gpu.index))) denied.push_back(*device);
  }
  // Every GPU or compute instance's capability file the driver's table names, but the granted
  // slices': also those of instances not made yet (a re-slice of another GPU makes new ones while
  // this rank runs).
  const std::vector<std::string> own = CapFiles(granted);
  for (const auto& [name, minor] : mig_minors_) {
    if (!name.starts_with("gpu") || name.find("/gi") == std::string::npos) continue;
    const std::string file = device_dir_ + "/nvidia-caps/nvidia-cap" + std::to_string(minor);
    if (std::find(own.begin(), own.end(), file) != own.end()) continue;
    if (auto device = CharDevice(file)) denied.push_back(*device);
  }
  return denied;
}

std::optional<std::string> NodeGpus::SliceUuids(const std::vector<int>& granted) const {
  std::vector<std::string> uuids;
  for (int index : granted) {
    if (const MigSlice* slice = SliceAt(index)) uuids.push_back(slice->uuid);
  }
  if (uuids.empty()) return std::nullopt;
  return Join(uuids, ",");
}

std::vector<MigSlice> NodeGpus::SlicesOf(int gpu) const {
  std::vector<MigSlice> out;
  for (const MigSlice& s : slices_) {
    if (s.gpu == gpu) out.push_back(s);
  }
  return out;
}

NodeGpus NodeGpus::WithSlices(int gpu, std::vector<MigSlice> fresh,
                              std::map<std::string, int> mig_minors) const {
  std::vector<MigSlice> slices;
  for (const MigSlice& s : slices_) {
    if (s.gpu != gpu) slices.push_back(s);
  }
  for (MigSlice& s : fresh) slices.push_back(std::move(s));
  std::sort(slices.begin(), slices.end(),
            [](const MigSlice& a, const MigSlice& b) { return a.index < b.index; });
  NodeGpus out(gpus_, std::move(slices), minors_, std::move(mig_minors), device_dir_);
  out.memory_ = memory_;
  out.topology_ = topology_;
  return out;
}

std::string ReadMigMinorsTable(const std::string& device_dir) {
  std::string table = ReadFileOr(device_dir + "/nvidia-caps/mig-minors");
  return table.empty() ? ReadFileOr("/proc/driver/nvidia-caps/mig-minors") : table;
}

MpsShare NodeGpus::MpsShareOf(int device, MilliGpu milli) const {
  MpsShare share{.device = device, .cuda_id = std::to_string(device), .milli = milli};
  if (const MigSlice* slice = SliceAt(device)) {
    share.cuda_id = slice->uuid;
    // "3g.40gb", "1c.3g.40gb", "1g.10gb+me": the number before "gb".
    const size_t gb = slice->profile.find("gb");
    const size_t dot = slice->profile.rfind('.', gb);
    if (gb != std::string::npos && dot != std::string::npos && dot + 1 < gb) {
      share.device_memory = std::atoll(slice->profile.substr(dot + 1, gb - dot - 1).c_str()) * 1024;
    }
    return share;
  }
  if (auto it = memory_.find(device); it != memory_.end()) {
    share.device_memory = it->second;
    return share;
  }
  for (const GpuDevice& gpu : gpus_) {
    if (gpu.index == device) share.device_memory = DeclaredGpuMemory(gpu.type);
  }
  return share;
}

std::vector<int> NodeGpus::NearCpus(const std::vector<int>& granted) const {
  std::set<int> near;
  for (int gpu : GpusOpened(granted)) {
    auto it = topology_.find(gpu);
    if (it != topology_.end()) near.insert(it->second.cpus.begin(), it->second.cpus.end());
  }
  return {near.begin(), near.end()};
}

namespace {

// The topology of the node's GPUs: from --gpu-topology's file, else (discovered GPUs) nvidia-smi's.
Result<GpuTopology> LoadTopology(const std::string& file, bool discovered,
                                 const std::vector<GpuDevice>& gpus) {
  if (file.empty())
    return discovered ? DiscoverGpuTopology().value_or(GpuTopology{}) : GpuTopology{};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    return Status::Invalid("--gpu-topology " + file + ": no such file");
  }
  Result<GpuTopology> topology = ParseTopoMatrix(ReadFileOr(file));
  if (!topology.ok())
    return Status::Invalid("--gpu-topology " + file + ": " + topology.status().message());
  for (const auto& entry : *topology) {
    const int gpu =
        entry.first;  // (a structured binding cannot be captured before C++20's clang 16)
    if (std::none_of(gpus.begin(), gpus.end(),
                     [&](const GpuDevice& d) { return d.index == gpu; })) {
      return Status::Invalid("--gpu-topology " + file + ": lists GPU" + std::to_string(gpu) +
                             ", which this node does not have (" + std::to_string(gpus.size()) +
                             " GPUs)");
    }
  }
  return topology;
}

}  // namespace

Result<NodeGpus> LoadNodeGpus(const std::string& declared_gpus, const std::string& declared_mig,
                              const std::string& node, std::vector<GpuDevice> discovered,
                              const std::string& device_dir, const std::string& topology_file) {
  std::vector<GpuDevice> gpus = std::move(discovered);
  std::map<int, int> minors;
  if (!declared_gpus.empty()) {
    Result<std::vector<GpuDevice>> declared = ParseGpuDeclaration(declared_gpus);
    if (!declared.ok()) return declared.status();
    gpus = std::move(*declared);
  } else if (!gpus.empty()) {
    minors = DiscoverGpuMinors();  // declared GPUs are numbered by their device files
  }
  std::vector<MigSlice> slices;
  if (declared_gpus.empty() && !gpus.empty()) {
    if (!declared_mig.empty()) {
      return Status::Invalid("--mig declares slices of declared GPUs: name them with --gpus too");
    }
    slices = DiscoverMigSlices();  // (GPUs nvidia-smi lists in MIG mode)
  } else if (!declared_mig.empty()) {
    if (declared_gpus.empty()) {
      return Status::Invalid("--mig declares slices of declared GPUs: name them with --gpus too");
    }
    Result<std::vector<MigSlice>> parsed =
        ParseMigDeclaration(declared_mig, static_cast<int>(gpus.size()), node);
    if (!parsed.ok()) return parsed.status();
    slices = std::move(*parsed);
  }
  Result<GpuTopology> topology = LoadTopology(topology_file, declared_gpus.empty(), gpus);
  if (!topology.ok()) return topology.status();
  ApplyGpuTopology(*topology, gpus);
  const std::string table = slices.empty() ? "" : ReadMigMinorsTable(device_dir);
  NodeGpus out(std::move(gpus), std::move(slices), std::move(minors), ParseMigMinors(table),
               device_dir);
  if (declared_gpus.empty() && !out.gpu_indices().empty()) out.set_memory(DiscoverGpuMemory());
  out.set_topology(std::move(*topology));
  return out;
}

}  // namespace berth
