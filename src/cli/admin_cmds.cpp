// berth whoami / login, and berth admin token|node|user|audit (docs/security.md).
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/table.h"
#include "common/files.h"
#include "common/strings.h"
#include "net/http.h"
#include "net/http_client.h"

namespace berth::cli {

namespace {

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_string()) return std::string(v->as_string());
  return SerializeJson(*v);
}

// Connects, calls, and prints a failure: the common shape of every admin command.
Result<json::value> CallServer(const GlobalFlags& g, const std::string& method,
                               const std::string& target, const std::string& body = "") {
  Connection conn(g.server, g.token, g.self_exe);
  BERTH_RETURN_IF_ERROR(conn.Connect());
  return conn.Call(method, target, body);
}

}  // namespace

Result<std::string> ServerFingerprint(const std::string& url) {
  return net::FetchServerFingerprint(url, 10'000);
}

int Whoami(const GlobalFlags& g, bool as_json) {
  auto res = CallServer(g, "GET", "/v1/whoami");
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  if (as_json) {
    fmt::print("{}\n", SerializeJson(o));
    return 0;
  }
  fmt::print("user:          {}\n", Str(o, "user"));
  fmt::print("role:          {}\n", Str(o, "role"));
  fmt::print("team:          {}\n", Str(o, "team"));
  std::string max = Str(o, "max_priority");
  fmt::print("max priority:  {}\n", max == "-" ? "no limit" : max);
  fmt::print("identified by: {}\n", Str(o, "via"));
  if (std::string exp = Str(o, "token_expires"); Str(o, "via").rfind("token", 0) == 0) {
    fmt::print("token expires: {}\n", exp == "-" ? "never" : exp);
  }
  return 0;
}

Result<std::string> DashboardLink(Connection& conn) {
  auto res = conn.Call("POST", "/v1/dashboard/link", "{}");
  if (!res.ok()) return res.status();
  const json::object& o = res->as_object();
  // Reached over TCP: the address we used reaches it (the server's own idea may be 127.0.0.1 or
  // 0.0.0.0 behind a name); over the unix socket: the server's TCP URL.
  if (StartsWith(conn.url(), "http://") || StartsWith(conn.url(), "https://")) {
    std::string base = conn.url();
    while (!base.empty() && base.back() == '/') base.pop_back();
    return base + Str(o, "path");
  }
  return Str(o, "url");
}

int Dashboard(const GlobalFlags& g, bool as_json) {
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  auto link = DashboardLink(conn);
  if (!link.ok()) return Fail(link.status());
  if (as_json) {
    fmt::print("{}\n", SerializeJson(json::object{{"url", *link}}));
    return 0;
  }
  fmt::print("Open the dashboard (this link logs you in once, within 5 minutes):\n  {}\n", *link);
  return 0;
}

int Login(const GlobalFlags& g, const LoginFlags& f) {
  if (g.server.empty()) return Fail(Status::Invalid("login: say which server: --server URL"));
  std::string token = g.token;
  if (!f.token_file.empty()) {
    token = Trim(ReadFileOr(f.token_file));
    if (token.empty()) return Fail(Status::Invalid("login: " + f.token_file + " is empty"));
  }
  if (token.empty()) {
    return Fail(Status::Invalid("login: give your token with --token-file FILE (or --token)"));
  }
  LoginConfig config{.server = g.server, .token = token, .tls_fingerprint = f.fingerprint};
  if (StartsWith(g.server, "https://") && config.tls_fingerprint.empty()) {
    // Trust on first use — but the user decides before the token goes anywhere.
    auto fp = ServerFingerprint(g.server);
    if (!fp.ok()) return Fail(fp.status());
    config.tls_fingerprint = *fp;
    fmt::print("The server's certificate fingerprint is\n  {}\n", *fp);
    if (f.trust) {
      fmt::print("Trusted as asked (--trust); it is pinned from now on.\n");
    } else if (::isatty(STDIN_FILENO)) {
      fmt::print("Is it the one your admin gave you (the server prints it at start)? [y/N] ");
      std::fflush(stdout);
      std::string answer;
      if (!std::getline(std::cin, answer) || (answer != "y" && answer != "Y" && answer != "yes")) {
        return Fail(Status::Forbidden("login: fingerprint not confirmed; nothing saved or sent"));
      }
    } else {
      return Fail(
          Status::Invalid("login: confirm the server's certificate: pass --fingerprint " + *fp +
                          " if it is the one your admin gave you (or --trust to pin it unseen)"));
    }
  }
  Status saved = WriteLoginConfig(config);
  if (!saved.ok()) return Fail(saved);
  GlobalFlags check = g;
  check.token.clear();
  auto res = CallServer(check, "GET", "/v1/whoami");
  if (!res.ok()) return Fail(res.status());
  fmt::print("Logged in to {} as {} ({}). Saved in {}/config.\n", g.server,
             Str(res->as_object(), "user"), Str(res->as_object(), "role"), BerthHome());
  return 0;
}

int TokenCreate(const GlobalFlags& g, const TokenCreateFlags& f) {
  json::object body{{"user", f.user}};
  if (!f.name.empty()) body["name"] = f.name;
  if (!f.role.empty()) body["role"] = f.role;
  if (!f.expires.empty()) {
    auto d = ParseDuration(f.expires);
    if (!d || *d <= 0) {
      return Fail(Status::Invalid("--expires: expected a duration like 90d, 12h or 30m, got '" +
                                  f.expires + "'"));
    }
    body["expires_in_ms"] = *d;
  }
  auto res = CallServer(g, "POST", "/v1/admin/tokens", SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(o));
    return 0;
  }
  fmt::print(stderr, "Token {} for {} (expires {}). It is shown only this once:\n", Str(o, "name"),
             Str(o, "user"), Str(o, "expires_at") == "-" ? "never" : Str(o, "expires_at"));
  fmt::print("{}\n", Str(o, "token"));
  return 0;
}

