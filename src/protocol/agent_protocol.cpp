#include "protocol/agent_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"

namespace berth::proto {

namespace {

bool FitsInt(int64_t v) {
  return v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max();
}

std::string Quoted(const char* key) { return std::string("'") + key + "'"; }

// Reads the fields of one JSON object and keeps the first error, prefixed with the message's name
// ("launch: 'attempt' must be an integer"). After an error, reads return zero values: the caller
// finishes reading and returns status(). A field that is absent or null is given its fallback, or
// is an error ("is missing") when it has none.
class Fields {
 public:
  Fields(const json::object& o, std::string_view what) : o_(o), what_(what) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  void Fail(const std::string& message) {
    if (status_.ok()) status_ = Status::Invalid(std::string(what_) + ": " + message);
  }

  // The value of `key`, or nullptr when it is absent or null.
  const json::value* Find(const char* key) const {
    const json::value* v = o_.if_contains(key);
    return v && !v->is_null() ? v : nullptr;
  }

  int64_t Int64(const char* key, std::optional<int64_t> fallback) {
    const json::value* v = Find(key);
    if (!v) {
      if (!fallback) Fail(Quoted(key) + " is missing");
      return fallback.value_or(0);
    }
    std::optional<int64_t> i = AsInt(*v);
    if (!i) {
      Fail(Quoted(key) + " must be an integer");
      return 0;
    }
    return *i;
  }

  int Int(const char* key, std::optional<int> fallback) {
    std::optional<int64_t> wide;
    if (fallback) wide = *fallback;
    int64_t v = Int64(key, wide);
    if (!FitsInt(v)) {
      Fail(Quoted(key) + " is out of range");
      return 0;
    }
    return static_cast<int>(v);
  }

  std::string String(const char* key, std::optional<std::string> fallback) {
    const json::value* v = Find(key);
    if (!v) {
      if (!fallback) Fail(Quoted(key) + " is missing");
      return fallback.value_or("");
    }
    if (!v->is_string()) {
      Fail(Quoted(key) + " must be a string");
      return "";
    }
    return std::string(v->as_string());
  }

  bool Bool(const char* key, bool fallback) {
    const json::value* v = Find(key);
    if (!v) return fallback;
    if (!v->is_bool()) {
      Fail(Quoted(key) + " must be true or false");
      return false;
    }
    return v->as_bool();
  }

  // The string field "type" must be `expected` (watch messages).
  void Type(std::string_view expected) {
    std::string type = String("type", std::nullopt);
    if (ok() && type != expected) Fail("'type' must be \"" + std::string(expected) + "\"");
  }

 private:
  const json::object& o_;
  std::string_view what_;
  Status status_;
};

// The object in `v`, or an error "WHAT: NOUN must be a JSON object".
Result<const json::object*> ObjectOf(const json::value& v, std::string_view what,
                                     std::string_view noun) {
  if (!v.is_object()) {
    return Status::Invalid(std::string(what) + ": " + std::string(noun) + " must be a JSON object");
  }
  return &v.as_object();
}

// Reads job, attempt and rank as far as they can be read (0 where not): names a bad report entry.
AttemptRank BestEffortId(const json::value& v) {
  AttemptRank id;
  if (!v.is_object()) return id;
  const json::object& o = v.as_object();
  auto read = [&](const char* key) -> int64_t {
    const json::value* f = o.if_contains(key);
    std::optional<int64_t> i = f ? AsInt(*f) : std::nullopt;
    return i.value_or(0);
  };
  id.job = read("job");
  int64_t attempt = read("attempt");
  int64_t rank = read("rank");
  id.attempt = FitsInt(attempt) ? static_cast<int>(attempt) : 0;
  id.rank = FitsInt(rank) ? static_cast<int>(rank) : 0;
  return id;
}

// A whole decimal integer, nothing else (no sign but '-', no spaces).
std::optional<int64_t> ParseDecimal(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

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
  for (const auto& gpu : gpus) g.push_back(json::object{{"index", gpu.index}, {"type", gpu.type}});
  o["gpus"] = std::move(g);
  json::array r;
  for (const auto& a : running) {
    r.push_back(json::object{{"job", a.job}, {"attempt", a.attempt}, {"rank", a.rank}});
  }
  o["running"] = std::move(r);
  o["isolation"] = isolation;
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
  r.job_memory_default_mib = f.Int64("job_memory_default_mib", 0);
  if (!f.ok()) return f.status();
  if (r.isolation.size() > 512) return Status::Invalid("register: 'isolation' is too long");
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
    if (gpu.index < 0 || !IsValidName(gpu.type)) return Status::Invalid(kGpuMessage);
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
// Watch stream

json::object HelloMessage::Encode() const { return json::object{{"type", "hello"}}; }

Result<HelloMessage> HelloMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "hello", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "hello");
  f.Type("hello");
  if (!f.ok()) return f.status();
  return HelloMessage{};
}

json::object HealthResetMessage::Encode() const { return json::object{{"type", "health_reset"}}; }

Result<HealthResetMessage> HealthResetMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "health_reset", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "health_reset");
  f.Type("health_reset");
  if (!f.ok()) return f.status();
  return HealthResetMessage{};
}

