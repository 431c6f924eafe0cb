#include "agent/gpu_topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "common/strings.h"
#include "supervise/cpu_set.h"

namespace berth {
namespace {

enum class Link { kSelf, kNvlink, kSwitch, kHostBridge, kNuma, kSystem };

std::optional<Link> LinkOf(const std::string& cell) {
  if (cell == "X") return Link::kSelf;
  if (cell.size() > 2 && cell.compare(0, 2, "NV") == 0 &&
      std::all_of(cell.begin() + 2, cell.end(), ::isdigit)) {
    return Link::kNvlink;
  }
  if (cell == "PIX" || cell == "PXB") return Link::kSwitch;
  if (cell == "PHB") return Link::kHostBridge;
  if (cell == "NODE") return Link::kNuma;
  if (cell == "SYS" || cell == "SOC") return Link::kSystem;  // SOC: older drivers' SYS
  return std::nullopt;
}

// Without the ANSI escapes nvidia-smi underlines its header with on a terminal.
std::string StripEscapes(const std::string& line) {
  std::string out;
  for (size_t k = 0; k < line.size(); ++k) {
    if (line[k] == '\x1b') {
      while (k < line.size() && !std::isalpha(static_cast<unsigned char>(line[k]))) ++k;
      continue;
    }
    out += line[k];
  }
  return out;
}

std::optional<int> GpuColumn(const std::string& name) {
  if (name.size() < 4 || name.compare(0, 3, "GPU") != 0 ||
      !std::all_of(name.begin() + 3, name.end(), ::isdigit) || name.size() > 7) {
    return std::nullopt;
  }
  return std::stoi(name.substr(3));
}

// Union-find over positions 0..n-1.
struct Sets {
  std::vector<size_t> parent;
  explicit Sets(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t Find(size_t x) { return parent[x] == x ? x : parent[x] = Find(parent[x]); }
  void Join(size_t a, size_t b) { parent[Find(a)] = Find(b); }
};

// Numbers the sets of more than one member 1, 2, ... in order of their lowest member; 0 for the
// rest.
std::vector<int> Number(Sets& sets, size_t n) {
  std::map<size_t, int> size;
  for (size_t k = 0; k < n; ++k) ++size[sets.Find(k)];
  std::map<size_t, int> number;
  std::vector<int> out(n, 0);
  for (size_t k = 0; k < n; ++k) {
    const size_t root = sets.Find(k);
    if (size[root] < 2) continue;
    auto [it, fresh] = number.try_emplace(root, static_cast<int>(number.size()) + 1);
    out[k] = it->second;
  }
  return out;
}

}  // namespace

Result<GpuTopology> ParseTopoMatrix(const std::string& text) {
  std::vector<std::string> columns;  // the header's names, after the (empty) row-name column
  std::vector<int> gpus;             // GPU index of each GPU column, in order
  std::vector<std::vector<Link>> links;
  std::vector<std::string> affinity, numa;
  std::vector<int> rows;  // GPU index of each row
  int line_no = 0;
  for (const std::string& raw : Split(text, '\n')) {
    ++line_no;
    const std::string line = StripEscapes(raw);
    const std::string trimmed = Trim(line);
    if (trimmed.empty()) continue;
    if (trimmed.rfind("Legend", 0) == 0) break;
    std::vector<std::string> cells;
    for (const std::string& c : Split(line, '\t')) cells.push_back(Trim(c));
    if (columns.empty()) {
      if (!cells.empty() && cells.front().empty()) cells.erase(cells.begin());
      for (const std::string& c : cells) {
        if (std::optional<int> gpu = GpuColumn(c)) gpus.push_back(*gpu);
      }
      if (gpus.empty()) {
        return Status::Invalid(fmt::format(
            "GPU topology, line {}: expected nvidia-smi topo -m's header (GPU0, GPU1, ...)",
            line_no));
      }
      columns = cells;
      continue;
    }
    const std::string name = cells.front().substr(0, cells.front().find_first_of(" \t"));
    std::optional<int> row = GpuColumn(name);
    if (!row) continue;  // a NIC's row
    if (cells.size() < gpus.size() + 1) {
      return Status::Invalid(fmt::format(
          "GPU topology, line {}: {} has {} columns, the header {} (are they tab-separated, as "
          "nvidia-smi prints them?)",
          line_no, name, cells.size() - 1, columns.size()));
    }
    if (std::find(rows.begin(), rows.end(), *row) != rows.end()) {
      return Status::Invalid(fmt::format("GPU topology, line {}: {} listed twice", line_no, name));
    }
    std::vector<Link> row_links;
    std::string cpus, node;
    size_t gpu_column = 0;
    for (size_t k = 0; k < columns.size() && k + 1 < cells.size(); ++k) {
      const std::string& cell = cells[k + 1];
      if (GpuColumn(columns[k])) {
        std::optional<Link> link = LinkOf(cell);
        if (!link) {
          return Status::Invalid(fmt::format(
              "GPU topology, line {}: {} to {} is '{}': expected X, NV#, PIX, PXB, PHB, NODE or "
              "SYS",
              line_no, name, columns[k], cell));
        }
        row_links.push_back(*link);
        ++gpu_column;
      } else if (columns[k] == "CPU Affinity") {
        cpus = cell;
      } else if (columns[k] == "NUMA Affinity") {
        node = cell;
      }
    }
    rows.push_back(*row);
    links.push_back(std::move(row_links));
    affinity.push_back(cpus);
    numa.push_back(node);
  }
  if (rows.empty()) return Status::Invalid("GPU topology: no GPU rows (is it nvidia-smi topo -m?)");

  const size_t n = rows.size();
  auto position = [&](int gpu) -> std::optional<size_t> {
    auto it = std::find(rows.begin(), rows.end(), gpu);
    if (it == rows.end()) return std::nullopt;
    return static_cast<size_t>(it - rows.begin());
  };
  Sets nvlink(n), pcie(n), near(n);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < links[r].size() && c < gpus.size(); ++c) {
      std::optional<size_t> other = position(gpus[c]);
      if (!other) continue;
      const Link link = links[r][c];
      if (link == Link::kNvlink) nvlink.Join(r, *other);
      if (link == Link::kSwitch) pcie.Join(r, *other);
      if (link != Link::kSystem) near.Join(r, *other);
    }
  }
  const std::vector<int> islands = Number(nvlink, n);
  const std::vector<int> switches = Number(pcie, n);
  // NUMA nodes where nvidia-smi names none: the sets joined by anything but SYS, numbered from 0.
  std::map<size_t, int> near_number;
  GpuTopology out;
  for (size_t r = 0; r < n; ++r) {
    GpuLinks& g = out[rows[r]];
    g.nvlink = islands[r];
    g.pcie = switches[r];
    const std::string& node = numa[r];
    if (!node.empty() && std::all_of(node.begin(), node.end(), ::isdigit) && node.size() < 5) {
      g.numa = std::stoi(node);
    } else {
      g.numa =
          near_number.try_emplace(near.Find(r), static_cast<int>(near_number.size())).first->second;
    }
    if (std::optional<std::vector<int>> cpus = ParseCpuList(affinity[r])) g.cpus = *cpus;
  }
  return out;
}

