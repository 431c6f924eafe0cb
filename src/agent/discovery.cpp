#include "agent/discovery.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/cpu_budget.h"
#include "common/files.h"
#include "common/strings.h"

namespace berth {

std::string NormalizeGpuName(const std::string& raw) {
  std::vector<std::string> words;
  for (auto& w : Split(Trim(raw), ' ')) {
    if (!w.empty()) words.push_back(w);
  }
  while (!words.empty() && (words[0] == "NVIDIA" || words[0] == "Tesla" || words[0] == "GeForce" ||
                            words[0] == "Quadro")) {
    words.erase(words.begin());
  }
  if (words.empty()) return "GPU";
  std::string first = words[0];
  if ((first == "RTX" || first == "GTX" || first == "TITAN") && words.size() > 1) first += words[1];
  std::string name = Split(first, '-')[0];
  std::string out;
  for (char c : name) {
    if (isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') out += c;
  }
  return out.empty() ? "GPU" : out;
}

std::vector<GpuDevice> ParseNvidiaSmi(const std::string& output) {
  std::vector<GpuDevice> gpus;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    auto comma = line.find(',');
    if (comma == std::string::npos) continue;
    std::string index = Trim(line.substr(0, comma));
    if (index.empty() || !std::all_of(index.begin(), index.end(), ::isdigit)) continue;
    gpus.push_back({std::stoi(index), NormalizeGpuName(line.substr(comma + 1))});
  }
  return gpus;
}

Result<std::vector<GpuDevice>> ParseGpuDeclaration(const std::string& decl) {
  std::vector<GpuDevice> gpus;
  for (const auto& part : Split(decl, ',')) {
    auto colon = part.find(':');
    std::string type = Trim(part.substr(0, colon));
    std::string count = colon == std::string::npos ? "1" : Trim(part.substr(colon + 1));
    if (!IsValidName(type))
      return Status::Invalid("--gpus: bad GPU type '" + type + "' (expected TYPE:N, e.g. V100:4)");
    int n = 0;
    try {
      size_t used = 0;
      n = std::stoi(count, &used);
      if (used != count.size()) n = -1;
    } catch (...) {
      n = -1;
    }
    if (n < 0 || n > 1024)
      return Status::Invalid("--gpus: bad count '" + count + "' (expected TYPE:N, e.g. V100:4)");
    for (int i = 0; i < n; ++i) gpus.push_back({static_cast<int>(gpus.size()), type});
  }
  return gpus;
}

namespace {

// `nvidia-smi --query-gpu=FIELDS --format=csv,noheader`'s output; nullopt when it fails or is not
// there.
std::optional<std::string> RunNvidiaSmi(const std::string& args) {
  const std::string command = "nvidia-smi " + args + " 2>/dev/null";
  FILE* p = popen(command.c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return std::nullopt;
  return out;
}

std::optional<std::string> QueryNvidiaSmi(const std::string& fields) {
  return RunNvidiaSmi("--query-gpu=" + fields + " --format=csv,noheader");
}

}  // namespace

std::map<int, Mib> ParseGpuMemory(const std::string& output) {
  std::map<int, Mib> out;
  for (const std::string& line : Split(output, '\n')) {
    const size_t comma = line.find(',');
    if (comma == std::string::npos) continue;
    const std::string index = Trim(line.substr(0, comma));
    const std::string mib = Trim(line.substr(comma + 1));  // "81559 MiB"
    if (index.empty() || index.size() > 4 || mib.empty() || mib.size() > 16 ||
        !std::all_of(index.begin(), index.end(), ::isdigit) || !::isdigit(mib[0])) {
      continue;
    }
    const Mib value = std::strtoll(mib.c_str(), nullptr, 10);
    if (value > 0) out[std::stoi(index)] = value;
  }
  return out;
}

std::vector<MigSlice> DiscoverMigSlices() {
  const std::optional<std::string> listing = RunNvidiaSmi("-L");
  if (!listing) return {};
  std::vector<MigSlice> slices = ParseNvidiaSmiMigList(*listing);
  if (slices.empty()) return {};
  const std::optional<std::string> table = RunNvidiaSmi("");
  return WithInstanceIds(std::move(slices), ParseMigDevicesTable(table.value_or("")));
}

std::map<int, Mib> DiscoverGpuMemory() {
  auto out = QueryNvidiaSmi("index,memory.total");
  return out ? ParseGpuMemory(*out) : std::map<int, Mib>{};
}

std::optional<GpuTopology> DiscoverGpuTopology() {
  const std::optional<std::string> matrix = RunNvidiaSmi("topo -m");
  if (!matrix) return std::nullopt;
  Result<GpuTopology> parsed = ParseTopoMatrix(*matrix);
  if (!parsed.ok()) return std::nullopt;
  return *parsed;
}

std::optional<std::string> DiscoverNvlinkDomain() {
  const std::optional<std::string> query = RunNvidiaSmi("-q");
  if (!query) return std::nullopt;
  return ParseNvlinkDomain(*query);
}

std::optional<Mib> DeclaredGpuMemory(const std::string& type) {
  // nvidia-smi's memory.total of each type's smallest model: a declared type names no model, and
  // a share of the smaller memory is never more than the job's share.
  static const std::map<std::string, Mib> kMemory = {
      {"A10", 23028},     {"A10G", 23028},  {"A100", 40960}, {"A30", 24576},   {"A40", 46068},
      {"A6000", 49140},   {"B200", 183359}, {"H100", 81559}, {"H200", 143771}, {"K80", 11441},
      {"L4", 23034},      {"L40", 46068},   {"L40S", 46068}, {"P100", 16384},  {"RTX3090", 24576},
      {"RTX4090", 24564}, {"T4", 15360},    {"V100", 16384},
  };
  auto it = kMemory.find(type);
  if (it == kMemory.end()) return std::nullopt;
  return it->second;
}

NodeResources DiscoverNode(const std::string& declared_gpus) {
  NodeResources r;
  r.cpus = static_cast<MilliCpu>(ReadCpuBudget().usable) * kMilliPerCpu;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemTotal:") {
      r.memory = kb / 1024;
      break;
    }
  }
  if (!declared_gpus.empty()) {
    auto gpus = ParseGpuDeclaration(declared_gpus);
    if (gpus.ok()) r.gpus = *gpus;
    return r;
  }
  if (auto out = QueryNvidiaSmi("index,name")) r.gpus = ParseNvidiaSmi(*out);
  return r;
}