json::object PingMessage::Encode() const { return json::object{{"type", "ping"}}; }

Result<PingMessage> PingMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "ping", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "ping");
  f.Type("ping");
  if (!f.ok()) return f.status();
  return PingMessage{};
}

json::object LaunchMessage::Encode() const {
  // The order of Server::LaunchMessage, so that the bytes on the wire do not change.
  json::object m;
  m["type"] = "launch";
  m["job"] = job;
  m["attempt"] = attempt;
  m["rank"] = rank;
  m["num_nodes"] = num_nodes;
  m["spec_id"] = spec_id;
  m["name"] = name;
  m["user"] = user;
  json::array ips;
  for (const auto& ip : node_ips) ips.push_back(json::value(ip));
  m["node_ips"] = std::move(ips);
  json::array devices;
  for (int g : gpus) devices.push_back(g);
  m["gpus"] = std::move(devices);
  m["gpus_per_node"] = gpus_per_node;
  if (group) {
    m["group"] = *group;
    m["group_rank"] = group_rank;
    m["num_jobs"] = num_jobs;
  }
  m["kill_grace_ms"] = kill_grace_ms;
  if (warn_signal > 0) {
    m["warn_signal"] = warn_signal;
    m["warn_after_ms"] = warn_after_ms;
  }
  return m;
}

Result<LaunchMessage> LaunchMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "launch", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "launch");
  f.Type("launch");
  LaunchMessage m;
  m.job = f.Int64("job", std::nullopt);
  m.attempt = f.Int("attempt", std::nullopt);
  m.rank = f.Int("rank", std::nullopt);
  m.num_nodes = f.Int("num_nodes", 1);
  m.spec_id = f.Int64("spec_id", std::nullopt);
  m.name = f.String("name", "");
  m.user = f.String("user", "");
  if (const json::value* ips = f.Find("node_ips")) {
    if (!ips->is_array()) {
      f.Fail("'node_ips' must be an array");
    } else {
      for (const auto& ip : ips->as_array()) {
        if (!ip.is_string()) {
          f.Fail("'node_ips' must hold strings");
          break;
        }
        m.node_ips.emplace_back(ip.as_string());
      }
    }
  }
  if (const json::value* gpus = f.Find("gpus")) {
    if (!gpus->is_array()) {
      f.Fail("'gpus' must be an array");
    } else {
      for (const auto& g : gpus->as_array()) {
        std::optional<int64_t> index = AsInt(g);
        if (!index || *index < 0 || !FitsInt(*index)) {
          f.Fail("'gpus' must hold device indices (integers >= 0)");
          break;
        }
        m.gpus.push_back(static_cast<int>(*index));
      }
    }
  }
  m.gpus_per_node = f.Int64("gpus_per_node", 0);
  if (f.Find("group")) {
    m.group = f.Int64("group", std::nullopt);
    m.group_rank = f.Int("group_rank", std::nullopt);
    m.num_jobs = f.Int("num_jobs", std::nullopt);
  }
  m.kill_grace_ms = f.Int64("kill_grace_ms", 10'000);
  m.warn_signal = f.Int("warn_signal", 0);
  m.warn_after_ms = f.Int64("warn_after_ms", 0);
  if (!f.ok()) return f.status();
  if (m.warn_signal < 0 || m.warn_signal > 64 || m.warn_after_ms < 0) {
    return Status::Invalid(
        "launch: 'warn_signal' must be a signal number and 'warn_after_ms' >= 0");
  }
  if (m.job <= 0) return Status::Invalid("launch: 'job' must be positive");
  if (m.attempt <= 0) return Status::Invalid("launch: 'attempt' must be positive");
  if (m.num_nodes <= 0) return Status::Invalid("launch: 'num_nodes' must be positive");
  if (m.rank < 0 || m.rank >= m.num_nodes)
    return Status::Invalid("launch: 'rank' must be in [0, num_nodes)");
  if (m.gpus_per_node < 0) return Status::Invalid("launch: 'gpus_per_node' must not be negative");
  if (m.kill_grace_ms < 0) return Status::Invalid("launch: 'kill_grace_ms' must not be negative");
  return m;
}