int TokenList(const GlobalFlags& g, bool as_json) {
  auto res = CallServer(g, "GET", "/v1/admin/tokens");
  if (!res.ok()) return Fail(res.status());
  const json::array& tokens = res->as_object().at("tokens").as_array();
  if (as_json) {
    fmt::print("{}\n", SerializeJson(tokens));
    return 0;
  }
  Table t({"NAME", "USER", "STATE", "CREATED", "BY", "EXPIRES"});
  for (const auto& v : tokens) {
    const json::object& o = v.as_object();
    t.Add({Str(o, "name"), Str(o, "user"), Str(o, "state"), Str(o, "created_at"),
           Str(o, "created_by"), Str(o, "expires_at") == "-" ? "never" : Str(o, "expires_at")});
  }
  fmt::print("{}", t.Render());
  return 0;
}

int TokenRevoke(const GlobalFlags& g, const std::string& name) {
  auto res = CallServer(g, "POST", "/v1/admin/tokens/" + net::UrlEncode(name) + "/revoke");
  if (!res.ok()) return Fail(res.status());
  fmt::print("Token {} of {} is revoked.\n", name, Str(res->as_object(), "user"));
  return 0;
}

namespace {

// `--users a,b` / `*` / `-` as the API's "users" list.
json::array UsersJson(const std::string& users) {
  json::array out;
  if (users == "-") return out;
  for (const std::string& user : Split(users, ',')) {
    if (!user.empty()) out.push_back(json::string(user));
  }
  return out;
}

std::string UsersText(const json::value& users) {
  std::vector<std::string> names;
  if (users.is_array()) {
    for (const json::value& v : users.as_array()) {
      if (v.is_string()) names.emplace_back(v.as_string());
    }
  }
  if (names.empty()) return "no one";
  if (names == std::vector<std::string>{"*"}) return "any user but an admin";
  return Join(names, ", ");
}

}  // namespace

int NodeJoinToken(const GlobalFlags& g, const JoinTokenFlags& f) {
  json::object body{{"reusable", f.reusable}, {"users", UsersJson(f.users)}};
  if (f.expires == "never") {
    body["expires_in_ms"] = 0;
  } else {
    auto d = ParseDuration(f.expires);
    if (!d || *d <= 0) {
      return Fail(Status::Invalid(
          "--expires: expected a duration like 1h or 30m (or never), got '" + f.expires + "'"));
    }
    body["expires_in_ms"] = *d;
  }
  auto res = CallServer(g, "POST", "/v1/admin/join-tokens", SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(o));
    return 0;
  }
  const json::value* users = o.if_contains("speaks_for");
  fmt::print(stderr,
             "Join token {} ({}, expires {}; its nodes speak for {}). It is shown only this once; "
             "put it in a file on the new node and start its agent with --join-token-file FILE:\n",
             Str(o, "name"), f.reusable ? "reusable" : "one node",
             Str(o, "expires_at") == "-" ? "never" : Str(o, "expires_at"),
             users ? UsersText(*users) : "no one");
  fmt::print("{}\n", Str(o, "token"));
  return 0;
}

