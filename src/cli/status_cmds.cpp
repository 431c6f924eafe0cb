// berth status: the servers a user's --server (or BERTH_SERVER) names, which of them leads, since
// when, on which store, and whether each answers (docs/ha.md).
#include <fmt/format.h>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/clock.h"
#include "net/http_client.h"

namespace berth::cli {

namespace {

std::string StrOf(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return "";
  if (v->is_string()) return std::string(v->as_string());
  return SerializeJson(*v);
}

int64_t IntOf(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  return 0;
}

}  // namespace

int ServerStatus(const GlobalFlags& g, bool as_json) {
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  if (Status st = conn.VerifyLocal(); !st.ok()) return Fail(st);
  json::array servers;
  Table table({"SERVER", "ROLE", "HEALTH", "STORE", "NOTE"});
  json::object leader;
  for (const std::string& url : conn.urls()) {
    json::object entry{{"url", url}};
    net::HttpClient client(
        url, net::HttpClientOptions{
                 .token = "", .tls_fingerprint = conn.tls_fingerprint(), .ca_file = ""});
    const int64_t t0 = MonotonicMs();
    Result<net::HttpResponse> res = client.Request("GET", "/v1/health", "", 3'000);
    const int64_t ms = MonotonicMs() - t0;
    std::string role = "?", health, store, note;
    if (!res.ok() || res->status != 200) {
      health = "down";
      note = res.ok() ? fmt::format("HTTP {}", res->status) : res.status().message();
    } else {
      health = fmt::format("ok ({} ms)", ms);
      Result<json::value> body = ParseJson(res->body, "health");
      const json::value* ha =
          body.ok() && body->is_object() ? body->as_object().if_contains("ha") : nullptr;
      if (ha == nullptr || !ha->is_object()) {
        role = "single";
        store = "its own (sqlite)";
      } else {
        const json::object& h = ha->as_object();
        role = StrOf(h, "role");
        store = StrOf(h, "store");
        if (std::string err = StrOf(h, "store_error"); !err.empty()) note = "store: " + err;
        if (const json::value* l = h.if_contains("leader"); l && l->is_object()) {
          if (leader.empty() || role == "leader") leader = l->as_object();
        }
        entry["ha"] = h;
      }
    }
    entry["role"] = role;
    entry["health"] = health == "down" ? "down" : "ok";
    if (!note.empty()) entry["note"] = note;
    servers.push_back(std::move(entry));
    table.Add({url, role, health, store, note});
  }
  if (as_json) {
    fmt::print("{}\n", SerializeJson(json::object{{"servers", servers}, {"leader", leader}}));
    return 0;
  }
  fmt::print("{}", table.Render());
  if (!leader.empty()) {
    const std::string url = StrOf(leader, "url");
    const int64_t since = IntOf(leader, "since");
    const int64_t left = IntOf(leader, "lease_expires_in_ms");
    if (url.empty() || left <= 0) {
      fmt::print("leader: none at the moment (the last was {}; a failover is under way)\n",
                 url.empty() ? "-" : url);
    } else {
      fmt::print("leader: {} since {} ({}), fencing token {}, its lease runs {} ms more\n", url,
                 FormatRfc3339(since), FormatAgo(since, SystemClock::Get().Now()),
                 StrOf(leader, "token"), left);
    }
  }
  return 0;
}

// --- command line: the registration of each command (cli/command_context.h) ---

void AddStatusCommand(CommandContext& c) {
  auto& status_json = c.Keep<bool>(false);
  auto* status_cmd = c.app.add_subcommand(
      "status", "The servers: which leads, since when, on which store, and whether each answers");
  status_cmd->add_flag("--json", status_json, "Machine-readable output");
  c.AddGlobal(status_cmd);
  status_cmd->callback([&] { c.rc = ServerStatus(c.g, status_json); });
}

}  // namespace berth::cli