json::object StopMessage::Encode() const {
  return json::object{
      {"type", "stop"}, {"job", job}, {"attempt", attempt}, {"rank", rank}, {"reason", reason}};
}

Result<StopMessage> StopMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "stop", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "stop");
  f.Type("stop");
  StopMessage m;
  m.job = f.Int64("job", std::nullopt);
  m.attempt = f.Int("attempt", std::nullopt);
  m.rank = f.Int("rank", std::nullopt);
  m.reason = f.String("reason", "");
  if (!f.ok()) return f.status();
  return m;
}

namespace {
// A session id: 16 to 64 letters and digits.
bool SessionIdOk(const std::string& sid) {
  return sid.size() >= 16 && sid.size() <= 64 && std::all_of(sid.begin(), sid.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
         });
}
}  // namespace

json::object SessionMessage::Encode() const {
  return json::object{{"type", "session"},  {"sid", sid},   {"job", job},
                      {"attempt", attempt}, {"rank", rank}, {"offset", offset}};
}

Result<SessionMessage> SessionMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "session", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "session");
  f.Type("session");
  SessionMessage m;
  m.sid = f.String("sid", std::nullopt);
  m.job = f.Int64("job", std::nullopt);
  m.attempt = f.Int("attempt", std::nullopt);
  m.rank = f.Int("rank", std::nullopt);
  m.offset = f.Int64("offset", std::nullopt);
  if (!f.ok()) return f.status();
  if (!SessionIdOk(m.sid)) {
    return Status::Invalid("session: 'sid' must be 16 to 64 letters and digits");
  }
  if (m.job <= 0 || m.attempt <= 0 || m.rank < 0 || m.offset < 0) {
    return Status::Invalid(
        "session: job and attempt must be positive, rank and offset not negative");
  }
  return m;
}

json::object ForwardMessage::Encode() const {
  return json::object{{"type", "forward"},  {"sid", sid},   {"job", job},
                      {"attempt", attempt}, {"rank", rank}, {"port", port}};
}

Result<ForwardMessage> ForwardMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "forward", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "forward");
  f.Type("forward");
  ForwardMessage m;
  m.sid = f.String("sid", std::nullopt);
  m.job = f.Int64("job", std::nullopt);
  m.attempt = f.Int("attempt", std::nullopt);
  m.rank = f.Int("rank", std::nullopt);
  m.port = f.Int("port", std::nullopt);
  if (!f.ok()) return f.status();
  if (!SessionIdOk(m.sid)) {
    return Status::Invalid("forward: 'sid' must be 16 to 64 letters and digits");
  }
  if (m.job <= 0 || m.attempt <= 0 || m.rank < 0 || m.port < 1 || m.port > 65535) {
    return Status::Invalid(
        "forward: job and attempt must be positive, rank not negative, port 1 to 65535");
  }
  return m;
}

