// The contracts of identity, administration and the dashboard's calls (docs/api.md "Identity and
// administration", "Dashboard").
#include "server/http/api_docs.h"

namespace berth::api_docs {

using namespace schema;

namespace {

const char* const kAdmins = "Needs the admin role (403 otherwise); recorded in the audit log.";

json::value Whoami(bool session) {
  json::value o = Obj({{"user", Str()},
                       {"role", Enum({"user", "operator", "admin"})},
                       {"team", Nullable(Str())},
                       {"via", Str()}},
                      {"user", "role", "via"});
  auto& props = o.as_object()["properties"].as_object();
  if (session) {
    props["version"] = Str();
    props["csrf"] = Nullable(Str());
  } else {
    props["max_priority"] = Nullable(Int());
    props["token_expires"] = Nullable(Time());
  }
  return o;
}

}  // namespace

RouteDoc Whoami() {
  return {.summary = "Who the server takes you for, with your role and team",
          .response = Whoami(false)};
}

RouteDoc ListTokens() {
  return {.summary = "Every token (never a secret)",
          .description = kAdmins,
          .response = Obj({{"tokens", Arr(Ref("Token"))}}, {"tokens"})};
}

RouteDoc CreateToken() {
  return {.summary = "Make a user's API token; the secret is in this answer only",
          .description = kAdmins,
          .request = Closed(Obj({{"user", Str()},
                                 {"name", Str()},
                                 {"role", Enum({"user", "operator", "admin"})},
                                 {"expires_in_ms", Int()}},
                                {"user"})),
          .ok_status = 201,
          .response = Ref("Token")};
}

RouteDoc RevokeToken() {
  return {.summary = "Revoke a token", .description = kAdmins, .response = Ref("Token")};
}

RouteDoc CreateJoinToken() {
  json::value answer = json::object{
      {"allOf", json::array{Ref("Token"), Obj({{"reusable", Bool()}}, {"token", "reusable"})}}};
  return {.summary = "Make a join token, which a new node exchanges for its own credential",
          .description = kAdmins,
          .request =
              Closed(Obj({{"expires_in_ms", Int()}, {"reusable", Bool()}, {"users", Arr(Str())}})),
          .ok_status = 201,
          .response = std::move(answer)};
}

RouteDoc RevokeNode() {
  return {.summary = "Revoke every live credential of a node and end its agent's session",
          .description = kAdmins,
          .response = Obj({{"node", Str()}, {"revoked", Arr(Str())}, {"freed", Bool()}},
                          {"node", "revoked"})};
}

RouteDoc SetNodeUsers() {
  return {.summary = "Replace whom a node's credentials may speak for",
          .description = kAdmins,
          .request = Closed(Obj({{"users", Arr(Str())}}, {"users"})),
          .response = Obj({{"node", Str()}, {"users", Arr(Str())}}, {"node", "users"})};
}

RouteDoc ListUsers() {
  return {.summary = "Every user berth keeps settings for",
          .description = kAdmins,
          .response = Obj({{"users", Arr(Ref("User"))}}, {"users"})};
}

RouteDoc SetUser() {
  return {.summary = "Set a user's role, priority cap, team and limits",
          .description = kAdmins,
          .request = Closed(Obj({{"role", Enum({"user", "operator", "admin"})},
                                 {"max_priority", Nullable(Int())},
                                 {"team", Nullable(Str())},
                                 {"max_running_gpus", Nullable(Int())},
                                 {"max_pending_jobs", Nullable(Int())}})),
          .response = Ref("User")};
}

RouteDoc SetTeam() {
  return {.summary = "Set a team's GPU quota, borrow limit and fair-share weight",
          .description = kAdmins,
          .request =
              Closed(Obj({{"quota", Map(Int())}, {"borrow_limit", Map(Int())}, {"weight", Num()}})),
          .response = Ref("Team")};
}

RouteDoc Audit() {
  return {.summary = "The audit log, oldest first",
          .description = kAdmins,
          .query = {{"limit", Int(), "rows (default 100)"}},
          .response = Obj({{"audit", Arr(Obj({{"seq", Int()},
                                              {"at", Time()},
                                              {"by", Str()},
                                              {"action", Str()},
                                              {"target", Str()},
                                              {"detail", Str()}},
                                             {"seq", "at", "by", "action"}))}},
                          {"audit"})};
}

RouteDoc LoginPage() {
  return {.summary = "Spend a one-time login link's code: a page that sets the session cookie",
          .query = {{"code", Str(), "the code of POST /v1/dashboard/link"}},
          .response_type = "text/html",
          .response = Str(),
          .errors = {{401, "an unknown, spent or expired code: a page saying so", "text/html"}}};
}

RouteDoc SessionLogin() {
  return {.summary = "A dashboard session on a user's API token (sets the cookie)",
          .request = Closed(Obj({{"token", Str()}}, {"token"})),
          .response = Obj({{"user", Str()}, {"csrf", Str()}}, {"user", "csrf"}),
          .errors = {{401, "an unknown, revoked or expired token"},
                     {403, "the cluster token, which identifies nodes"}}};
}

RouteDoc LoginLink() {
  return {
      .summary = "A one-time dashboard login link for the caller (`berth dashboard`)",
      .ok_status = 201,
      .response = Obj({{"user", Str()}, {"path", Str()}, {"url", Str()}, {"expires_in_s", Int()}},
                      {"user", "path", "url", "expires_in_s"})};
}

RouteDoc SessionInfo() {
  return {.summary = "The dashboard's caller, and the CSRF secret of its session",
          .response = Whoami(true)};
}

RouteDoc Logout() {
  return {.summary = "End the dashboard session and clear its cookie",
          .response = Obj({{"ok", Bool()}}, {"ok"})};
}

RouteDoc Overview() {
  json::value amount = Obj({{"total", Num()}, {"used", Num()}}, {"total", "used"});
  return {
      .summary = "The dashboard's overview: jobs and nodes by state, GPUs, CPUs, memory",
      .response = Obj(
          {{"jobs", Map(Int())},
           {"nodes", Map(Int())},
           {"gpus", Arr(Obj({{"type", Str()}, {"total", Num()}, {"used", Num()}, {"down", Num()}},
                            {"type", "total", "used", "down"}))},
           {"cpus", amount},
           {"memory", amount},
           {"recent_failures", Arr(Ref("Job"))},
           {"idle_gpus", Arr(Obj({{"job", Int()},
                                  {"user", Str()},
                                  {"gpus", Num()},
                                  {"idle_for_seconds", Int()},
                                  {"mean_sm", Num()}},
                                 {"job", "user", "gpus", "idle_for_seconds"}))}},
          {"jobs", "nodes", "gpus", "cpus", "memory", "recent_failures", "idle_gpus"})};
}

RouteDoc DashboardQueue() {
  return {.summary = "One page of the queue, sorted and filtered by the server",
          .query = {{"view", Enum({"active", "finished"}), "active (default) or finished jobs"},
                    {"user", Str(), "one user's jobs"},
                    {"team", Str(), "one team's jobs"},
                    {"status", Str(), "jobs in this status"},
                    {"group", Int(), "one group's jobs"},
                    {"sort", Str(), "id, priority, user or status; '-' first for descending"},
                    {"offset", Int(), "rows to skip (at most 1000000)"},
                    {"limit", Int(), "rows (1..500, default 100)"}},
          .response = Obj({{"view", Str()},
                           {"offset", Int()},
                           {"limit", Int()},
                           {"total", Nullable(Int())},
                           {"more", Bool()},
                           {"rows", Arr(Ref("QueueRow"))}},
                          {"view", "offset", "limit", "total", "more", "rows"})};
}

const char* const kOwnSinks = "Acts on the caller's own sinks (docs/notifications.md).";

RouteDoc NotifyList() {
  return {.summary = "The caller's notification sinks and latest notices, newest first",
          .description = kOwnSinks,
          .query = {{"limit", Int(), "notices (1..1000, default 50)"}},
          .response = Obj({{"sinks", Arr(Ref("NotifySink"))}, {"notices", Arr(Ref("Notice"))}},
                          {"sinks", "notices"})};
}

RouteDoc NotifySetSink() {
  return {.summary = "Set the caller's e-mail address or webhook (replacing the one of that kind)",
          .description = std::string(kOwnSinks) +
                         " A webhook must be https (http only to loopback) and needs a secret "
                         "of 16 to 512 characters, which signs its deliveries and is never "
                         "shown again; `events` are the defaults of jobs without `notify:`, and "
                         "`nodes` there (operators only; 403 otherwise) adds the nodes' events.",
          .request = Closed(Obj({{"kind", Enum({"email", "webhook"})},
                                 {"target", Str()},
                                 {"secret", Str()},
                                 {"format", Enum({"json", "slack"})},
                                 {"events", Str()}},
                                {"kind", "target"})),
          .response = Ref("NotifySink"),
          .errors = {{403, "`nodes` in `events`, asked by a user who is not an operator"}}};
}

RouteDoc NotifyRemoveSink() {
  return {.summary = "Remove the caller's sink of this kind (email or webhook)",
          .description = kOwnSinks,
          .response = Obj({{"removed", Str()}}, {"removed"}),
          .errors = {{404, "the caller has no sink of that kind"}}};
}

RouteDoc NotifyTest() {
  return {.summary = "Send a test notification to each of the caller's sinks",
          .description = std::string(kOwnSinks) + " 409 when the caller has no sink.",
          .response = Obj({{"id", Str()}}, {"id"}),
          .errors = {{409, "the caller has no sink"}}};
}

}  // namespace berth::api_docs
