// Who am I, and the admins' API: users' rights, tokens, the audit log (docs/api.md "Admin").
#include "server/http/admin_api.h"

#include <fmt/format.h>

#include <cmath>

#include "common/json_util.h"
#include "common/strings.h"
#include "server/http/api_docs.h"
#include "server/http/responses.h"

namespace berth {

namespace {

// The users a node may speak for: ["*"], [] or names (TokenRow::speaks_for).
json::array SpeaksForJson(const std::string& speaks_for) {
  json::array out;
  for (const std::string& user : Split(speaks_for, ',')) {
    if (!user.empty()) out.push_back(json::string(user));
  }
  return out;
}

json::object TokenJson(const TokenRow& t, TimeMs now) {
  std::string state = t.revoked_at                           ? "revoked"
                      : t.expires_at && *t.expires_at <= now ? "expired"
                                                             : "active";
  return json::object{{"name", t.name},
                      {"user", t.user},
                      {"state", state},
                      {"created_at", TimeToJson(t.created_at)},
                      {"created_by", t.created_by},
                      {"expires_at", TimeToJson(t.expires_at)},
                      {"revoked_at", TimeToJson(t.revoked_at)},
                      {"speaks_for", SpeaksForJson(t.speaks_for)}};
}

// `users` of a request body (NodeUsers): absent is no one.
Result<std::string> SpeaksForFromJson(const json::object& o) {
  auto users = o.find("users");
  if (users == o.end()) return std::string();
  if (!users->value().is_array()) {
    return Status::Invalid("'users' must be a list of user names, or [\"*\"] for any user");
  }
  std::vector<std::string> names;
  for (const json::value& v : users->value().as_array()) {
    if (!v.is_string()) return Status::Invalid("'users' must hold strings");
    names.emplace_back(v.as_string());
  }
  return NodeUsers(names);
}

json::value OptionalInt(const std::optional<int>& v) { return v ? json::value(*v) : nullptr; }

json::object UserJson(const UserRow& u) {
  return json::object{{"name", u.name},
                      {"role", std::string(RoleName(u.role))},
                      {"max_priority", u.max_priority},
                      {"team", u.team.empty() ? json::value(nullptr) : json::value(u.team)},
                      {"max_running_gpus", OptionalInt(u.max_running_gpus)},
                      {"max_pending_jobs", OptionalInt(u.max_pending_jobs)},
                      {"updated_at", TimeToJson(u.updated_at)},
                      {"updated_by", u.updated_by}};
}

}  // namespace

void AdminApi::AddRoutes(RouteTable& t, AdminApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  t.Add(
      "GET", "/v1/whoami", R::kIoThread,
      [self](const RouteCall& c) { return self->HandleWhoami(*c.by); }, Whoami());
  // Administration.
  t.Add(
      "GET", "/v1/admin/tokens", R::kRead,
      [self](const RouteCall& c) { return self->HandleListTokens(*c.by); }, ListTokens());
  t.Add(
      "POST", "/v1/admin/tokens", R::kState,
      [self](const RouteCall& c) { return self->HandleCreateToken(*c.req, *c.by); }, CreateToken());
  t.Add(
      "POST", "/v1/admin/tokens/{name}/revoke", R::kState,
      [self](const RouteCall& c) { return self->HandleRevokeToken(c.params[0], *c.by); },
      RevokeToken());
  t.Add(
      "POST", "/v1/admin/join-tokens", R::kState,
      [self](const RouteCall& c) { return self->HandleCreateJoinToken(*c.req, *c.by); },
      CreateJoinToken());
  t.Add(
      "POST", "/v1/admin/nodes/{name}/revoke", R::kState,
      [self](const RouteCall& c) { return self->HandleRevokeNode(c.params[0], *c.by); },
      RevokeNode());
  t.Add(
      "POST", "/v1/admin/nodes/{name}/users", R::kState,
      [self](const RouteCall& c) { return self->HandleSetNodeUsers(*c.req, c.params[0], *c.by); },
      SetNodeUsers());
  t.Add(
      "GET", "/v1/admin/users", R::kRead,
      [self](const RouteCall& c) { return self->HandleListUsers(*c.by); }, ListUsers());
  t.Add(
      "POST", "/v1/admin/users/{name}", R::kState,
      [self](const RouteCall& c) { return self->HandleSetUser(c.params[0], *c.req, *c.by); },
      SetUser());
  t.Add(
      "POST", "/v1/admin/teams/{name}", R::kState,
      [self](const RouteCall& c) { return self->HandleSetTeam(c.params[0], *c.req, *c.by); },
      SetTeam());
  t.Add(
      "GET", "/v1/admin/audit", R::kRead,
      [self](const RouteCall& c) { return self->HandleAudit(*c.req, *c.by); }, Audit());
}

net::HttpResponse AdminApi::HandleWhoami(const Principal& by) {
  json::object o{{"user", by.user},
                 {"role", std::string(RoleName(by.role))},
                 {"team", by.team.empty() ? json::value(nullptr) : json::value(by.team)},
                 {"max_priority", by.max_priority ? json::value(*by.max_priority) : nullptr},
                 {"via", by.via},
                 {"token_expires", TimeToJson(by.token_expires)}};
  return JsonResponse(200, o);
}

net::HttpResponse AdminApi::HandleCreateToken(const net::HttpRequest& req, const Principal& by) {
  auto o = BodyObject(req);
  if (!o.ok()) return ErrorResponse(o.status());
  BERTH_RESPOND_IF_ERROR(OnlyFields(*o, {"user", "name", "role", "expires_in_ms"}));
  NewToken request;
  auto user = GetString(*o, "user");
  auto name = GetString(*o, "name");
  auto role = GetString(*o, "role");
  auto expires = GetInt(*o, "expires_in_ms", 0);
  for (const Status* st : {&user.status(), &name.status(), &role.status(), &expires.status()}) {
    if (!st->ok()) return ErrorResponse(*st);
  }
  if (user->empty()) return ErrorResponse(Status::Invalid("say whose token it is: 'user'"));
  request.user = *user;
  request.name = *name;
  if (!role->empty()) {
    request.role = ParseRole(*role);
    if (!request.role) {
      return ErrorResponse(
          Status::Invalid("unknown role '" + *role + "' (user, operator or admin)"));
    }
  }
  constexpr int64_t kMaxExpiresMs = 100LL * 365 * 24 * 3600 * 1000;
  if (*expires < 0 || *expires > kMaxExpiresMs) {
    return ErrorResponse(Status::Invalid("expires_in_ms must be between 0 and 100 years"));
  }
  if (*expires > 0) request.expires_at = c_.clock.Now() + *expires;
  auto created = c_.accounts.CreateToken(by, std::move(request));
  if (!created.ok()) return ErrorResponse(created.status());
  json::object out = TokenJson(created->row, c_.clock.Now());
  out["token"] = created->secret;
  return JsonResponse(201, out);
}

net::HttpResponse AdminApi::HandleCreateJoinToken(const net::HttpRequest& req,
                                                  const Principal& by) {
  auto o = BodyObject(req);
  if (!o.ok()) return ErrorResponse(o.status());
  BERTH_RESPOND_IF_ERROR(OnlyFields(*o, {"expires_in_ms", "reusable", "users"}));
  auto expires = GetInt(*o, "expires_in_ms", 3'600'000);
  if (!expires.ok()) return ErrorResponse(expires.status());
  NewJoinToken request;
  if (auto reusable = o->find("reusable"); reusable != o->end()) {
    if (!reusable->value().is_bool()) {
      return ErrorResponse(Status::Invalid("'reusable' must be true or false"));
    }
    request.reusable = reusable->value().as_bool();
  }
  constexpr int64_t kMaxExpiresMs = 100LL * 365 * 24 * 3600 * 1000;
  if (*expires < 0 || *expires > kMaxExpiresMs) {
    return ErrorResponse(Status::Invalid("expires_in_ms must be between 0 and 100 years"));
  }
  if (*expires > 0) request.expires_at = c_.clock.Now() + *expires;
  auto speaks_for = SpeaksForFromJson(*o);
  if (!speaks_for.ok()) return ErrorResponse(speaks_for.status());
  request.speaks_for = *speaks_for;
  auto created = c_.accounts.CreateJoinToken(by, request);
  if (!created.ok()) return ErrorResponse(created.status());
  json::object out = TokenJson(created->row, c_.clock.Now());
  out["token"] = created->secret;
  out["reusable"] = request.reusable;
  return JsonResponse(201, out);
}

net::HttpResponse AdminApi::HandleSetNodeUsers(const net::HttpRequest& req, const std::string& node,
                                               const Principal& by) {
  auto o = BodyObject(req);
  if (!o.ok()) return ErrorResponse(o.status());
  BERTH_RESPOND_IF_ERROR(OnlyFields(*o, {"users"}));
  if (!o->contains("users")) return ErrorResponse(Status::Invalid("'users' is required"));
  auto speaks_for = SpeaksForFromJson(*o);
  if (!speaks_for.ok()) return ErrorResponse(speaks_for.status());
  auto changed = c_.accounts.SetNodeUsers(by, node, *speaks_for);
  if (!changed.ok()) return ErrorResponse(changed.status());
  return JsonResponse(200, json::object{{"node", node}, {"users", SpeaksForJson(*speaks_for)}});
}

net::HttpResponse AdminApi::HandleRevokeNode(const std::string& node, const Principal& by) {
  auto revoked = c_.accounts.RevokeNode(by, node, c_.core.reads().NodeLastSeen(node).has_value());
  if (!revoked.ok()) return ErrorResponse(revoked.status());
  // Its agent's session ends now: its calls fail from here on (it cannot register again), and
  // its lease runs out as any silent node's does.
  c_.core.agents().EndSession(node);
  json::array names;
  bool freed = false;
  for (const TokenRow& row : *revoked) {
    names.push_back(json::string(row.name));
    freed = freed || row.name.starts_with(Accounts::kFreedNodeName);
  }
  return JsonResponse(
      200, json::object{{"node", node}, {"revoked", std::move(names)}, {"freed", freed}});
}

net::HttpResponse AdminApi::HandleListTokens(const Principal& by) {
  BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kAdmin, "listing tokens"));
  json::array tokens;
  TimeMs now = c_.clock.Now();
  for (const auto& t : c_.accounts.Tokens()) tokens.push_back(TokenJson(t, now));
  return JsonResponse(200, json::object{{"tokens", std::move(tokens)}});
}

