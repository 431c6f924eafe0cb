// berth whoami / login, and berth admin token|node|user|audit (docs/security.md).
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>

#include "cli/command_context.h"
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
  if (res->is_object() && res->as_object().contains("freed") &&
      res->as_object().at("freed").is_bool() && res->as_object().at("freed").as_bool()) {
    fmt::print(
        "Node {} had no credential of its own (it registers with the cluster token): its name is "
        "free for a join now and its session ended. Stop its agent, or it registers again with "
        "the cluster token.\n",
        node);
    return 0;
  }
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

// --- command line: the registration of each command (cli/command_context.h) ---

void AddWhoamiCommand(CommandContext& c) {
  auto& whoami_json = c.Keep<bool>(false);
  auto* whoami = c.app.add_subcommand("whoami", "Who the server takes you for, and your rights");
  whoami->add_flag("--json", whoami_json, "Machine-readable output");
  c.AddGlobal(whoami);
  whoami->callback([&] { c.rc = Whoami(c.g, whoami_json); });
}

void AddDashboardCommand(CommandContext& c) {
  auto& dashboard_json = c.Keep<bool>(false);
  auto* dashboard = c.app.add_subcommand(
      "dashboard",
      "Print a link that opens the web dashboard logged in as you (once, within 5 minutes)");
  dashboard->add_flag("--json", dashboard_json, "Machine-readable output");
  c.AddGlobal(dashboard);
  dashboard->callback([&] { c.rc = Dashboard(c.g, dashboard_json); });
}

void AddLoginCommand(CommandContext& c) {
  auto& login_flags = c.Keep<LoginFlags>();
  auto* login = c.app.add_subcommand(
      "login", "Save a server and your token in BERTH_HOME/config (mode 0600) for later commands");
  login->add_option("--token-file", login_flags.token_file, "File holding your token");
  login->add_option("--fingerprint", login_flags.fingerprint,
                    "Pin this certificate fingerprint (sha256:...), as your admin gave it");
  login->add_flag("--trust", login_flags.trust,
                  "Pin the fingerprint the server presents without asking (trust on first use)");
  c.AddGlobal(login);
  login->callback([&] { c.rc = Login(c.g, login_flags); });
}