void ApplyGpuTopology(const GpuTopology& topology, std::vector<GpuDevice>& gpus) {
  for (GpuDevice& d : gpus) {
    auto it = topology.find(d.gpu());
    if (it == topology.end()) continue;
    d.nvlink = it->second.nvlink;
    d.pcie = it->second.pcie;
    d.numa = it->second.numa;
  }
}

std::optional<std::string> ParseNvlinkDomain(const std::string& query_output) {
  // One GPU's Fabric section: its lines are indented deeper than the "Fabric" line itself.
  struct Fabric {
    std::string state, clique, cluster;
  };
  std::vector<Fabric> fabrics;
  size_t depth = std::string::npos;  // the "Fabric" line's indentation while inside one
  for (const std::string& line : Split(query_output, '\n')) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos) continue;
    const std::string text = Trim(line);
    if (depth != std::string::npos && indent <= depth) depth = std::string::npos;
    if (text == "Fabric") {
      depth = indent;
      fabrics.emplace_back();
      continue;
    }
    if (depth == std::string::npos) continue;
    const size_t colon = text.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = Trim(text.substr(0, colon));
    const std::string value = Trim(text.substr(colon + 1));
    if (key == "State") fabrics.back().state = value;
    if (key == "CliqueId") fabrics.back().clique = value;
    if (key == "ClusterUUID") fabrics.back().cluster = value;
  }
  std::optional<std::string> domain;
  for (const Fabric& f : fabrics) {
    const bool zero = f.cluster.find_first_not_of("0-") == std::string::npos;
    if (f.state != "Completed" || zero || f.cluster == "N/A" || f.clique.empty() ||
        !std::all_of(f.clique.begin(), f.clique.end(), ::isdigit)) {
      continue;
    }
    const std::string mine = f.cluster + "." + f.clique;
    if (domain && *domain != mine) return std::nullopt;
    domain = mine;
  }
  return domain;
}

}  // namespace berth
