// berth usage, and berth admin team set|list (docs/fair-share.md).
#include <fmt/format.h>

#include <cmath>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "net/http.h"

namespace berth::cli {
namespace {

// "A100:16,V100:8" -> {"A100": 16, "V100": 8}; "none" -> {}.
Result<json::object> GpuAmounts(const std::string& flag, const std::string& text) {
  json::object out;
  if (text == "none") return out;
  for (const std::string& item : Split(text, ',')) {
    const size_t colon = item.find(':');
    std::optional<int64_t> milli =
        colon == std::string::npos ? std::nullopt : ParseMilli(Trim(item.substr(colon + 1)));
    if (colon == std::string::npos || colon == 0 || !milli || *milli < 0) {
      return Status::Invalid(flag + ": expected TYPE:N[,TYPE:N] like A100:16,V100:8, got '" + item +
                             "'");
    }
    out[Trim(item.substr(0, colon))] = static_cast<double>(*milli) / 1000;
  }
  return out;
}

std::string Number(const json::value& v) {
  if (v.is_null()) return "-";
  const double d = v.is_double() ? v.as_double() : static_cast<double>(AsInt(v).value_or(0));
  if (d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
  return fmt::format("{:.1f}", d);
}

// "A100:16, V100:8" from {"A100": 16, "V100": 8}; "-" when empty.
std::string Amounts(const json::value& v) {
  if (!v.is_object() || v.as_object().empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [type, n] : v.as_object()) parts.push_back(std::string(type) + ":" + Number(n));
  return Join(parts, ",");
}

}  // namespace

int TeamSet(const GlobalFlags& g, const TeamSetFlags& f) {
  json::object body;
  if (f.gpus) {
    auto quota = GpuAmounts("--gpus", *f.gpus);
    if (!quota.ok()) return Fail(quota.status());
    body["quota"] = std::move(*quota);
  }
  if (f.borrow_limit) {
    auto limit = GpuAmounts("--borrow-limit", *f.borrow_limit);
    if (!limit.ok()) return Fail(limit.status());
    body["borrow_limit"] = std::move(*limit);
  }
  if (f.weight) body["weight"] = *f.weight;
  auto res =
      CallServer(g, "POST", "/v1/admin/teams/" + net::UrlEncode(f.name), SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  fmt::print("team {}: quota {}, borrow limit {}, weight {}\n", f.name, Amounts(o.at("quota")),
             o.at("borrow_limit").as_object().empty() ? "none" : Amounts(o.at("borrow_limit")),
             Number(o.at("weight")));
  return 0;
}

int TeamList(const GlobalFlags& g, bool as_json) {
  auto res = CallServer(g, "GET", "/v1/teams");
  if (!res.ok()) return Fail(res.status());
  const json::array& teams = res->as_object().at("teams").as_array();
  if (as_json) {
    fmt::print("{}\n", SerializeJson(teams));
    return 0;
  }
  Table t({"TEAM", "QUOTA", "BORROW LIMIT", "WEIGHT", "USES NOW", "USAGE (GPU-h)", "USERS"});
  for (const auto& v : teams) {
    const json::object& o = v.as_object();
    std::vector<std::string> users;
    for (const auto& u : o.at("users").as_array()) users.push_back(std::string(u.as_string()));
    const double usage = o.at("usage").is_double() ? o.at("usage").as_double() : 0;
    t.Add({o.at("name").is_null() ? "(default)" : std::string(o.at("name").as_string()),
           Amounts(o.at("quota")), Amounts(o.at("borrow_limit")), Number(o.at("weight")),
           Amounts(o.at("uses")), fmt::format("{:.1f}", usage / 3600),
           users.empty() ? "-" : Join(users, ",")});
  }
  fmt::print("{}", t.Render());
  return 0;
}

int Usage(const GlobalFlags& g, const UsageFlags& f) {
  if (f.by != "user" && f.by != "team") {
    return Fail(Status::Invalid("--by: user or team, not '" + f.by + "'"));
  }
  std::string target = "/v1/usage?by=" + f.by + "&since=" + net::UrlEncode(f.since);
  if (!f.until.empty()) target += "&until=" + net::UrlEncode(f.until);
  auto res = CallServer(g, "GET", target);
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(o));
    return 0;
  }
  fmt::print("Usage from {} to {}, by {}\n", std::string(o.at("since").as_string()),
             std::string(o.at("until").as_string()), f.by);
  // With MIG slices among the types, a column of the GPU-hours as whole GPUs (a slice by its
  // share).
  bool slices = false;
  for (const auto& v : o.at("rows").as_array()) {
    const json::object& r = v.as_object();
    if (const json::value* whole = r.if_contains("whole_gpu_seconds")) {
      slices = slices || SerializeJson(*whole) != SerializeJson(r.at("gpu_seconds"));
    }
  }
  std::vector<std::string> head = {f.by == "team" ? "TEAM" : "USER", "GPU-HOURS"};
  if (slices) head.push_back("AS WHOLE GPUS");
  head.push_back("GPU EFF");
  head.push_back("IDLE GPU-H");
  for (const char* h : {"CPU-HOURS", "CPU EFF", "MEM EFF", "JOBS", "MEAN WAIT", "PREEMPTED"}) {
    head.push_back(h);
  }
  Table t(head);
  auto hours = [](const json::object& by_type) {
    std::vector<std::string> out;
    for (const auto& [type, seconds] : by_type) {
      out.push_back(
          fmt::format("{}:{:.2f}", std::string(type), seconds.to_number<double>() / 3600));
    }
    return out.empty() ? std::string("-") : Join(out, " ");
  };
  auto percent = [](const json::value& v) {
    return v.is_null() ? std::string("-") : fmt::format("{:.0f}%", v.to_number<double>() * 100);
  };
  for (const auto& v : o.at("rows").as_array()) {
    const json::object& r = v.as_object();
    const json::value& name = r.at(f.by);
    std::vector<std::string> row = {name.is_null() ? "(default)" : std::string(name.as_string()),
                                    hours(r.at("gpu_seconds").as_object())};
    if (slices) row.push_back(hours(r.at("whole_gpu_seconds").as_object()));
    // Sampled GPUs only (docs/idle.md): "-" where no node sampled them.
    const json::value* idle = r.if_contains("idle_gpu_seconds");
    row.push_back(r.contains("gpu_efficiency") ? percent(r.at("gpu_efficiency")) : "-");
    row.push_back(idle && r.at("sampled_gpu_seconds").to_number<double>() > 0
                      ? fmt::format("{:.2f}", idle->to_number<double>() / 3600)
                      : std::string("-"));
    for (std::string cell :
         {fmt::format("{:.2f}", r.at("cpu_seconds").to_number<double>() / 3600),
          percent(r.at("cpu_efficiency")), percent(r.at("memory_efficiency")), Number(r.at("jobs")),
          FormatDuration(static_cast<DurationMs>(r.at("mean_wait_s").to_number<double>() * 1000)),
          Number(r.at("preemptions"))}) {
      row.push_back(std::move(cell));
    }
    t.Add(row);
  }
  fmt::print("{}", t.Render());
  return 0;
}

// --- command line: the registration of each command (cli/command_context.h) ---

void AddUsageCommand(CommandContext& c) {
  auto& usage_flags = c.Keep<UsageFlags>();
  auto* usage = c.app.add_subcommand(
      "usage",
      "GPU-hours by type, GPU efficiency and idle GPU-hours (sampled GPUs), CPU-hours, CPU and "
      "memory efficiency, jobs, mean wait and preemptions, per user or team");
  usage
      ->add_option("--since", usage_flags.since,
                   "Start of the window: a duration back from now (7d, 12h) or a time "
                   "(2026-11-01T00:00:00Z); rounded down to the hour")
      ->capture_default_str();
  usage->add_option("--until", usage_flags.until, "End of the window (default: now)");
  usage->add_option("--by", usage_flags.by, "user or team")->capture_default_str();
  usage->add_flag("--json", usage_flags.as_json, "Machine-readable output");
  c.AddGlobal(usage);
  usage->callback([&] { c.rc = Usage(c.g, usage_flags); });
}

}  // namespace berth::cli