namespace {

void AddAdminTokenCommands(CommandContext& c, CLI::App* admin) {
  auto& token_flags = c.Keep<TokenCreateFlags>();
  auto& token_list_json = c.Keep<bool>(false);
  auto& revoke_name = c.Keep<std::string>();
  auto* token = admin->add_subcommand("token", "Users' bearer tokens");
  token->require_subcommand(1);
  auto* token_create =
      token->add_subcommand("create", "Issue a token for a user; it is printed only once");
  token_create->add_option("--user", token_flags.user, "Whose token")->required();
  token_create->add_option("--name", token_flags.name, "Token name (default: USER-xxxxxx)");
  token_create->add_option("--role", token_flags.role,
                           "Also set the user's role: user, operator or admin");
  token_create->add_option("--expires", token_flags.expires,
                           "Lifetime, like 90d or 12h (default: never expires)");
  token_create->add_flag("--json", token_flags.as_json, "Machine-readable output");
  c.AddGlobal(token_create);
  token_create->callback([&] { c.rc = TokenCreate(c.g, token_flags); });
  auto* token_list = token->add_subcommand("list", "Every token, without its secret");
  token_list->add_flag("--json", token_list_json, "Machine-readable output");
  c.AddGlobal(token_list);
  token_list->callback([&] { c.rc = TokenList(c.g, token_list_json); });
  auto* token_revoke = token->add_subcommand("revoke", "Revoke a token at once");
  token_revoke->add_option("name", revoke_name, "Token name")->required();
  c.AddGlobal(token_revoke);
  token_revoke->callback([&] { c.rc = TokenRevoke(c.g, revoke_name); });
}

void AddAdminNodeCommands(CommandContext& c, CLI::App* admin) {
  auto& join_flags = c.Keep<JoinTokenFlags>();
  auto& node_users_list = c.Keep<std::string>();
  auto& revoke_name = c.Keep<std::string>();
  auto* node = admin->add_subcommand(
      "node", "Nodes' own credentials: join tokens, whom they speak for, revocation");
  node->require_subcommand(1);
  auto* join_token = node->add_subcommand(
      "join-token",
      "Make a join token: an agent started with --join-token-file exchanges it for its node's "
      "own credential; printed only once");
  join_token->add_option("--expires", join_flags.expires,
                         "Lifetime, like 1h or 30m, or never (default: 1h)");
  join_token->add_flag("--reusable", join_flags.reusable,
                       "Let it join any number of nodes (default: one node, then it is used up)");
  join_token->add_option(
      "--users", join_flags.users,
      "The local users its nodes may speak for through their user socket: names separated by "
      "',', or '*' for any user but an admin (default: no one; change later with berth admin "
      "node users)");
  join_token->add_flag("--json", join_flags.as_json, "Machine-readable output");
  c.AddGlobal(join_token);
  join_token->callback([&] { c.rc = NodeJoinToken(c.g, join_flags); });
  auto* node_users = node->add_subcommand(
      "users", "Set whom a node may speak for through its user socket (replaces the list)");
  node_users->add_option("node", revoke_name, "Node name")->required();
  node_users
      ->add_option("users", node_users_list,
                   "Names separated by ',', '*' for any user but an admin, '-' for no one")
      ->required();
  c.AddGlobal(node_users);
  node_users->callback([&] { c.rc = NodeUsers(c.g, revoke_name, node_users_list); });
  auto* node_revoke =
      node->add_subcommand("revoke", "Revoke a node's credential and end its session at once");
  node_revoke->add_option("node", revoke_name, "Node name")->required();
  c.AddGlobal(node_revoke);
  node_revoke->callback([&] { c.rc = NodeRevoke(c.g, revoke_name); });
}

void AddAdminUserCommands(CommandContext& c, CLI::App* admin) {
  auto& user_flags = c.Keep<UserSetFlags>();
  auto& user_list_json = c.Keep<bool>(false);
  auto* user = admin->add_subcommand("user", "Users' rights");
  user->require_subcommand(1);
  auto* user_set = user->add_subcommand("set", "Set a user's role, highest priority or team");
  user_set->add_option("name", user_flags.name, "User name")->required();
  user_set->add_option("--role", user_flags.role, "user, operator or admin");
  user_set->add_option("--max-priority", user_flags.max_priority,
                       "Highest priority the user may submit at (default 0)");
  user_set->add_option("--team", user_flags.team, "Team (\"\" for none)");
  user_set->add_option("--max-running-gpus", user_flags.max_running_gpus,
                       "GPUs (any type) the user's running jobs may hold at once; more wait "
                       "('none': no limit)");
  user_set->add_option("--max-pending-jobs", user_flags.max_pending_jobs,
                       "Jobs the user may have waiting; submissions beyond it are refused "
                       "('none': no limit)");
  c.AddGlobal(user_set);
  user_set->callback([&] { c.rc = UserSet(c.g, user_flags); });
  auto* user_list = user->add_subcommand("list", "Users with rights set");
  user_list->add_flag("--json", user_list_json, "Machine-readable output");
  c.AddGlobal(user_list);
  user_list->callback([&] { c.rc = UserList(c.g, user_list_json); });
}

void AddAdminTeamCommands(CommandContext& c, CLI::App* admin) {
  auto& team_flags = c.Keep<TeamSetFlags>();
  auto& team_list_json = c.Keep<bool>(false);
  auto* team = admin->add_subcommand("team", "Teams: GPU quotas, borrowing, fair-share weight");
  team->require_subcommand(1);
  auto* team_set = team->add_subcommand(
      "set", "Create or change a team (docs/fair-share.md); unset options stay as they are");
  team_set->add_option("name", team_flags.name, "Team name")->required();
  team_set->add_option("--gpus", team_flags.gpus,
                       "Guaranteed (nominal) quota per GPU type, like A100:16,V100:8 ('none': "
                       "no quota); a MIG slice counts as its share of its GPU's type");
  team_set->add_option("--borrow-limit", team_flags.borrow_limit,
                       "How many idle GPUs beyond the quota it may borrow, per type, like A100:8 "
                       "(a type not named: no limit; A100:0 forbids borrowing; 'none': no "
                       "limits)");
  team_set->add_option("--weight", team_flags.weight,
                       "Fair-share weight: usage is divided by it (default 1)");
  c.AddGlobal(team_set);
  team_set->callback([&] { c.rc = TeamSet(c.g, team_flags); });
  auto* team_list = team->add_subcommand("list", "Teams, their quotas and what they use now");
  team_list->add_flag("--json", team_list_json, "Machine-readable output");
  c.AddGlobal(team_list);
  team_list->callback([&] { c.rc = TeamList(c.g, team_list_json); });
}

void AddAdminAuditCommands(CommandContext& c, CLI::App* admin) {
  auto& audit_limit = c.Keep<int>(100);
  auto& audit_json = c.Keep<bool>(false);
  auto* audit = admin->add_subcommand("audit", "Administrative actions: who did what, when");
  audit->add_option("--limit", audit_limit, "How many of the newest")->capture_default_str();
  audit->add_flag("--json", audit_json, "Machine-readable output");
  c.AddGlobal(audit);
  audit->callback([&] { c.rc = Audit(c.g, audit_limit, audit_json); });
}

}  // namespace

void AddAdminCommand(CommandContext& c) {
  auto* admin = c.app.add_subcommand(
      "admin", "Users, teams, tokens, node credentials and the audit log (admins only)");
  admin->require_subcommand(1);
  AddAdminTokenCommands(c, admin);
  AddAdminNodeCommands(c, admin);
  AddAdminUserCommands(c, admin);
  AddAdminTeamCommands(c, admin);
  AddAdminAuditCommands(c, admin);
}

}  // namespace berth::cli
