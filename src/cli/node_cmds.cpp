// berth nodes / drain / undrain, and berth local up / down / status.
#include <fmt/format.h>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/strings.h"
#include "net/http.h"

namespace berth::cli {

namespace {

std::string NumText(const json::value& v) {
  if (v.is_double()) {
    std::string s = fmt::format("{:.2f}", v.as_double());
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  }
  return SerializeJson(v);
}

std::string GpuSummary(const json::object& free, const json::object& cap) {
  std::vector<std::string> parts;
  for (const auto& [type, total] : cap) {
    const json::value* f = free.if_contains(type);
    parts.push_back(
        fmt::format("{} {}/{}", std::string(type), f ? NumText(*f) : "0", NumText(total)));
  }
  return parts.empty() ? "-" : Join(parts, ", ");
}

std::string StrOr(const json::object& o, const char* key, const std::string& fallback = "-") {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : fallback;
}

// The HEALTH column: "ok", "drained: health: REASON", or the fenced GPUs ("GPU 2: ...").
std::string HealthSummary(const json::object& n) {
  const json::value* h = n.if_contains("health");
  if (!h || !h->is_object()) return "-";
  const json::object& health = h->as_object();
  std::string state = StrOr(health, "state", "ok");
  if (state == "drained") {
    std::string since;
    if (auto at = ParseRfc3339(StrOr(health, "since", ""))) {
      since = " (since " + FormatAgo(*at, SystemClock::Get().Now()) + ")";
    }
    return "drained: " + StrOr(health, "reason") + since;
  }
  std::vector<std::string> gpus;
  for (const auto& g : health.at("gpus").as_array()) {
    gpus.push_back(StrOr(g.as_object(), "reason"));
  }
  return gpus.empty() ? state : Join(gpus, "; ");
}

// The HEALTH column's short form: "ok", "drained", "2 GPUs fenced" (`berth nodes NAME` says why).
// A node's GPU sharing in full (`berth nodes NAME`).
std::string SharingText(const std::string& sharing) {
  if (sharing == "mps") return "mps (GPU fractions enforced by an MPS daemon per device)";
  if (sharing == "none") return "none (GPU fractions are not enforced: no nvidia-cuda-mps-control)";
  return sharing;
}

std::string HealthShort(const json::object& n) {
  const json::value* h = n.if_contains("health");
  if (!h || !h->is_object()) return "-";
  const json::object& health = h->as_object();
  const std::string state = StrOr(health, "state", "ok");
  if (state == "drained") return "drained";
  const size_t fenced = health.at("gpus").as_array().size();
  if (fenced > 0) return fmt::format("{} GPU{} fenced", fenced, fenced == 1 ? "" : "s");
  return state;
}

// The labels a user set (`--label`), comma-separated; berth's own (berth.*) are in `berth nodes
// NAME`.
std::string UserLabels(const json::object& n) {
  std::vector<std::string> labels;
  for (const auto& [k, v] : n.at("labels").as_object()) {
    if (std::string_view(k).starts_with("berth.")) continue;
    labels.push_back(std::string(k) + "=" + std::string(v.as_string()));
  }
  return labels.empty() ? "-" : Join(labels, ",");
}

// A node's place in the topology levels (docs/topology.md): "r1/s1", with "?" for a level whose
// label it lacks; "" where the cluster defines no levels.
std::string TopologyText(const json::object& n) {
  const json::value* t = n.if_contains("topology");
  if (t == nullptr || !t->is_object()) return "";
  std::vector<std::string> values;
  for (const auto& [level, domain] : t->as_object()) {
    if (!domain.is_string()) {
      values.emplace_back("?");
      continue;
    }
    const std::string path(domain.as_string());  // "r1/s1": its own value is the last
    values.push_back(path.substr(path.rfind('/') + 1));
  }
  return Join(values, "/");
}

// `berth nodes NAME`: one node, its health and the last run of each probe.
int ShowNode(const json::object& n) {
  fmt::print("Node:      {}\n", StrOr(n, "name"));
  fmt::print("State:     {}{}\n", StrOr(n, "state"),
             n.at("drained_by_operator").as_bool() ? " (drained by an operator)" : "");
  const std::string pool = StrOr(n, "pool", "");
  fmt::print("Pool:      {}\n", pool.empty() ? "(default)" : pool);
  fmt::print("Address:   {}\n", StrOr(n, "address"));
  const json::object& cap = n.at("capacity").as_object();
  const json::object& free = n.at("free").as_object();
  fmt::print("Free:      GPUs {}, CPUs {} of {}, memory {} of {} GiB\n",
             GpuSummary(free.at("gpus").as_object(), cap.at("gpus").as_object()),
             NumText(free.at("cpus")), NumText(cap.at("cpus")), NumText(free.at("memory")),
             NumText(cap.at("memory")));
  for (const auto& [k, v] : n.at("labels").as_object()) {
    fmt::print("Label:     {}={}\n", std::string(k), std::string(v.as_string()));
  }
  fmt::print("Health:    {}\n", HealthSummary(n));
  const json::object& health = n.at("health").as_object();
  for (const auto& f : health.at("faults").as_array()) {
    const json::object& fault = f.as_object();
    fmt::print("  fault:   {} (since {}; cleared by {})\n", StrOr(fault, "reason"),
               StrOr(fault, "since"), StrOr(fault, "cleared_by"));
  }
  if (const json::value* t = n.if_contains("topology"); t && t->is_object()) {
    std::vector<std::string> parts;
    for (const auto& [level, domain] : t->as_object()) {
      parts.push_back(std::string(level) + " " +
                      (domain.is_string() ? std::string(domain.as_string())
                                          : "none (no '" + std::string(level) +
                                                "' label: outside every domain of it)"));
    }
    fmt::print("Topology:  {}\n", Join(parts, ", "));
  }
  fmt::print("Isolation: {}\n", StrOr(n, "isolation"));
  fmt::print("Sharing:   {}\n", SharingText(StrOr(n, "sharing", "unknown")));
  if (const json::value* mig = n.if_contains("mig"); mig && mig->is_object()) {
    const json::object& m = mig->as_object();
    fmt::print("MIG:       {}\n", m.at("reconfigure").as_bool()
                                      ? "its idle GPUs may be re-sliced (--mig-reconfigure)"
                                      : "layouts fixed");
    for (const auto& [gpu, profiles] : m.at("changing").as_object()) {
      std::vector<std::string> names;
      for (const auto& p : profiles.as_array()) names.emplace_back(p.as_string());
      fmt::print("  GPU {}:   being re-sliced to {}\n", std::string(gpu), Join(names, ","));
    }
    if (m.at("error").is_string()) {
      fmt::print("  last re-slice failed: {}\n", std::string(m.at("error").as_string()));
    }
  }
  Table t({"PROBE", "RESULT", "AT", "TOOK", "FAILURES", "TIMEOUTS"});
  for (const auto& p : health.at("probes").as_array()) {
    const json::object& probe = p.as_object();
    std::string result = probe.at("ok").as_bool() ? "ok" : StrOr(probe, "reason", "failed");
    t.Add({StrOr(probe, "name"), result, StrOr(probe, "at"),
           SerializeJson(probe.at("duration_ms")) + " ms", SerializeJson(probe.at("failures")),
           SerializeJson(probe.at("timeouts"))});
  }
  fmt::print("\n{}", t.Render());
  return 0;
}

}  // namespace

// "12-03 16:00Z" of an RFC 3339 time (the year, seconds and fraction left out).
std::string ShortTime(const json::value& v) {
  const std::string t = v.is_string() ? std::string(v.as_string()) : "";
  return t.size() >= 16 ? t.substr(5, 5) + " " + t.substr(11, 5) + "Z" : t;
}

// The RESERVED column: "demo until 12-03 16:00Z", "demo from 12-04 09:00Z", "maintenance upgrade
// until ...", "upgrade over: awaiting health", or "-".
std::string ReservedText(const json::object& n) {
  if (n.contains("maintenance_hold")) {
    return StrOr(n, "maintenance_hold") + " over: awaiting health";
  }
  if (!n.contains("reservation")) return "-";
  const json::object& r = n.at("reservation").as_object();
  const bool active = r.at("active").as_bool();
  return std::string(r.at("maintenance").as_bool() ? "maintenance " : "") + StrOr(r, "name") +
         (active ? " until " + ShortTime(r.at("end")) : " from " + ShortTime(r.at("start")));
}

int Nodes(const GlobalFlags& g, bool as_json, const std::string& only) {
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  auto res = conn.Call("GET", "/v1/nodes");
  if (!res.ok()) return Fail(res.status());
  const json::array& nodes = res->as_object().at("nodes").as_array();
  if (!only.empty()) {
    for (const auto& nv : nodes) {
      if (StrOr(nv.as_object(), "name") != only) continue;
      if (as_json) {
        fmt::print("{}\n", SerializeJson(nv));
        return 0;
      }
      return ShowNode(nv.as_object());
    }
    return Fail(Status::NotFound("no node named '" + only + "'"));
  }
  if (as_json) {
    fmt::print("{}\n", SerializeJson(nodes));
    return 0;
  }
  // Short forms (the table fits a terminal); `berth nodes NAME` says each in full.
  // With topology levels, a TOPOLOGY column after POOL: each node's finest domain.
  const bool levels = !nodes.empty() && nodes.front().as_object().contains("topology");
  std::vector<std::string> columns = {"NAME",
                                      "STATE",
                                      "POOL",
                                      "LABELS",
                                      "GPUS free/all",
                                      "CPUS free/all",
                                      "MEM GiB free/all",
                                      "ISOLATION",
                                      "SHARING",
                                      "HEALTH",
                                      "ADDRESS"};
  if (levels) columns.insert(columns.begin() + 3, "TOPOLOGY");
  // With reservations, a RESERVED column after STATE: the window in force, else the next in a week.
  const bool reservations = std::any_of(nodes.begin(), nodes.end(), [](const json::value& v) {
    return v.as_object().contains("reservation") || v.as_object().contains("maintenance_hold");
  });
  if (reservations) columns.insert(columns.begin() + 2, "RESERVED");
  Table t(columns);
  bool shortened = false;
  bool outside = false;  // a node lacks some level's label
  for (const auto& nv : nodes) {
    const json::object& n = nv.as_object();
    const json::object& cap = n.at("capacity").as_object();
    const json::object& free = n.at("free").as_object();
    std::string state(n.at("state").as_string());
    if (state == "DOWN" && n.at("down_since").is_string())
      state += " since " + std::string(n.at("down_since").as_string());
    std::string pool(n.at("pool").as_string());
    std::string isolation = StrOr(n, "isolation");
    if (const size_t colon = isolation.find(':'); colon != std::string::npos) {
      isolation.resize(colon);  // "none: REASON"
      shortened = true;
    }
    const std::string health = HealthShort(n);
    shortened = shortened || health != HealthSummary(n);
    std::vector<std::string> row = {
        std::string(n.at("name").as_string()),
        state,
        pool.empty() ? "-" : pool,
        UserLabels(n),
        GpuSummary(free.at("gpus").as_object(), cap.at("gpus").as_object()),
        NumText(free.at("cpus")) + "/" + NumText(cap.at("cpus")),
        NumText(free.at("memory")) + "/" + NumText(cap.at("memory")),
        isolation,
        StrOr(n, "sharing", "unknown"),
        health,
        std::string(n.at("address").as_string())};
    if (reservations) row.insert(row.begin() + 2, ReservedText(n));
    if (levels) {
      const std::string topology = TopologyText(n);
      outside = outside || topology.find('?') != std::string::npos;
      row.insert(row.begin() + 3, topology);
    }
    t.Add(row);
  }
  fmt::print("{}", t.Render());
  if (outside) {
    fmt::print(
        "(?: the node lacks that topology level's label and is outside every domain of it)\n");
  }
  if (shortened) {
    fmt::print("(berth nodes NAME says a node's isolation and health in full)\n");
  }
  return 0;
}

int Drain(const GlobalFlags& g, const std::string& node, bool drain, bool force) {
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  auto res = conn.Call("POST", "/v1/nodes/" + net::UrlEncode(node) +
                                   (drain   ? "/drain"
                                    : force ? "/undrain?force=1"
                                            : "/undrain"));
  if (!res.ok()) return Fail(res.status());
  const json::object& n = res->as_object();
  fmt::print("Node {} is {}.\n", node, StrOr(n, "state"));
  if (!drain && n.contains("health") &&
      StrOr(n.at("health").as_object(), "state", "ok") == "drained") {
    fmt::print(
        "It stays drained by its health probes ({}): they take it back after clean runs, "
        "or `berth undrain --force {}` clears it now.\n",
        StrOr(n.at("health").as_object(), "reason"), node);
  }
  return 0;
}

int LocalUp(const LocalClusterOptions& options, const std::string& self_exe) {
  if (auto running = FindLocalCluster(); running.ok()) {
    fmt::print(stderr,
               "berth: a local cluster is already running at {} ({} node(s)); `berth local down` "
               "stops it\n",
               running->server, running->nodes.size());
    return 0;
  }
  auto c = StartLocalCluster(self_exe, options);
  if (!c.ok()) return Fail(c.status());
  fmt::print("Local cluster up at {} with {} node(s): {}\n", c->server, c->nodes.size(),
             Join(c->nodes, ", "));
  fmt::print("State and logs are under {}.\n", BerthHome());
  Connection conn(c->unix_socket, "", self_exe);
  Result<std::string> link =
      conn.Connect().ok() ? DashboardLink(conn) : Result<std::string>(Status::Unavailable(""));
  if (link.ok()) {
    fmt::print(
        "Dashboard (this link logs you in once, within 5 minutes; `berth dashboard` prints "
        "a new one):\n  {}\n",
        *link);
  }
  return 0;
}

// Cancels every job still active on the local cluster, as "local cluster stopped" (they would
// otherwise end FAILED when the cluster next comes up); how many, or nullopt when it cannot say.
std::optional<size_t> CancelLocalJobs(const LocalCluster& c, const std::string& self_exe) {
  Connection conn(c.unix_socket, "", self_exe);
  if (!conn.Connect().ok()) return std::nullopt;
  const std::string reason = "local cluster stopped";
  auto res = conn.Call("POST", "/v1/jobs/cancel",
                       SerializeJson(json::object{{"all_users", true}, {"reason", reason}}));
  if (!res.ok() && res.status().code() == Code::kForbidden) {  // not an operator: their own
    res = conn.Call("POST", "/v1/jobs/cancel",
                    SerializeJson(json::object{{"all", true}, {"reason", reason}}));
  }
  if (!res.ok() || !res->is_object()) return std::nullopt;
  const json::value* cancelled = res->as_object().if_contains("cancelled");
  return cancelled && cancelled->is_array() ? cancelled->as_array().size() : 0;
}

int LocalDown(const std::string& self_exe) {
  auto say = [](const std::string& what) {
    fmt::print("{}...\n", what);
    std::fflush(stdout);
  };
  if (auto running = FindLocalCluster(); running.ok()) {
    fmt::print("Stopping the local cluster at {}.\n", running->server);
    if (auto n = CancelLocalJobs(*running, self_exe); n && *n > 0) {
      fmt::print("Cancelled {} active job(s) (\"local cluster stopped\").\n", *n);
    }
  }
  Status st = StopLocalCluster(say);
  if (!st.ok()) return Fail(st);
  fmt::print("Local cluster under {} stopped.\n", BerthHome());
  return 0;
}

int LocalStatus(bool as_json) {
  auto c = FindLocalCluster();
  if (!c.ok()) {
    if (as_json) {
      fmt::print("{}\n",
                 SerializeJson(json::object{{"server", nullptr}, {"nodes", json::array{}}}));
      return 1;
    }
    return Fail(c.status());
  }
  if (as_json) {
    json::array nodes;
    for (const auto& n : c->nodes) nodes.push_back(json::value(n));
    fmt::print("{}\n",
               SerializeJson(json::object{
                   {"server", c->server}, {"nodes", std::move(nodes)}, {"home", BerthHome()}}));
  } else {
    fmt::print("Local cluster at {} with node(s) {} (state under {}).\n", c->server,
               Join(c->nodes, ", "), BerthHome());
  }
  return 0;
}

// --- command line: the registration of each command (cli/command_context.h) ---

void AddLocalCommand(CommandContext& c) {
  auto& local_options = c.Keep<LocalClusterOptions>();
  auto& local_json = c.Keep<bool>(false);
  auto* local = c.app.add_subcommand("local", "Manage the local cluster under BERTH_HOME");
  local->require_subcommand(1);
  auto* up = local->add_subcommand("up", "Start a server and agents on this machine");
  up->add_option("--nodes", local_options.nodes, "Number of agents (local-0 ... local-K-1)")
      ->capture_default_str();
  up->add_option("--gpus", local_options.gpus,
                 "GPUs per node, TYPE:N (default: discover with nvidia-smi)");
  up->add_option("--cpus", local_options.cpus, "CPUs per node (default: this machine's)");
  up->add_option("--memory", local_options.memory,
                 "Memory per node in GiB (default: this machine's)");
  up->add_option("--isolation", local_options.isolation,
                 "auto: jobs in cgroups with their limits where the agents may (as root); off: "
                 "no limits")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  up->callback([&] { c.rc = LocalUp(local_options, c.g.self_exe); });
  local->add_subcommand("down", "Stop the local cluster and its jobs")->callback([&] {
    c.rc = LocalDown(c.g.self_exe);
  });
  auto* status = local->add_subcommand("status", "Show the local cluster");
  status->add_flag("--json", local_json, "Machine-readable output");
  status->callback([&] { c.rc = LocalStatus(local_json); });
}

void AddNodesCommand(CommandContext& c) {
  auto& nodes_json = c.Keep<bool>(false);
  auto& nodes_name = c.Keep<std::string>();
  auto* nodes = c.app.add_subcommand(
      "nodes", "List nodes: state, pool, labels, resources total and free, health");
  nodes->add_option("node", nodes_name,
                    "Show this node only: its health faults and the last run of each probe");
  nodes->add_flag("--json", nodes_json,
                  "Machine-readable output (a JSON array of nodes; with NODE, that node)");
  c.AddGlobal(nodes);
  nodes->callback([&] { c.rc = Nodes(c.g, nodes_json, nodes_name); });
}

void AddDrainCommand(CommandContext& c) {
  auto& drain_node = c.Keep<std::string>();
  auto* drain =
      c.app.add_subcommand("drain", "Let a node finish its jobs and take no new ones (operators)");
  drain->add_option("node", drain_node, "Node name")->required();
  c.AddGlobal(drain);
  drain->callback([&] { c.rc = Drain(c.g, drain_node, true, false); });
}

void AddUndrainCommand(CommandContext& c) {
  auto& undrain_node = c.Keep<std::string>();
  auto& undrain_force = c.Keep<bool>(false);
  auto* undrain = c.app.add_subcommand("undrain", "Let a drained node take jobs again (operators)");
  undrain->add_option("node", undrain_node, "Node name")->required();
  undrain->add_flag("--force", undrain_force,
                    "Also clear a drain by the node's health probes, prolog or epilog (the agent "
                    "forgets its faults and probes afresh)");
  c.AddGlobal(undrain);
  undrain->callback([&] { c.rc = Drain(c.g, undrain_node, false, undrain_force); });
}

}  // namespace berth::cli
