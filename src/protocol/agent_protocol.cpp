#include "protocol/agent_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "protocol/fields.h"

namespace berth::proto {

using fields::BestEffortId;
using fields::Fields;
using fields::FitsInt;
using fields::ObjectOf;
using fields::ParseDecimal;
using fields::Quoted;

namespace {
constexpr char kLabelsMessage[] = "register: labels must be name=value pairs of [A-Za-z0-9._-]";
constexpr char kGpuMessage[] = "register: each GPU needs an index and a type";
constexpr char kRunningMessage[] =
    "register: each entry of 'running' needs an integer job, attempt and rank";
constexpr char kLogRangeMessage[] = "logs: bad job, attempt, rank or offset";

}  // namespace

// ---------------------------------------------------------------------------------------------
// Node health

namespace {

constexpr size_t kMaxHealthEntries = 256;
constexpr size_t kMaxHealthText = 512;

}  // namespace

std::string NodeHealth::NodeReason() const {
  std::string out;
  for (const auto& fault : faults) {
    if (fault.gpu >= 0) continue;
    if (!out.empty()) out += "; ";
    out += fault.reason;
  }
  return out;
}

bool NodeHealth::NodeFaulty() const {
  return std::any_of(faults.begin(), faults.end(), [](const HealthFault& f) { return f.gpu < 0; });
}

std::set<int> NodeHealth::FaultyGpus() const {
  std::set<int> gpus;
  for (const auto& f : faults) {
    if (f.gpu >= 0) gpus.insert(f.gpu);
  }
  return gpus;
}

std::string NodeHealth::GpuReason(int gpu) const {
  for (const auto& f : faults) {
    if (f.gpu == gpu) return f.reason;
  }
  return "";
}

json::object NodeHealth::Encode() const {
  json::array fs;
  for (const auto& f : faults) {
    json::object o{
        {"probe", f.probe}, {"gpu", f.gpu}, {"reason", f.reason}, {"since_ms", f.since_ms}};
    if (f.sticky) o["sticky"] = true;
    fs.push_back(std::move(o));
  }
  json::array ps;
  for (const auto& p : probes) {
    ps.push_back(json::object{{"name", p.name},
                              {"ok", p.ok},
                              {"timed_out", p.timed_out},
                              {"reason", p.reason},
                              {"at_ms", p.at_ms},
                              {"duration_ms", p.duration_ms},
                              {"failures", p.failures},
                              {"timeouts", p.timeouts}});
  }
  return json::object{{"faults", std::move(fs)}, {"probes", std::move(ps)}};
}

Result<NodeHealth> NodeHealth::Decode(const json::value& body, std::string_view what) {
  auto obj = ObjectOf(body, what, "'health'");
  if (!obj.ok()) return obj.status();
  const std::string w(what);
  NodeHealth h;
  auto array_of = [&](const char* key) -> Result<const json::array*> {
    const json::value* v = (*obj)->if_contains(key);
    if (!v || v->is_null()) return static_cast<const json::array*>(nullptr);
    if (!v->is_array()) return Status::Invalid(w + ": 'health." + key + "' must be an array");
    if (v->as_array().size() > kMaxHealthEntries) {
      return Status::Invalid(w + ": 'health." + key + "' has more than 256 entries");
    }
    return &v->as_array();
  };
  auto text_ok = [](const std::string& s) { return s.size() <= kMaxHealthText; };
  auto faults = array_of("faults");
  if (!faults.ok()) return faults.status();
  for (size_t i = 0; *faults && i < (*faults)->size(); ++i) {
    const json::value& e = (**faults)[i];
    if (!e.is_object()) return Status::Invalid(w + ": health faults must be objects");
    const std::string name = w + ": health fault";
    Fields f(e.as_object(), name);
    HealthFault fault;
    fault.probe = f.String("probe", std::nullopt);
    fault.gpu = f.Int("gpu", -1);
    fault.reason = f.String("reason", std::nullopt);
    fault.since_ms = f.Int64("since_ms", 0);
    fault.sticky = f.Bool("sticky", false);
    if (!f.ok()) return f.status();
    if (fault.gpu < -1 || !text_ok(fault.probe) || !text_ok(fault.reason)) {
      return Status::Invalid(w + ": a health fault's gpu, probe or reason is out of range");
    }
    h.faults.push_back(std::move(fault));
  }
  auto probes = array_of("probes");
  if (!probes.ok()) return probes.status();
  for (size_t i = 0; *probes && i < (*probes)->size(); ++i) {
    const json::value& e = (**probes)[i];
    if (!e.is_object()) return Status::Invalid(w + ": health probes must be objects");
    const std::string name = w + ": health probe";
    Fields f(e.as_object(), name);
    ProbeResult p;
    p.name = f.String("name", std::nullopt);
    p.ok = f.Bool("ok", true);
    p.timed_out = f.Bool("timed_out", false);
    p.reason = f.String("reason", "");
    p.at_ms = f.Int64("at_ms", 0);
    p.duration_ms = f.Int64("duration_ms", 0);
    p.failures = f.Int64("failures", 0);
    p.timeouts = f.Int64("timeouts", 0);
    if (!f.ok()) return f.status();
    if (!text_ok(p.name) || !text_ok(p.reason) || p.failures < 0 || p.timeouts < 0) {
      return Status::Invalid(w + ": a health probe's name, reason or counts are out of range");
    }
    h.probes.push_back(std::move(p));
  }
  return h;
}

json::object HealthRequest::Encode() const {
  return json::object{{"node", node}, {"session", session}, {"health", health.Encode()}};
}

Result<HealthRequest> HealthRequest::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "health", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "health");
  HealthRequest r;
  r.node = f.String("node", "");
  r.session = f.String("session", "");
  if (!f.ok()) return f.status();
  const json::value* h = f.Find("health");
  if (!h) return Status::Invalid("health: 'health' is missing");
  auto health = NodeHealth::Decode(*h, "health");
  if (!health.ok()) return health.status();
  r.health = std::move(*health);
  return r;
}