namespace {

// "00000000:3B:00.0" (nvidia-smi) and "0000:3b:00.0" (the driver's /proc) -> "3b:00.0".
std::string BusWithoutDomain(std::string id) {
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t colon = id.find(':');
  return colon == std::string::npos ? id : id.substr(colon + 1);
}

}  // namespace

std::map<int, int> ParseGpuMinors(const std::string& bus_ids,
                                  const std::map<std::string, std::string>& information) {
  std::map<std::string, int> minor_of_bus;
  for (const auto& [bus, text] : information) {
    for (const std::string& line : Split(text, '\n')) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos || Trim(line.substr(0, colon)) != "Device Minor") continue;
      const std::string value = Trim(line.substr(colon + 1));
      if (!value.empty() && std::all_of(value.begin(), value.end(), ::isdigit)) {
        minor_of_bus[BusWithoutDomain(bus)] = std::stoi(value);
      }
    }
  }
  std::map<int, int> minors;
  for (const std::string& line : Split(bus_ids, '\n')) {
    const size_t comma = line.find(',');
    if (comma == std::string::npos) continue;
    const std::string index = Trim(line.substr(0, comma));
    if (index.empty() || !std::all_of(index.begin(), index.end(), ::isdigit)) continue;
    auto minor = minor_of_bus.find(BusWithoutDomain(Trim(line.substr(comma + 1))));
    if (minor != minor_of_bus.end()) minors[std::stoi(index)] = minor->second;
  }
  return minors;
}

std::map<int, int> DiscoverGpuMinors() {
  std::map<std::string, std::string> information;
  const std::string root = "/proc/driver/nvidia/gpus";
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      information[e->d_name] = ReadFileOr(root + "/" + e->d_name + "/information");
    }
    ::closedir(d);
  }
  if (information.empty()) return {};
  auto out = QueryNvidiaSmi("index,pci.bus_id");
  return out ? ParseGpuMinors(*out, information) : std::map<int, int>{};
}

}  // namespace berth