json::object ExecMessage::Encode() const {
  return json::object{{"type", "exec"},     {"sid", sid},   {"job", job},
                      {"attempt", attempt}, {"rank", rank}, {"command", command},
                      {"tty", tty},         {"rows", rows}, {"cols", cols}};
}

Result<ExecMessage> ExecMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "exec", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "exec");
  f.Type("exec");
  ExecMessage m;
  m.sid = f.String("sid", std::nullopt);
  m.job = f.Int64("job", std::nullopt);
  m.attempt = f.Int("attempt", std::nullopt);
  m.rank = f.Int("rank", std::nullopt);
  m.command = f.String("command", std::nullopt);
  m.tty = f.Bool("tty", false);
  m.rows = f.Int("rows", 24);
  m.cols = f.Int("cols", 80);
  if (!f.ok()) return f.status();
  if (!SessionIdOk(m.sid))
    return Status::Invalid("exec: 'sid' must be 16 to 64 letters and digits");
  if (m.job <= 0 || m.attempt <= 0 || m.rank < 0) {
    return Status::Invalid("exec: job and attempt must be positive, rank not negative");
  }
  if (m.command.empty() || m.command.size() > kMaxExecCommand) {
    return Status::Invalid("exec: 'command' must be 1 to 65536 bytes");
  }
  if (m.rows < 1 || m.rows > 1000 || m.cols < 1 || m.cols > 1000) {
    return Status::Invalid("exec: rows and cols must be 1 to 1000");
  }
  return m;
}

json::object SpecMessage::Encode() const {
  return json::object{{"type", "spec"}, {"id", id}, {"text", text}};
}

Result<SpecMessage> SpecMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "spec", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "spec");
  f.Type("spec");
  SpecMessage m;
  m.id = f.Int64("id", std::nullopt);
  m.text = f.String("text", std::nullopt);
  if (!f.ok()) return f.status();
  if (m.id <= 0) return Status::Invalid("spec: 'id' must be above 0");
  return m;
}

std::string EncodeWatchLine(const WatchMessage& message) {
  json::object o = std::visit([](const auto& m) { return m.Encode(); }, message);
  return SerializeJson(o) + "\n";
}

Result<WatchMessage> DecodeWatchMessage(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  auto v = ParseJson(line, "watch message");
  if (!v.ok()) return v.status();
  auto obj = ObjectOf(*v, "watch", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "watch");
  std::string type = f.String("type", std::nullopt);
  if (!f.ok()) return f.status();
  auto widen = [](auto decoded) -> Result<WatchMessage> {
    if (!decoded.ok()) return decoded.status();
    return WatchMessage(std::move(*decoded));
  };
  if (type == "launch") return widen(LaunchMessage::Decode(*v));
  if (type == "stop") return widen(StopMessage::Decode(*v));
  if (type == "ping") return widen(PingMessage::Decode(*v));
  if (type == "hello") return widen(HelloMessage::Decode(*v));
  if (type == "spec") return widen(SpecMessage::Decode(*v));
  if (type == "health_reset") return widen(HealthResetMessage::Decode(*v));
  if (type == "session") return widen(SessionMessage::Decode(*v));
  if (type == "forward") return widen(ForwardMessage::Decode(*v));
  if (type == "exec") return widen(ExecMessage::Decode(*v));
  return Status::NotFound("watch: unknown message type '" + type + "'");
}

// ---------------------------------------------------------------------------------------------
// Heartbeat

json::object HeartbeatRequest::Encode() const {
  return json::object{{"node", node}, {"session", session}};
}

Result<HeartbeatRequest> HeartbeatRequest::Decode(const json::value& body) {
  auto obj = ObjectOf(body, "heartbeat", "body");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "heartbeat");
  HeartbeatRequest r;
  r.node = f.String("node", "");
  r.session = f.String("session", "");
  if (!f.ok()) return f.status();
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