json::object HealthAnswer::Encode() const { return json::object{{"now_ms", now_ms}}; }

Result<HealthAnswer> HealthAnswer::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "health answer", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "health answer");
  HealthAnswer a;
  a.now_ms = f.Int64("now_ms", 0);
  if (!f.ok()) return f.status();
  return a;
}

// ---------------------------------------------------------------------------------------------
// Register

json::object RegisterRequest::Encode() const {
  json::object o;
  o["name"] = name;
  o["node_id"] = node_id;
  o["address"] = address;
  o["pool"] = pool;
  json::object l;
  for (const auto& [k, v] : labels) l[k] = v;
  o["labels"] = std::move(l);
  o["cpus_milli"] = cpus_milli;
  o["memory_mib"] = memory_mib;
  json::array g;
  for (const auto& gpu : gpus) {
    json::object d{{"index", gpu.index}, {"type", gpu.type}};
    if (gpu.slice()) d["parent"] = gpu.parent;
    if (gpu.nvlink != 0) d["nvlink"] = gpu.nvlink;
    if (gpu.pcie != 0) d["pcie"] = gpu.pcie;
    if (gpu.numa >= 0) d["numa"] = gpu.numa;
    g.push_back(std::move(d));
  }
  o["gpus"] = std::move(g);
  json::array r;
  for (const auto& a : running) {
    r.push_back(json::object{{"job", a.job}, {"attempt", a.attempt}, {"rank", a.rank}});
  }
  o["running"] = std::move(r);
  o["isolation"] = isolation;
  if (!sharing.empty()) o["sharing"] = sharing;
  if (mig_reconfigure) o["mig_reconfigure"] = true;
  if (!mig_error.empty()) o["mig_error"] = mig_error;
  if (job_memory_default_mib > 0) o["job_memory_default_mib"] = job_memory_default_mib;
  if (!container_mounts.empty()) {
    json::array m;
    for (const std::string& path : container_mounts) m.emplace_back(path);
    o["container_mounts"] = std::move(m);
  }
  if (health) o["health"] = health->Encode();
  return o;
}

