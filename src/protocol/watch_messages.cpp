// The messages the server sends down an agent's watch stream (agent_protocol.h): hello, ping,
// launch, stop, session, forward, exec, spec, health reset.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "protocol/agent_protocol.h"
#include "protocol/fields.h"

namespace berth::proto {

using fields::Fields;
using fields::FitsInt;
using fields::ObjectOf;
using fields::Quoted;

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

json::object MigLayoutMessage::Encode() const {
  json::array p;
  for (const std::string& profile : profiles) p.emplace_back(profile);
  return json::object{{"type", "mig_layout"}, {"gpu", gpu}, {"profiles", std::move(p)}};
}

Result<MigLayoutMessage> MigLayoutMessage::Decode(const json::value& message) {
  auto obj = ObjectOf(message, "mig_layout", "message");
  if (!obj.ok()) return obj.status();
  Fields f(**obj, "mig_layout");
  f.Type("mig_layout");
  MigLayoutMessage m;
  m.gpu = f.Int("gpu", std::nullopt);
  if (!f.ok()) return f.status();
  if (m.gpu < 0 || m.gpu > 99) return Status::Invalid("mig_layout: 'gpu' must be 0 to 99");
  constexpr char kProfiles[] = "mig_layout: 'profiles' must be 1 to 7 MIG profile names";
  const json::value* p = f.Find("profiles");
  if (!p || !p->is_array() || p->as_array().empty() || p->as_array().size() > 7) {
    return Status::Invalid(kProfiles);
  }
  for (const json::value& v : p->as_array()) {
    if (!v.is_string() || v.as_string().empty() || v.as_string().size() > 32 ||
        !std::all_of(v.as_string().begin(), v.as_string().end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+';
        })) {
      return Status::Invalid(kProfiles);
    }
    m.profiles.emplace_back(v.as_string());
  }
  return m;
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
  if (idle_below > 0) m["idle_below"] = idle_below;
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
  m.idle_below = f.Int("idle_below", 0);
  if (!f.ok()) return f.status();
  if (m.idle_below < 0 || m.idle_below > 100) {
    return Status::Invalid("launch: 'idle_below' must be a percentage");
  }
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
  if (type == "mig_layout") return widen(MigLayoutMessage::Decode(*v));
  return Status::NotFound("watch: unknown message type '" + type + "'");
}

}  // namespace berth::proto