net::HttpResponse AdminApi::HandleRevokeToken(const std::string& name, const Principal& by) {
  auto row = c_.accounts.RevokeToken(by, name);
  if (!row.ok()) return ErrorResponse(row.status());
  return JsonResponse(200, TokenJson(*row, c_.clock.Now()));
}

net::HttpResponse AdminApi::HandleListUsers(const Principal& by) {
  BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kAdmin, "listing users"));
  json::array users;
  for (const auto& u : c_.accounts.Users()) users.push_back(UserJson(u));
  return JsonResponse(200, json::object{{"users", std::move(users)}});
}

net::HttpResponse AdminApi::HandleSetUser(const std::string& name, const net::HttpRequest& req,
                                          const Principal& by) {
  auto o = BodyObject(req);
  if (!o.ok()) return ErrorResponse(o.status());
  BERTH_RESPOND_IF_ERROR(
      OnlyFields(*o, {"role", "max_priority", "team", "max_running_gpus", "max_pending_jobs"}));
  UserChange change;
  change.name = name;
  if (const auto* v = o->if_contains("role")) {
    if (!v->is_string()) return ErrorResponse(Status::Invalid("'role' must be a string"));
    change.role = ParseRole(std::string(v->as_string()));
    if (!change.role) {
      return ErrorResponse(Status::Invalid("unknown role '" + std::string(v->as_string()) +
                                           "' (user, operator or admin)"));
    }
  }
  if (const auto* v = o->if_contains("max_priority")) {
    auto p = AsInt(*v);
    if (!p || *p < -1'000'000 || *p > 1'000'000) {
      return ErrorResponse(
          Status::Invalid("'max_priority' must be an integer between -1000000 and 1000000"));
    }
    change.max_priority = static_cast<int>(*p);
  }
  if (const auto* v = o->if_contains("team")) {
    if (!v->is_string() && !v->is_null()) {
      return ErrorResponse(Status::Invalid("'team' must be a string (\"\" or null: none)"));
    }
    change.team = v->is_string() ? std::string(v->as_string()) : "";
  }
  for (const char* field : {"max_running_gpus", "max_pending_jobs"}) {
    const auto* v = o->if_contains(field);
    if (v == nullptr) continue;
    std::optional<int64_t> n = v->is_null() ? std::optional<int64_t>(-1) : AsInt(*v);
    if (!n || *n < -1 || *n > 100'000'000) {
      return ErrorResponse(
          Status::Invalid("'" + std::string(field) + "' must be an integer >= 0 (null: no limit)"));
    }
    (std::string_view(field) == "max_running_gpus" ? change.max_running_gpus
                                                   : change.max_pending_jobs) =
        static_cast<int>(*n);
  }
  auto row = c_.accounts.SetUser(by, change);
  if (!row.ok()) return ErrorResponse(row.status());
  c_.core.scheduling().SetShareRules(c_.accounts.Users(), c_.accounts.Teams());
  return JsonResponse(200, UserJson(*row));
}

