#include "cli/top_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "common/quantity.h"
#include "common/strings.h"

namespace berth::cli {
namespace {

std::string Str(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : std::string();
}

double AsNumber(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.as_int64());
  if (v.is_uint64()) return static_cast<double>(v.as_uint64());
  if (v.is_double()) return v.as_double();
  return 0;
}

// "####------": `used` of `total` in `cells` cells.
std::string Bar(double used, double total, int cells) {
  const int full = total > 0 ? static_cast<int>(used / total * cells + 0.5) : 0;
  const int n = std::clamp(full, 0, cells);
  return std::string(static_cast<size_t>(n), '#') +
         std::string(static_cast<size_t>(cells - n), '-');
}

char Mark(size_t k) {
  if (k < 26) return static_cast<char>('A' + k);
  if (k < 52) return static_cast<char>('a' + (k - 26));
  return '#';
}

// The header: the server and time, then nodes by state, GPUs by type and jobs by state.
void AddTotals(const TopFrameInput& in, std::vector<std::string>& lines) {
  const json::array& nodes = in.nodes->at("nodes").as_array();
  std::map<std::string, int> states;
  std::map<std::string, std::pair<double, double>> gpus;  // type -> (used, total), nodes not down
  for (const auto& nv : nodes) {
    const json::object& n = nv.as_object();
    const std::string state = Str(n.at("state"));
    ++states[state];
    if (state == "DOWN") continue;
    for (const auto& dv : n.at("devices").as_array()) {
      const json::object& d = dv.as_object();
      auto& [used, total] = gpus[Str(d.at("type"))];
      used += 1 - AsNumber(d.at("free"));
      total += 1;
    }
  }
  int pending = 0;
  int running = 0;
  for (const auto& rv : in.queue->at("rows").as_array()) {
    const json::object& r = rv.as_object();
    if (Str(r.at("kind")) == "group") {
      const json::object& c = r.at("counts").as_object();
      for (const auto& [status, n] : c) {
        if (status == "PENDING") pending += static_cast<int>(AsNumber(n));
        if (status == "STARTING" || status == "SETTING_UP" || status == "RUNNING") {
          running += static_cast<int>(AsNumber(n));
        }
      }
      continue;
    }
    const std::string status = Str(r.at("status"));
    if (status == "PENDING") ++pending;
    if (status == "STARTING" || status == "SETTING_UP" || status == "RUNNING") ++running;
  }
  lines.push_back(fmt::format("berth top - {} - {} (q quits)", in.server,
                              FormatRfc3339(in.now).substr(11, 8) + " UTC"));
  std::vector<std::string> gpu_parts;
  for (const auto& [type, ut] : gpus) {
    gpu_parts.push_back(fmt::format("{} {}/{} used", type,
                                    FormatMilli(static_cast<int64_t>(ut.first * 1000 + 0.5)),
                                    static_cast<int>(ut.second)));
  }
  lines.push_back(
      fmt::format("nodes: {} up, {} draining, {} down | GPUs: {} | jobs: {} running, "
                  "{} pending{}",
                  states["UP"], states["DRAINING"], states["DOWN"],
                  gpu_parts.empty() ? "none" : Join(gpu_parts, ", "), running, pending,
                  AsNumber(in.queue->at("active_not_shown")) > 0 ? " (and more)" : ""));
  lines.push_back("");
}

// After a node's line: its reservation (docs/reservations.md) — "  [reserved demo]" while one
// holds it, "  [maintenance upgrade]", "  [demo at 12-04 09:00Z]" when one is ahead, "" when none.
std::string ReservedMark(const json::object& n) {
  if (const json::value* hold = n.if_contains("maintenance_hold")) {
    return "  [after maintenance " + Str(*hold) + ": awaiting health]";
  }
  const json::value* r = n.if_contains("reservation");
  if (r == nullptr || !r->is_object()) return "";
  const json::object& o = r->as_object();
  const std::string name = Str(o.at("name"));
  if (o.at("active").as_bool()) {
    return o.at("maintenance").as_bool() ? "  [maintenance " + name + "]"
                                         : "  [reserved " + name + "]";
  }
  const std::string start = Str(o.at("start"));
  return "  [" + name + " at " +
         (start.size() >= 16 ? start.substr(5, 5) + " " + start.substr(11, 5) + "Z" : start) + "]";
}

// The GPU maps: one line per node, a cell per device (a letter per job, '+' shared, '.' free, 'x'
// down), then which job each letter is.
void AddNodeMaps(const TopFrameInput& in, std::vector<std::string>& lines) {
  const json::array& nodes = in.nodes->at("nodes").as_array();
  std::map<int64_t, std::pair<char, std::string>> legend;  // job -> (mark, user)
  auto mark_of = [&](int64_t job, const std::string& user) {
    auto [it, fresh] = legend.try_emplace(job, ' ', user);
    if (fresh) it->second.first = Mark(legend.size() - 1);
    return it->second.first;
  };
  size_t name_width = 4;
  for (const auto& nv : nodes) {
    name_width = std::max(name_width, Str(nv.as_object().at("name")).size());
  }
  lines.push_back(fmt::format("{:<{}}  {:<8}  {:<16}  {:<10}  {:<10}", "NODE", name_width, "STATE",
                              "GPUS", "CPU", "MEMORY"));
  // Room for the nodes: leave the queue at least a few lines.
  const int room = std::max(3, in.height - 14);
  int shown = 0;
  for (const auto& nv : nodes) {
    const json::object& n = nv.as_object();
    if (shown == room) {
      lines.push_back(fmt::format("... {} more node(s) (berth nodes lists them)",
                                  nodes.size() - static_cast<size_t>(shown)));
      break;
    }
    ++shown;
    const std::string state = Str(n.at("state"));
    std::string map = "[";
    for (const auto& dv : n.at("devices").as_array()) {
      const json::object& d = dv.as_object();
      const json::value* jobs = d.if_contains("jobs");
      const size_t holders = jobs != nullptr && jobs->is_array() ? jobs->as_array().size() : 0;
      if (state == "DOWN") {
        map += 'x';
      } else if (holders == 0) {
        map += '.';
      } else if (holders > 1) {
        for (const auto& jv : jobs->as_array()) {
          mark_of(AsInt(jv.as_object().at("id")).value_or(0), Str(jv.as_object().at("user")));
        }
        map += '+';
      } else {
        const json::object& j = jobs->as_array().front().as_object();
        map += mark_of(AsInt(j.at("id")).value_or(0), Str(j.at("user")));
      }
    }
    map += "]";
    const json::object& cap = n.at("capacity").as_object();
    const json::object& free = n.at("free").as_object();
    const double cpus = AsNumber(cap.at("cpus"));
    const double mem = AsNumber(cap.at("memory"));
    lines.push_back(fmt::format("{:<{}}  {:<8}  {:<16}  {}  {}{}", Str(n.at("name")), name_width,
                                state, map, Bar(cpus - AsNumber(free.at("cpus")), cpus, 10),
                                Bar(mem - AsNumber(free.at("memory")), mem, 10), ReservedMark(n)));
  }
  if (!legend.empty()) {
    std::vector<std::string> parts;
    for (const auto& [job, mark_user] : legend) {
      parts.push_back(fmt::format("{}={} ({})", mark_user.first, job, mark_user.second));
    }
    std::string line = "jobs on the map: ";
    for (const std::string& p : parts) {
      if (line.size() + p.size() + 2 > static_cast<size_t>(in.width)) {
        lines.push_back(line);
        line = "  ";
      }
      line += p + "  ";
    }
    lines.push_back(line);
  }
  lines.push_back("");
}

// The queue, as `berth queue` summarizes it, as far as the screen goes.
void AddQueue(const TopFrameInput& in, std::vector<std::string>& lines) {
  lines.push_back("ID         NAME              USER        STATUS");
  for (const auto& rv : in.queue->at("rows").as_array()) {
    if (static_cast<int>(lines.size()) >= in.height - 1) {
      lines.push_back("... (berth queue lists the rest)");
      break;
    }
    const json::object& r = rv.as_object();
    std::string id;
    std::string status;
    if (Str(r.at("kind")) == "group") {
      id = fmt::format("group {}", AsInt(r.at("group")).value_or(0));
      std::vector<std::string> counts;
      for (const auto& [s, c] : r.at("counts").as_object()) {
        counts.push_back(fmt::format("{} {}", AsInt(c).value_or(0), std::string(s)));
      }
      status = Join(counts, ", ");
    } else {
      id = std::to_string(AsInt(r.at("id")).value_or(0));
      status = Str(r.at("status"));
      const std::string reason = Str(r.at("reason"));
      if (status == "PENDING" && !reason.empty()) status += ": " + reason;
    }
    lines.push_back(fmt::format("{:<10} {:<17} {:<11} {}", id, Str(r.at("name")).substr(0, 17),
                                Str(r.at("user")).substr(0, 11), status));
  }
}

// The lines cut to the screen's width and height.
std::string Clip(std::vector<std::string>& lines, int width, int height) {
  std::string out;
  for (size_t k = 0; k < lines.size() && static_cast<int>(k) < height; ++k) {
    std::string& line = lines[k];
    if (line.size() > static_cast<size_t>(width)) line.resize(static_cast<size_t>(width));
    out += line;
    if (k + 1 < lines.size() && static_cast<int>(k) + 1 < height) out += "\n";
  }
  return out;
}

}  // namespace

std::string RenderTop(const TopFrameInput& in) {
  std::vector<std::string> lines;
  AddTotals(in, lines);
  AddNodeMaps(in, lines);
  AddQueue(in, lines);
  return Clip(lines, in.width, in.height);
}

}  // namespace berth::cli
