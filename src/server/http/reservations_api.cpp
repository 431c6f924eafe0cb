// ReservationsApi (reservations_api.h).
#include "server/http/reservations_api.h"

#include <algorithm>

#include "common/strings.h"
#include "common/unix_user.h"
#include "server/http/api_docs.h"
#include "server/http/responses.h"

namespace berth {

namespace {

// The calendar feed shows each reservation's windows this far ahead.
constexpr DurationMs kCalendarAhead = 30LL * 24 * 3600 * 1000;
constexpr int kCalendarMaxEvents = 2000;

Result<std::optional<std::vector<std::string>>> ListField(const json::object& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return std::optional<std::vector<std::string>>{};
  std::vector<std::string> out;
  if (it->value().is_string()) {
    // "a,b" as the CLI passes it.
    for (const std::string& s : Split(std::string(it->value().as_string()), ',')) {
      if (!s.empty()) out.push_back(s);
    }
    return std::optional(out);
  }
  if (!it->value().is_array()) return Status::Invalid(std::string(key) + ": expected a list");
  for (const json::value& v : it->value().as_array()) {
    if (!v.is_string()) return Status::Invalid(std::string(key) + ": expected strings");
    out.emplace_back(v.as_string());
  }
  return std::optional(out);
}

Result<std::optional<std::string>> TextField(const json::object& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return std::optional<std::string>{};
  if (it->value().is_int64() || it->value().is_uint64()) {
    return std::optional(std::to_string(AsInt(it->value()).value_or(0)) + "s");
  }
  if (!it->value().is_string()) return Status::Invalid(std::string(key) + ": expected a string");
  return std::optional(std::string(it->value().as_string()));
}

Result<std::optional<bool>> FlagField(const json::object& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end()) return std::optional<bool>{};
  if (!it->value().is_bool()) return Status::Invalid(std::string(key) + ": expected true or false");
  return std::optional(it->value().as_bool());
}

// iCalendar's UTC form: 20261203T140000Z.
std::string IcalTime(TimeMs t) {
  std::string rfc = FormatRfc3339(t);  // 2026-12-03T14:00:00.000Z
  std::string out;
  for (char c : rfc.substr(0, 19)) {
    if (c != '-' && c != ':') out += c;
  }
  return out + "Z";
}

// Text values escape backslash, comma, semicolon and newline (RFC 5545 3.3.11).
std::string IcalText(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == ',' || c == ';') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string WhoOf(const Reservation& r) {
  if (r.maintenance) return "maintenance";
  if (!r.team.empty()) return "team " + r.team;
  return r.users.empty() ? std::string("anyone it admits") : "users " + Join(r.users, ", ");
}

}  // namespace

void ReservationsApi::AddRoutes(RouteTable& t, ReservationsApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  t.Add(
      "GET", "/v1/reservations", R::kRead, [self](const RouteCall&) { return self->HandleList(); },
      ListReservations());
  t.Add(
      "GET", "/v1/reservations.ics", R::kRead,
      [self](const RouteCall&) { return self->HandleCalendar(); }, ReservationsCalendar());
  t.Add(
      "GET", "/v1/reservations/{name}", R::kRead,
      [self](const RouteCall& c) { return self->HandleShow(c.params[0]); }, ShowReservation());
  t.Add(
      "POST", "/v1/reservations", R::kState,
      [self](const RouteCall& c) { return self->HandleCreate(*c.req, *c.by); },
      CreateReservation());
  t.Add(
      "PATCH", "/v1/reservations/{name}", R::kState,
      [self](const RouteCall& c) { return self->HandleUpdate(c.params[0], *c.req, *c.by); },
      UpdateReservation());
  t.Add(
      "DELETE", "/v1/reservations/{name}", R::kState,
      [self](const RouteCall& c) { return self->HandleDelete(c.params[0], *c.by); },
      DeleteReservation());
}

net::HttpResponse ReservationsApi::HandleList() {
  const TimeMs now = c_.clock.Now();
  json::array list;
  for (const Reservation& r : c_.core.reservations().List()) {
    list.push_back(ReservationJson(r, now));
  }
  return JsonResponse(200,
                      json::object{{"reservations", std::move(list)}, {"now", TimeToJson(now)}});
}

net::HttpResponse ReservationsApi::HandleShow(const std::string& name) {
  std::optional<Reservation> r = c_.core.reservations().Get(name);
  if (!r) return ErrorResponse(404, "no reservation named '" + name + "'");
  return JsonResponse(200, ReservationJson(*r, c_.clock.Now()));
}