Result<RegisterRequest> RegisterRequest::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "register", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "register");
  RegisterRequest r;
  r.name = f.String("name", "");
  r.node_id = f.String("node_id", "");
  r.address = f.String("address", "");
  r.pool = f.String("pool", "");
  r.cpus_milli = f.Int64("cpus_milli", 0);
  r.memory_mib = f.Int64("memory_mib", 0);
  r.isolation = f.String("isolation", "");
  r.sharing = f.String("sharing", "");
  r.mig_reconfigure = f.Bool("mig_reconfigure", false);
  r.mig_error = f.String("mig_error", "");
  r.job_memory_default_mib = f.Int64("job_memory_default_mib", 0);
  if (!f.ok()) return f.status();
  if (r.isolation.size() > 512) return Status::Invalid("register: 'isolation' is too long");
  if (r.sharing.size() > 64) return Status::Invalid("register: 'sharing' is too long");
  if (r.mig_error.size() > 1024) return Status::Invalid("register: 'mig_error' is too long");
  if (const json::value* h = f.Find("health")) {
    auto health = NodeHealth::Decode(*h, "register");
    if (!health.ok()) return health.status();
    r.health = std::move(*health);
  }
  if (const json::value* l = f.Find("labels")) {
    if (!l->is_object()) return Status::Invalid("register: 'labels' must be an object");
    for (const auto& [k, v] : l->as_object()) {
      if (!v.is_string()) return Status::Invalid(kLabelsMessage);
      r.labels[std::string(k)] = std::string(v.as_string());
    }
  }
  if (const json::value* m = f.Find("container_mounts")) {
    constexpr char kMounts[] = "register: 'container_mounts' must be at most 64 absolute paths";
    if (!m->is_array() || m->as_array().size() > 64) return Status::Invalid(kMounts);
    for (const auto& p : m->as_array()) {
      if (!p.is_string() || !p.as_string().starts_with("/") || p.as_string().size() > 4096) {
        return Status::Invalid(kMounts);
      }
      r.container_mounts.emplace_back(p.as_string());
    }
  }
  if (const json::value* g = f.Find("gpus")) {
    if (!g->is_array()) return Status::Invalid("register: 'gpus' must be an array");
    for (const auto& d : g->as_array()) {
      if (!d.is_object()) return Status::Invalid("register: gpus must be objects");
      Fields gf(d.as_object(), "register");
      NodeGpu gpu;
      gpu.index = gf.Int("index", -1);
      gpu.type = gf.String("type", "");
      gpu.parent = static_cast<int>(gf.Int("parent", -1));
      gpu.nvlink = static_cast<int>(gf.Int("nvlink", 0));
      gpu.pcie = static_cast<int>(gf.Int("pcie", 0));
      gpu.numa = static_cast<int>(gf.Int("numa", -1));
      if (!gf.ok()) return Status::Invalid(kGpuMessage);
      r.gpus.push_back(std::move(gpu));
    }
  }
  if (const json::value* run = f.Find("running")) {
    if (!run->is_array()) return Status::Invalid("register: 'running' must be an array");
    for (const auto& e : run->as_array()) {
      if (!e.is_object()) return Status::Invalid(kRunningMessage);
      Fields ef(e.as_object(), "register");
      AttemptRank a;
      a.job = ef.Int64("job", std::nullopt);
      a.attempt = ef.Int("attempt", std::nullopt);
      a.rank = ef.Int("rank", std::nullopt);
      if (!ef.ok()) return Status::Invalid(kRunningMessage);
      r.running.push_back(a);
    }
  }
  BERTH_RETURN_IF_ERROR(r.Validate());
  return r;
}

