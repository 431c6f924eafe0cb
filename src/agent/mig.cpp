#include "agent/mig.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <set>

#include "common/sha256.h"
#include "common/strings.h"

namespace berth {

namespace {

// The number at the front of `s` ("3g.40gb" -> 3, with `s` left at "g.40gb"); nullopt when there is
// none.
std::optional<int> TakeNumber(std::string_view& s) {
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return value;
}

bool TakePrefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// The compute slices a profile's GPU instance takes ("3g.40gb" and "1c.3g.40gb" -> 3).
int ComputeSlices(std::string_view profile) {
  if (auto c = profile.find("c."); c != std::string_view::npos && c < profile.find('g')) {
    profile.remove_prefix(c + 2);
  }
  return TakeNumber(profile).value_or(0);
}

// A stable UUID-shaped name for a declared slice: "MIG-" and 32 hex digits of a digest, grouped
// 8-4-4-4-12 as NVIDIA's are.
std::string DeclaredUuid(const std::string& node, int gpu, int position) {
  const std::string hex = Sha256Hex("berth declared MIG slice " + node + "/" + std::to_string(gpu) +
                                    "/" + std::to_string(position));
  return "MIG-" + hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

// "3g.40gb*2" -> {"3g.40gb", 2}.
Result<std::pair<std::string, int>> ParseRepeatedProfile(const std::string& part) {
  const size_t star = part.find('*');
  const std::string profile = Trim(part.substr(0, star));
  int times = 1;
  if (star != std::string::npos) {
    const std::string count_text = Trim(part.substr(star + 1));
    std::string_view count = count_text;
    const size_t digits = count.size();
    std::optional<int> n = TakeNumber(count);
    if (!n || !count.empty() || digits == 0 || *n < 1 || *n > 7) {
      return Status::Invalid("--mig: bad repeat in '" + part + "' (expected PROFILE*N, N 1..7)");
    }
    times = *n;
  }
  if (!IsMigProfile(profile)) {
    return Status::Invalid("--mig: '" + profile +
                           "' is not a MIG profile (expected one as nvidia-smi names it, e.g. "
                           "3g.40gb or 1g.10gb)");
  }
  return std::make_pair(profile, times);
}

// One GPU's part of a declaration, "0=3g.40gb,3g.40gb".
Status ParseGpuLayout(const std::string& part, int gpus, const std::string& node,
                      std::set<int>& seen, std::vector<MigSlice>& out) {
  const size_t eq = part.find('=');
  const std::string index_owned = eq == std::string::npos ? "" : Trim(part.substr(0, eq));
  std::string_view index_text = index_owned;
  const size_t digits = index_text.size();
  std::optional<int> gpu = TakeNumber(index_text);
  if (!gpu || digits == 0 || !index_text.empty()) {
    return Status::Invalid("--mig: expected GPU=PROFILE,PROFILE... in '" + part +
                           "' (e.g. 0=3g.40gb,3g.40gb)");
  }
  if (*gpu < 0 || *gpu >= gpus) {
    return Status::Invalid("--mig: GPU " + std::to_string(*gpu) + " is not declared (--gpus has " +
                           std::to_string(gpus) + ")");
  }
  if (!seen.insert(*gpu).second) {
    return Status::Invalid("--mig: GPU " + std::to_string(*gpu) + " is named twice");
  }
  int position = 0, compute = 0;
  for (const std::string& item : Split(part.substr(eq + 1), ',')) {
    Result<std::pair<std::string, int>> repeated = ParseRepeatedProfile(item);
    if (!repeated.ok()) return repeated.status();
    for (int i = 0; i < repeated->second; ++i) {
      compute += ComputeSlices(repeated->first);
      out.push_back(MigSlice{.index = MigDeviceIndex(*gpu, position),
                             .gpu = *gpu,
                             .profile = repeated->first,
                             .uuid = DeclaredUuid(node, *gpu, position),
                             .gi = position + 1,
                             .ci = 0});
      ++position;
    }
  }
  if (compute > 7) {
    return Status::Invalid("--mig: GPU " + std::to_string(*gpu) + "'s slices take " +
                           std::to_string(compute) + " compute slices; a GPU has 7");
  }
  return Status::Ok();
}

}  // namespace

bool IsMigProfile(std::string_view p) {
  std::string_view s = p;
  // An optional compute-instance part, "1c.".
  if (std::string_view probe = s; TakeNumber(probe) && TakePrefix(probe, "c.")) s = probe;
  std::optional<int> g = TakeNumber(s);
  if (!g || *g < 1 || *g > 7 || !TakePrefix(s, "g.")) return false;
  std::optional<int> gb = TakeNumber(s);
  if (!gb || *gb < 1 || !TakePrefix(s, "gb")) return false;
  if (s.empty()) return true;
  if (!TakePrefix(s, "+") || s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::islower(c) != 0; });
}

std::string MigTypeName(const std::string& gpu_type, const std::string& profile) {
  std::string name = gpu_type + "-" + profile;
  std::replace(name.begin(), name.end(), '+', '-');
  return name;
}

std::vector<MigSlice> DeclaredSlices(const std::string& node, int gpu,
                                     const std::vector<std::string>& profiles) {
  std::vector<MigSlice> out;
  for (int k = 0; k < static_cast<int>(profiles.size()); ++k) {
    out.push_back(MigSlice{.index = MigDeviceIndex(gpu, k),
                           .gpu = gpu,
                           .profile = profiles[static_cast<size_t>(k)],
                           .uuid = DeclaredUuid(node, gpu, k),
                           .gi = k + 1,
                           .ci = 0});
  }
  return out;
}

Result<std::vector<MigSlice>> ParseMigDeclaration(const std::string& decl, int gpus,
                                                  const std::string& node) {
  std::vector<MigSlice> slices;
  std::set<int> seen;
  for (const std::string& raw : Split(decl, ';')) {
    const std::string part = Trim(raw);
    if (part.empty()) continue;
    BERTH_RETURN_IF_ERROR(ParseGpuLayout(part, gpus, node, seen, slices));
  }
  if (slices.empty()) return Status::Invalid("--mig: no slice declared in '" + decl + "'");
  return slices;
}

std::vector<MigSlice> ParseNvidiaSmiMigList(const std::string& output) {
  std::vector<MigSlice> slices;
  std::optional<int> gpu;
  int position = 0;
  for (const std::string& raw : Split(output, '\n')) {
    const std::string trimmed = Trim(raw);
    std::string_view line = trimmed;
    if (TakePrefix(line, "GPU ")) {
      gpu = TakeNumber(line);
      position = 0;
      continue;
    }
    if (!gpu || !TakePrefix(line, "MIG ")) continue;
    const std::string rest(line);
    const size_t space = rest.find(' ');
    const size_t uuid_at = rest.find("UUID: ");
    if (space == std::string::npos || uuid_at == std::string::npos) continue;
    const std::string profile = rest.substr(0, space);
    std::string uuid = rest.substr(uuid_at + 6);
    uuid = uuid.substr(0, uuid.find(')'));
    if (!IsMigProfile(profile) || !uuid.starts_with("MIG-")) continue;
    // "Device  N:": its MIG device number on the GPU (what nvidia-smi's table names it by).
    if (const size_t device_at = rest.find("Device "); device_at != std::string::npos) {
      std::string_view number = std::string_view(rest).substr(device_at + 7);
      while (!number.empty() && number.front() == ' ') number.remove_prefix(1);
      if (std::optional<int> n = TakeNumber(number); n && *n >= 0 && *n < kMigIndexBase) {
        position = *n;
      }
    }
    slices.push_back(MigSlice{.index = MigDeviceIndex(*gpu, position),
                              .gpu = *gpu,
                              .profile = profile,
                              .uuid = Trim(uuid)});
    ++position;
  }
  return slices;
}

std::map<std::pair<int, int>, std::pair<int, int>> ParseMigDevicesTable(const std::string& output) {
  std::map<std::pair<int, int>, std::pair<int, int>> ids;
  bool in_table = false;
  for (const std::string& line : Split(output, '\n')) {
    if (line.find("MIG devices:") != std::string::npos) {
      in_table = true;
      continue;
    }
    if (!in_table || line.empty() || line[0] != '|') continue;
    // "|  0    1   0   0  |     11MiB / 20096MiB | ...": GPU, GI ID, CI ID, MIG Dev.
    std::string_view cell = std::string_view(line).substr(1, line.find('|', 1) - 1);
    int numbers[4];
    int found = 0;
    while (found < 4) {
      while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
      std::optional<int> n = TakeNumber(cell);
      if (!n) break;
      numbers[found++] = *n;
    }
    while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
    if (found == 4 && cell.empty()) ids[{numbers[0], numbers[3]}] = {numbers[1], numbers[2]};
  }
  return ids;
}

std::vector<MigSlice> WithInstanceIds(
    std::vector<MigSlice> slices, const std::map<std::pair<int, int>, std::pair<int, int>>& ids) {
  std::vector<MigSlice> out;
  for (MigSlice& slice : slices) {
    auto it = ids.find({slice.gpu, slice.index - MigDeviceIndex(slice.gpu, 0)});
    if (it == ids.end()) continue;
    slice.gi = it->second.first;
    slice.ci = it->second.second;
    out.push_back(std::move(slice));
  }
  return out;
}

std::map<std::string, int> ParseMigMinors(const std::string& text) {
  std::map<std::string, int> minors;
  for (const std::string& raw : Split(text, '\n')) {
    const std::string line = Trim(raw);
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string number_text = Trim(line.substr(space + 1));
    std::string_view number = number_text;
    const size_t digits = number.size();
    std::optional<int> minor = TakeNumber(number);
    if (minor && digits > 0 && number.empty()) minors[Trim(line.substr(0, space))] = *minor;
  }
  return minors;
}

std::vector<std::string> MigCapFiles(const MigSlice& slice, int gpu_minor,
                                     const std::map<std::string, int>& minors,
                                     const std::string& caps_dir) {
  const std::string gi =
      "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(slice.gi) + "/access";
  const std::string ci = "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(slice.gi) +
                         "/ci" + std::to_string(slice.ci) + "/access";
  std::vector<std::string> files;
  for (const std::string& name : {gi, ci}) {
    auto it = minors.find(name);
    if (it != minors.end()) files.push_back(caps_dir + "/nvidia-cap" + std::to_string(it->second));
  }
  return files;
}

std::vector<GpuDevice> OfferedDevices(const std::vector<GpuDevice>& gpus,
                                      const std::vector<MigSlice>& slices) {
  std::set<int> in_mig_mode;
  for (const MigSlice& s : slices) in_mig_mode.insert(s.gpu);
  std::vector<GpuDevice> offered;
  for (const GpuDevice& gpu : gpus) {
    if (!in_mig_mode.count(gpu.index)) offered.push_back(gpu);
  }
  for (const MigSlice& s : slices) {
    auto parent = std::find_if(gpus.begin(), gpus.end(),
                               [&](const GpuDevice& g) { return g.index == s.gpu; });
    if (parent == gpus.end()) continue;
    offered.push_back(GpuDevice{.index = s.index,
                                .type = MigTypeName(parent->type, s.profile),
                                .parent = s.gpu,
                                .nvlink = parent->nvlink,
                                .pcie = parent->pcie,
                                .numa = parent->numa});
  }
  return offered;
}

}  // namespace berth