int NodeUsers(const GlobalFlags& g, const std::string& node, const std::string& users) {
  json::object body{{"users", UsersJson(users)}};
  auto res = CallServer(g, "POST", "/v1/admin/nodes/" + net::UrlEncode(node) + "/users",
                        SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::value* now = res->as_object().if_contains("users");
  fmt::print("Node {} now speaks for {} through its user socket.\n", node,
             now ? UsersText(*now) : "no one");
  return 0;
}

int NodeRevoke(const GlobalFlags& g, const std::string& node) {
  auto res = CallServer(g, "POST", "/v1/admin/nodes/" + net::UrlEncode(node) + "/revoke");
  if (!res.ok()) return Fail(res.status());
  fmt::print(
      "Node {}'s credential is revoked and its session ended: its agent can no longer act as "
      "it. Its jobs end when its lease runs out. To bring the node back, give it a new join "
      "token and remove its STATE_DIR/node-credential.\n",
      node);
  return 0;
}

int UserSet(const GlobalFlags& g, const UserSetFlags& f) {
  json::object body;
  if (!f.role.empty()) body["role"] = f.role;
  if (f.max_priority) body["max_priority"] = *f.max_priority;
  if (f.team) body["team"] = *f.team;
  for (const auto& [flag, field, value] :
       {std::tuple("--max-running-gpus", "max_running_gpus", &f.max_running_gpus),
        std::tuple("--max-pending-jobs", "max_pending_jobs", &f.max_pending_jobs)}) {
    if (!*value) continue;
    if (**value == "none") {
      body[field] = nullptr;
      continue;
    }
    char* end = nullptr;
    const long n = std::strtol((*value)->c_str(), &end, 10);
    if ((*value)->empty() || *end != '\0' || n < 0) {
      return Fail(Status::Invalid(std::string(flag) + ": expected a number >= 0 or none, got '" +
                                  **value + "'"));
    }
    body[field] = n;
  }
  auto res =
      CallServer(g, "POST", "/v1/admin/users/" + net::UrlEncode(f.name), SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  fmt::print("{}: role {}, max priority {}, team {}, max running GPUs {}, max pending jobs {}\n",
             Str(o, "name"), Str(o, "role"), Str(o, "max_priority"), Str(o, "team"),
             Str(o, "max_running_gpus") == "-" ? "no limit" : Str(o, "max_running_gpus"),
             Str(o, "max_pending_jobs") == "-" ? "no limit" : Str(o, "max_pending_jobs"));
  return 0;
}

int UserList(const GlobalFlags& g, bool as_json) {
  auto res = CallServer(g, "GET", "/v1/admin/users");
  if (!res.ok()) return Fail(res.status());
  const json::array& users = res->as_object().at("users").as_array();
  if (as_json) {
    fmt::print("{}\n", SerializeJson(users));
    return 0;
  }
  Table t({"USER", "ROLE", "MAX PRIORITY", "TEAM", "MAX GPUS", "MAX PENDING", "UPDATED", "BY"});
  for (const auto& v : users) {
    const json::object& o = v.as_object();
    t.Add({Str(o, "name"), Str(o, "role"), Str(o, "max_priority"), Str(o, "team"),
           Str(o, "max_running_gpus"), Str(o, "max_pending_jobs"), Str(o, "updated_at"),
           Str(o, "updated_by")});
  }
  fmt::print("{}", t.Render());
  return 0;
}

int Audit(const GlobalFlags& g, int limit, bool as_json) {
  auto res = CallServer(g, "GET", fmt::format("/v1/admin/audit?limit={}", limit));
  if (!res.ok()) return Fail(res.status());
  const json::array& rows = res->as_object().at("audit").as_array();
  if (as_json) {
    fmt::print("{}\n", SerializeJson(rows));
    return 0;
  }
  Table t({"AT", "BY", "ACTION", "TARGET", "DETAIL"});
  for (const auto& v : rows) {
    const json::object& o = v.as_object();
    t.Add({Str(o, "at"), Str(o, "by"), Str(o, "action"), Str(o, "target"), Str(o, "detail")});
  }
  fmt::print("{}", t.Render());
  return 0;
}

}  // namespace berth::cli