Status RegisterRequest::Validate() const {
  if (!IsValidName(name)) return Status::Invalid("register: invalid node name '" + name + "'");
  if (node_id.size() < 8) return Status::Invalid("register: node_id is missing");
  if (cpus_milli <= 0 || memory_mib < 0)
    return Status::Invalid("register: cpus must be positive and memory not negative");
  if (!pool.empty() && !IsValidName(pool)) return Status::Invalid("register: invalid pool name");
  for (const auto& [k, v] : labels) {
    if (!IsValidName(k) || !IsValidName(v)) return Status::Invalid(kLabelsMessage);
  }
  for (const auto& gpu : gpus) {
    if (gpu.index < 0 || gpu.parent < -1 || !IsValidName(gpu.type))
      return Status::Invalid(kGpuMessage);
  }
  return Status::Ok();
}

json::object RegisterAnswer::Encode() const {
  return json::object{{"session", session}, {"lease_ms", lease_ms}, {"heartbeat_ms", heartbeat_ms}};
}

Result<RegisterAnswer> RegisterAnswer::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "register answer", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "register answer");
  RegisterAnswer a;
  a.session = f.String("session", std::nullopt);
  a.lease_ms = f.Int64("lease_ms", 30'000);
  a.heartbeat_ms = f.Int64("heartbeat_ms", a.lease_ms / 4);
  if (!f.ok()) return f.status();
  if (a.session.empty()) return Status::Invalid("register answer: 'session' is missing");
  if (a.lease_ms <= 0) return Status::Invalid("register answer: 'lease_ms' must be positive");
  if (a.heartbeat_ms <= 0)
    return Status::Invalid("register answer: 'heartbeat_ms' must be positive");
  return a;
}

// ---------------------------------------------------------------------------------------------
// Heartbeat

json::object GpuUsage::Encode() const {
  return json::object{{"job", id.job},      {"attempt", id.attempt},
                      {"rank", id.rank},    {"known", known},
                      {"samples", samples}, {"mean_sm_tenths", mean_sm_tenths},
                      {"p95_sm", p95_sm},   {"peak_memory_mib", peak_memory_mib},
                      {"idle_ms", idle_ms}, {"idle_for_ms", idle_for_ms}};
}

Result<GpuUsage> GpuUsage::Decode(const json::value& entry) {
  auto obj = ObjectOf(entry, "heartbeat", "a gpu_usage entry");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "heartbeat: gpu_usage");
  GpuUsage u;
  u.id.job = f.Int64("job", std::nullopt);
  u.id.attempt = f.Int("attempt", std::nullopt);
  u.id.rank = f.Int("rank", std::nullopt);
  u.known = f.Bool("known", false);
  u.samples = f.Int("samples", 0);
  u.mean_sm_tenths = f.Int("mean_sm_tenths", 0);
  u.p95_sm = f.Int("p95_sm", 0);
  u.peak_memory_mib = f.Int64("peak_memory_mib", 0);
  u.idle_ms = f.Int64("idle_ms", 0);
  u.idle_for_ms = f.Int64("idle_for_ms", 0);
  if (!f.ok()) return f.status();
  if (u.samples < 0 || u.mean_sm_tenths < 0 || u.mean_sm_tenths > 1000 || u.p95_sm < 0 ||
      u.p95_sm > 100 || u.peak_memory_mib < 0 || u.idle_ms < 0 || u.idle_for_ms < 0) {
    return Status::Invalid("heartbeat: gpu_usage: a value out of range (job " +
                           std::to_string(u.id.job) + ")");
  }
  return u;
}

json::object GpuNow::Encode() const {
  return json::object{{"index", index}, {"sm", sm}, {"memory_mib", memory_mib}};
}