net::HttpResponse ReservationsApi::HandleCalendar() {
  const TimeMs now = c_.clock.Now();
  std::string out =
      "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//berth//reservations//EN\r\n"
      "X-WR-CALNAME:berth reservations\r\n";
  int events = 0;
  for (const Reservation& r : c_.core.reservations().List()) {
    for (std::optional<Window> w = WindowOf(r, now);
         w && w->start < now + kCalendarAhead && events < kCalendarMaxEvents;
         w = WindowOf(r, w->end), ++events) {
      const std::string where = r.all_nodes ? "all nodes" : Join(r.nodes, ", ");
      out += "BEGIN:VEVENT\r\nUID:" + r.name + "-" + IcalTime(w->start) +
             "@berth\r\nDTSTAMP:" + IcalTime(r.updated_at) + "\r\nDTSTART:" + IcalTime(w->start) +
             "\r\nDTEND:" + IcalTime(w->end) +
             "\r\nSUMMARY:" + IcalText((r.maintenance ? "Maintenance: " : "Reserved: ") + r.name) +
             "\r\nDESCRIPTION:" +
             IcalText("For " + WhoOf(r) + " on " + where + "; by " + r.created_by) +
             "\r\nLOCATION:" + IcalText(where) + "\r\nEND:VEVENT\r\n";
    }
  }
  out += "END:VCALENDAR\r\n";
  net::HttpResponse resp;
  resp.status = 200;
  resp.content_type = "text/calendar; charset=utf-8";
  resp.body = std::move(out);
  return resp;
}

Result<ReservationAsk> ReservationsApi::AskOf(const net::HttpRequest& req,
                                              const std::string& name) {
  Result<json::object> o = BodyObject(req);
  if (!o.ok()) return o.status();
  BERTH_RETURN_IF_ERROR(
      OnlyFields(*o, {"name", "start", "duration", "repeat", "nodes", "gpus", "pool", "all",
                      "users", "team", "maintenance", "release_unused", "evict"}));
  ReservationAsk ask;
  ask.name = name;
  if (ask.name.empty()) {
    Result<std::string> n = GetString(*o, "name");
    if (!n.ok()) return n.status();
    ask.name = *n;
  }
  auto text = [&](const char* key, std::optional<std::string>* out) -> Status {
    Result<std::optional<std::string>> v = TextField(*o, key);
    if (!v.ok()) return v.status();
    *out = *v;
    return Status::Ok();
  };
  BERTH_RETURN_IF_ERROR(text("start", &ask.start));
  BERTH_RETURN_IF_ERROR(text("duration", &ask.duration));
  BERTH_RETURN_IF_ERROR(text("repeat", &ask.repeat));
  BERTH_RETURN_IF_ERROR(text("gpus", &ask.gpus));
  BERTH_RETURN_IF_ERROR(text("pool", &ask.pool));
  BERTH_RETURN_IF_ERROR(text("team", &ask.team));
  BERTH_RETURN_IF_ERROR(text("release_unused", &ask.release_unused));
  for (auto [key, out] : {std::pair{"nodes", &ask.nodes}, std::pair{"users", &ask.users}}) {
    Result<std::optional<std::vector<std::string>>> v = ListField(*o, key);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  for (auto [key, out] :
       {std::pair{"all", &ask.all_nodes}, std::pair{"maintenance", &ask.maintenance},
        std::pair{"evict", &ask.evict}}) {
    Result<std::optional<bool>> v = FlagField(*o, key);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  // Who it names must exist: a user with settings here or a local account; a team with settings,
  // or that some user is in.
  const std::vector<UserRow> users = c_.accounts.Users();
  for (const std::string& user : ask.users.value_or(std::vector<std::string>{})) {
    const bool known = UserExists(user) || std::any_of(users.begin(), users.end(),
                                                       [&](auto& u) { return u.name == user; });
    if (!known) return Status::Invalid("unknown user '" + user + "'");
  }
  if (ask.team && !ask.team->empty()) {
    const std::vector<TeamRow> teams = c_.accounts.Teams();
    const bool known =
        std::any_of(teams.begin(), teams.end(), [&](auto& t) { return t.name == *ask.team; }) ||
        std::any_of(users.begin(), users.end(), [&](auto& u) { return u.team == *ask.team; });
    if (!known) return Status::Invalid("unknown team '" + *ask.team + "'");
  }
  return ask;
}

net::HttpResponse ReservationsApi::HandleCreate(const net::HttpRequest& req, const Principal& by) {
  BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kOperator, "creating a reservation"));
  Result<ReservationAsk> ask = AskOf(req, "");
  if (!ask.ok()) return ErrorResponse(ask.status());
  Result<Reservation> r = c_.core.reservations().Create(*ask, by.user);
  if (!r.ok()) return ErrorResponse(r.status());
  return JsonResponse(201, ReservationJson(*r, c_.clock.Now()));
}

net::HttpResponse ReservationsApi::HandleUpdate(const std::string& name,
                                                const net::HttpRequest& req, const Principal& by) {
  BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kOperator, "changing a reservation"));
  Result<ReservationAsk> ask = AskOf(req, name);
  if (!ask.ok()) return ErrorResponse(ask.status());
  if (ask->name != name) return ErrorResponse(400, "name: a reservation cannot be renamed");
  Result<Reservation> r = c_.core.reservations().Update(*ask, by.user, by.Has(Role::kAdmin));
  if (!r.ok()) return ErrorResponse(r.status());
  return JsonResponse(200, ReservationJson(*r, c_.clock.Now()));
}

net::HttpResponse ReservationsApi::HandleDelete(const std::string& name, const Principal& by) {
  BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kOperator, "deleting a reservation"));
  BERTH_RESPOND_IF_ERROR(c_.core.reservations().Delete(name, by.user, by.Has(Role::kAdmin)));
  return JsonResponse(200, json::object{{"deleted", name}});
}

}  // namespace berth