net::HttpResponse AdminApi::HandleSetTeam(const std::string& name, const net::HttpRequest& req,
                                          const Principal& by) {
  auto o = BodyObject(req);
  if (!o.ok()) return ErrorResponse(o.status());
  BERTH_RESPOND_IF_ERROR(OnlyFields(*o, {"quota", "borrow_limit", "weight"}));
  TeamChange change;
  change.name = name;
  for (const char* field : {"quota", "borrow_limit"}) {
    const auto* v = o->if_contains(field);
    if (v == nullptr) continue;
    if (!v->is_object()) {
      return ErrorResponse(
          Status::Invalid("'" + std::string(field) + "' must be an object of GPU type -> GPUs"));
    }
    std::map<std::string, MilliGpu> amounts;
    for (const auto& [type, n] : v->as_object()) {
      if (!n.is_number() || n.to_number<double>() < 0 || n.to_number<double>() > 1e9) {
        return ErrorResponse(Status::Invalid("'" + std::string(field) + "." + std::string(type) +
                                             "' must be a number of GPUs >= 0"));
      }
      amounts[std::string(type)] =
          static_cast<MilliGpu>(std::llround(n.to_number<double>() * kMilliPerGpu));
    }
    (std::string_view(field) == "quota" ? change.quota : change.borrow_limit) = std::move(amounts);
  }
  if (const auto* v = o->if_contains("weight")) {
    if (!v->is_number()) return ErrorResponse(Status::Invalid("'weight' must be a number"));
    change.weight = v->to_number<double>();
  }
  auto row = c_.accounts.SetTeam(by, change);
  if (!row.ok()) return ErrorResponse(row.status());
  c_.core.scheduling().SetShareRules(c_.accounts.Users(), c_.accounts.Teams());
  json::object quota;
  for (const auto& [type, milli] : row->quota) quota[type] = double(milli) / kMilliPerGpu;
  json::object borrow;
  for (const auto& [type, milli] : row->borrow_limit) borrow[type] = double(milli) / kMilliPerGpu;
  return JsonResponse(200, json::object{{"name", row->name},
                                        {"quota", std::move(quota)},
                                        {"borrow_limit", std::move(borrow)},
                                        {"weight", row->weight},
                                        {"updated_at", TimeToJson(row->updated_at)},
                                        {"updated_by", row->updated_by}});
}

net::HttpResponse AdminApi::HandleAudit(const net::HttpRequest& req, const Principal& by) {
  BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kAdmin, "reading the audit log"));
  int limit = 100;
  try {
    limit = std::stoi(req.Query("limit", "100"));
  } catch (...) {
    return ErrorResponse(Status::Invalid("limit must be an integer"));
  }
  auto rows = c_.store.ListAudit(limit);
  if (!rows.ok()) return ErrorResponse(rows.status());
  json::array out;
  for (const auto& r : *rows) {
    out.push_back(json::object{{"seq", r.seq},
                               {"at", TimeToJson(r.at)},
                               {"by", r.by},
                               {"action", r.action},
                               {"target", r.target},
                               {"detail", r.detail}});
  }
  return JsonResponse(200, json::object{{"audit", std::move(out)}});
}

}  // namespace berth