Result<GpuNow> GpuNow::Decode(const json::value& entry) {
  auto obj = ObjectOf(entry, "heartbeat", "a gpus_now entry");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "heartbeat: gpus_now");
  GpuNow g;
  g.index = f.Int("index", std::nullopt);
  g.sm = f.Int("sm", 0);
  g.memory_mib = f.Int64("memory_mib", 0);
  if (!f.ok()) return f.status();
  if (g.index < 0 || g.sm < 0 || g.sm > 100 || g.memory_mib < 0) {
    return Status::Invalid("heartbeat: gpus_now: a value out of range (GPU " +
                           std::to_string(g.index) + ")");
  }
  return g;
}

json::object HeartbeatRequest::Encode() const {
  json::object o{{"node", node}, {"session", session}};
  if (!gpu_usage.empty()) {
    json::array usage;
    for (const GpuUsage& u : gpu_usage) usage.push_back(u.Encode());
    o["gpu_usage"] = std::move(usage);
  }
  if (!gpus_now.empty()) {
    json::array gpus;
    for (const GpuNow& g : gpus_now) gpus.push_back(g.Encode());
    o["gpus_now"] = std::move(gpus);
  }
  return o;
}

Result<HeartbeatRequest> HeartbeatRequest::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "heartbeat", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "heartbeat");
  HeartbeatRequest r;
  r.node = f.String("node", "");
  r.session = f.String("session", "");
  if (!f.ok()) return f.status();
  if (const json::value* usage = f.Find("gpu_usage")) {
    if (!usage->is_array()) return Status::Invalid("heartbeat: 'gpu_usage' must be an array");
    if (usage->as_array().size() > kMaxGpuUsage) {
      return Status::Invalid("heartbeat: 'gpu_usage' has more than " +
                             std::to_string(kMaxGpuUsage) + " entries");
    }
    for (const json::value& entry : usage->as_array()) {
      Result<GpuUsage> u = GpuUsage::Decode(entry);
      if (!u.ok()) return u.status();
      r.gpu_usage.push_back(std::move(*u));
    }
  }
  if (const json::value* gpus = f.Find("gpus_now")) {
    if (!gpus->is_array() || gpus->as_array().size() > kMaxGpusNow) {
      return Status::Invalid("heartbeat: 'gpus_now' must be an array of at most " +
                             std::to_string(kMaxGpusNow) + " GPUs");
    }
    for (const json::value& entry : gpus->as_array()) {
      Result<GpuNow> g = GpuNow::Decode(entry);
      if (!g.ok()) return g.status();
      r.gpus_now.push_back(*g);
    }
  }
  return r;
}

json::object HeartbeatAnswer::Encode() const {
  return json::object{{"ok", ok}, {"lease_ms", lease_ms}};
}

Result<HeartbeatAnswer> HeartbeatAnswer::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "heartbeat answer", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "heartbeat answer");
  HeartbeatAnswer a;
  a.ok = f.Bool("ok", false);
  a.lease_ms = f.Int64("lease_ms", 0);
  if (!f.ok()) return f.status();
  return a;
}

// ---------------------------------------------------------------------------------------------
// Reports

std::string_view ReportEventName(ReportEvent event) {
  switch (event) {
    case ReportEvent::kAccepted:
      return "accepted";
    case ReportEvent::kPulling:
      return "pulling";
    case ReportEvent::kSettingUp:
      return "setting_up";
    case ReportEvent::kRunning:
      return "running";
    case ReportEvent::kExited:
      return "exited";
  }
  return "accepted";  // not reached: every enumerator is handled above
}

std::optional<ReportEvent> ParseReportEvent(std::string_view name) {
  for (ReportEvent e : {ReportEvent::kAccepted, ReportEvent::kPulling, ReportEvent::kSettingUp,
                        ReportEvent::kRunning, ReportEvent::kExited}) {
    if (ReportEventName(e) == name) return e;
  }
  return std::nullopt;
}

Report Report::Event(const AttemptRank& id, ReportEvent event, std::string reason) {
  Report r;
  r.job = id.job;
  r.attempt = id.attempt;
  r.rank = id.rank;
  r.event = event;
  r.reason = std::move(reason);
  return r;
}

Report Report::PullProgress(const AttemptRank& id, std::string progress) {
  Report r = Event(id, ReportEvent::kPulling);
  r.progress = std::move(progress);
  return r;
}

Report Report::Exited(const AttemptRank& id, std::optional<int> exit_code, std::string phase,
                      std::string reason) {
  Report r = Event(id, ReportEvent::kExited);
  r.exit_code = exit_code;
  r.phase = std::move(phase);
  r.reason = std::move(reason);
  return r;
}

json::object Report::Encode() const {
  json::object r{
      {"job", job}, {"attempt", attempt}, {"rank", rank}, {"event", ReportEventName(event)}};
  if (event == ReportEvent::kExited) {
    r["exit_code"] = exit_code ? json::value(*exit_code) : json::value(nullptr);
    r["phase"] = phase;
    r["reason"] = reason;
    if (peak_memory_bytes) r["peak_memory_bytes"] = *peak_memory_bytes;
    if (cpu_ms) r["cpu_ms"] = *cpu_ms;
  } else if (event == ReportEvent::kPulling) {
    if (!reason.empty()) r["reason"] = reason;
    if (!progress.empty()) r["progress"] = progress;
  }
  return r;
}

Result<Report> Report::Decode(const json::value& entry) {
  auto obj = ObjectOf(entry, "report", "each report");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "report");
  Report r;
  r.job = f.Int64("job", std::nullopt);
  r.attempt = f.Int("attempt", std::nullopt);
  r.rank = f.Int("rank", std::nullopt);
  std::string event = f.String("event", std::nullopt);
  if (const json::value* c = f.Find("exit_code")) {
    std::optional<int64_t> code = AsInt(*c);
    if (!code || !FitsInt(*code)) {
      f.Fail("'exit_code' must be an integer or null");
    } else {
      r.exit_code = static_cast<int>(*code);
    }
  }
  r.phase = f.String("phase", "run");
  r.reason = f.String("reason", "");
  r.progress = f.String("progress", "");
  if (r.progress.size() > 200) f.Fail("'progress' must be at most 200 bytes");
  for (auto [name, field] :
       {std::pair{"peak_memory_bytes", &r.peak_memory_bytes}, std::pair{"cpu_ms", &r.cpu_ms}}) {
    if (const json::value* v = f.Find(name); v && !v->is_null()) {
      // Bounded (1,100 CPU-years, 1 PiB) so that the server's sums over ranks cannot overflow.
      constexpr int64_t kMax = int64_t{1} << 50;
      std::optional<int64_t> n = AsInt(*v);
      if (!n || *n < 0 || *n > kMax) {
        f.Fail(std::string("'") + name + "' must be a whole number from 0 to 2^50");
      } else {
        *field = *n;
      }
    }
  }
  if (!f.ok()) return f.status();
  std::optional<ReportEvent> e = ParseReportEvent(event);
  if (!e) {
    return Status::Invalid(
        "report: 'event' must be accepted, pulling, setting_up, running or exited");
  }
  r.event = *e;
  if (r.phase != "pull" && r.phase != "setup" && r.phase != "run" && r.phase != "launch" &&
      r.phase != "supervisor" && r.phase != "prolog") {
    return Status::Invalid(
        "report: 'phase' must be pull, setup, run, launch, supervisor or prolog");
  }
  return r;
}

json::object ReportRequest::Encode() const {
  json::array a;
  for (const auto& r : reports) a.push_back(r.Encode());
  return json::object{{"node", node}, {"session", session}, {"reports", std::move(a)}};
}

Result<ReportBatch> ReportRequest::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "report", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "report");
  ReportBatch batch;
  batch.node = f.String("node", "");
  batch.session = f.String("session", "");
  if (!f.ok()) return f.status();
  const json::value* reports = f.Find("reports");
  if (!reports || !reports->is_array())
    return Status::Invalid("report: 'reports' must be an array");
  batch.entries.reserve(reports->as_array().size());
  for (const auto& entry : reports->as_array()) {
    batch.entries.push_back(ReportEntry{BestEffortId(entry), Report::Decode(entry)});
  }
  return batch;
}

std::string_view ReportActionName(ReportAction action) {
  switch (action) {
    case ReportAction::kOk:
      return "ok";
    case ReportAction::kStop:
      return "stop";
    case ReportAction::kError:
      return "error";
  }
  return "ok";  // not reached: every enumerator is handled above
}

std::optional<ReportAction> ParseReportAction(std::string_view name) {
  for (ReportAction a : {ReportAction::kOk, ReportAction::kStop, ReportAction::kError}) {
    if (ReportActionName(a) == name) return a;
  }
  return std::nullopt;
}

json::object ReportResult::Encode() const {
  json::object r{
      {"job", job}, {"attempt", attempt}, {"rank", rank}, {"action", ReportActionName(action)}};
  if (action == ReportAction::kError) r["error"] = error;
  return r;
}

Result<ReportResult> ReportResult::Decode(const json::value& result) {
  auto obj = ObjectOf(result, "report answer", "each result");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "report answer");
  ReportResult r;
  r.job = f.Int64("job", std::nullopt);
  r.attempt = f.Int("attempt", std::nullopt);
  r.rank = f.Int("rank", std::nullopt);
  std::string action = f.String("action", std::nullopt);
  r.error = f.String("error", "");
  if (!f.ok()) return f.status();
  std::optional<ReportAction> a = ParseReportAction(action);
  if (!a) return Status::Invalid("report answer: 'action' must be ok, stop or error");
  r.action = *a;
  return r;
}

json::object ReportAnswer::Encode() const {
  json::array a;
  for (const auto& r : results) a.push_back(r.Encode());
  return json::object{{"results", std::move(a)}};
}

Result<ReportAnswer> ReportAnswer::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "report answer", "body");
  if (!obj.ok()) return obj.status();
  const json::value* results = (*obj)->if_contains("results");
  if (!results || !results->is_array())
    return Status::Invalid("report answer: 'results' must be an array");
  ReportAnswer answer;
  for (const auto& r : results->as_array()) {
    auto decoded = ReportResult::Decode(r);
    if (!decoded.ok()) return decoded.status();
    answer.results.push_back(std::move(*decoded));
  }
  return answer;
}

// ---------------------------------------------------------------------------------------------
// Log shipping

Result<LogAppend> LogAppend::FromQuery(const std::map<std::string, std::string>& query) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = query.find(key);
    return it == query.end() ? nullptr : &it->second;
  };
  LogAppend l;
  if (const std::string* node = get("node")) l.node = *node;
  if (const std::string* session = get("session")) l.session = *session;
  int64_t values[4] = {0, 0, 0, 0};
  const char* keys[4] = {"job", "attempt", "rank", "offset"};
  for (int i = 0; i < 4; ++i) {
    const std::string* text = get(keys[i]);
    if (!text) {
      if (i < 2) return Status::Invalid(std::string("logs: ") + Quoted(keys[i]) + " is missing");
      continue;  // rank and offset default to 0
    }
    std::optional<int64_t> v = ParseDecimal(*text);
    if (!v) return Status::Invalid(std::string("logs: ") + Quoted(keys[i]) + " must be an integer");
    values[i] = *v;
  }
  if (values[0] <= 0 || values[1] <= 0 || values[2] < 0 || values[3] < 0 || !FitsInt(values[1]) ||
      !FitsInt(values[2])) {
    return Status::Invalid(kLogRangeMessage);
  }
  l.job = values[0];
  l.attempt = static_cast<int>(values[1]);
  l.rank = static_cast<int>(values[2]);
  l.offset = values[3];
  return l;
}

std::string LogAppend::ToQueryString() const {
  return "node=" + PercentEncode(node) + "&session=" + PercentEncode(session) +
         "&job=" + std::to_string(job) + "&attempt=" + std::to_string(attempt) +
         "&rank=" + std::to_string(rank) + "&offset=" + std::to_string(offset);
}

json::object LogAppendAnswer::Encode() const {
  if (error.empty()) return json::object{{"size", size}};
  return json::object{{"error", error}, {"size", size}};
}

Result<LogAppendAnswer> LogAppendAnswer::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "logs answer", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "logs answer");
  LogAppendAnswer a;
  a.size = f.Int64("size", std::nullopt);
  a.error = f.String("error", "");
  if (!f.ok()) return f.status();
  if (a.size < 0) return Status::Invalid("logs answer: 'size' must not be negative");
  return a;
}

std::string EncodeLogBatch(const std::vector<LogPiece>& pieces) {
  std::string body;
  for (const LogPiece& p : pieces) {
    body += fmt::format(R"({{"job":{},"attempt":{},"rank":{},"offset":{},"size":{}}})", p.job,
                        p.attempt, p.rank, p.offset, p.data.size());
    body += '\n';
    body += p.data;
  }
  return body;
}

Result<std::vector<LogPiece>> DecodeLogBatch(std::string_view body) {
  std::vector<LogPiece> pieces;
  size_t bytes = 0;
  while (!body.empty()) {
    const std::string what = fmt::format("logs batch: piece {}", pieces.size() + 1);
    if (pieces.size() == kMaxLogPieces) {
      return Status::Invalid(fmt::format("logs batch: over {} pieces", kMaxLogPieces));
    }
    const size_t nl = body.find('\n');
    if (nl == std::string_view::npos || nl > 256) {
      return Status::Invalid(what + ": its header is not a line of JSON");
    }
    auto header = ParseJson(body.substr(0, nl), what);
    if (!header.ok()) return header.status();
    auto obj = ObjectOf(*header, what, "its header");
    if (!obj.ok()) return obj.status();
    Fields f(**obj, what);
    LogPiece p;
    p.job = f.Int64("job", std::nullopt);
    p.attempt = f.Int("attempt", std::nullopt);
    p.rank = f.Int("rank", 0);
    p.offset = f.Int64("offset", 0);
    const int64_t size = f.Int64("size", std::nullopt);
    if (!f.ok()) return f.status();
    if (p.job <= 0 || p.attempt <= 0 || p.rank < 0 || p.offset < 0 || size < 0) {
      return Status::Invalid(what + ": bad job, attempt, rank, offset or size");
    }
    body.remove_prefix(nl + 1);
    if (static_cast<uint64_t>(size) > body.size()) {
      return Status::Invalid(fmt::format("{}: says {} bytes, {} follow", what, size, body.size()));
    }
    bytes += static_cast<size_t>(size);
    if (bytes > kMaxLogBatchBytes) {
      return Status::Invalid(
          fmt::format("logs batch: over {} bytes of output in all", kMaxLogBatchBytes));
    }
    p.data.assign(body.substr(0, static_cast<size_t>(size)));
    body.remove_prefix(static_cast<size_t>(size));
    pieces.push_back(std::move(p));
  }
  return pieces;
}

json::object LogBatchAnswer::Encode() const {
  json::array results_json;
  for (const LogAppendAnswer& r : results) results_json.push_back(r.Encode());
  return json::object{{"results", std::move(results_json)}};
}

Result<LogBatchAnswer> LogBatchAnswer::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "logs batch answer", "body");
  if (!obj.ok()) return obj.status();
  const json::value* results = (*obj)->if_contains("results");
  if (!results || !results->is_array()) {
    return Status::Invalid("logs batch answer: 'results' must be an array");
  }
  LogBatchAnswer a;
  for (const json::value& r : results->as_array()) {
    auto one = LogAppendAnswer::Decode(r);
    if (!one.ok()) return one.status();
    a.results.push_back(std::move(*one));
  }
  return a;
}

}  // namespace berth::proto
