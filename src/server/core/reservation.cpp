// Reservation (reservation.h).
#include "server/core/reservation.h"

#include <algorithm>

namespace berth {

namespace {

constexpr DurationMs kOverlapHorizon = 400LL * 24 * 3600 * 1000;

json::array Strings(const std::vector<std::string>& list) {
  json::array out;
  for (const std::string& s : list) out.push_back(json::value(s));
  return out;
}

Result<std::vector<std::string>> StringsFrom(const json::object& o, const char* key) {
  std::vector<std::string> out;
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return out;
  if (!it->value().is_array()) return Status::Invalid(std::string(key) + ": expected a list");
  for (const json::value& v : it->value().as_array()) {
    if (!v.is_string()) return Status::Invalid(std::string(key) + ": expected strings");
    out.emplace_back(v.as_string());
  }
  return out;
}

}  // namespace

namespace {

// WindowOf with `r`'s repeat rule parsed (by the caller, once for many calls).
std::optional<Window> WindowBy(const Reservation& r, const Recurrence& rule, TimeMs now) {
  std::optional<Window> w = CurrentOrNextWindow(rule, r.start, r.duration, now);
  if (w && w->start == r.released_start) {
    // Released early: the next occurrence (none for a one-off).
    w = CurrentOrNextWindow(rule, r.start, r.duration, std::max(now, w->end));
    if (w && w->start == r.released_start) return std::nullopt;
  }
  return w;
}

}  // namespace

std::optional<Window> WindowOf(const Reservation& r, TimeMs now) {
  std::optional<Recurrence> rule = ParseRecurrence(r.repeat, nullptr);
  return rule ? WindowBy(r, *rule, now) : std::nullopt;
}

sched::ReservedWindow ViewOf(const Reservation& r, const Window& w) {
  return sched::ReservedWindow{.name = r.name,
                               .start = w.start,
                               .end = w.end,
                               .all_nodes = r.all_nodes,
                               .nodes = r.nodes,
                               .users = r.users,
                               .team = r.team,
                               .maintenance = r.maintenance};
}

bool Covers(const Reservation& r, const std::string& node) {
  return r.all_nodes || std::find(r.nodes.begin(), r.nodes.end(), node) != r.nodes.end();
}

std::optional<TimeMs> FirstOverlap(const Reservation& a, const Reservation& b, TimeMs now) {
  const bool share = a.all_nodes || b.all_nodes ||
                     std::any_of(a.nodes.begin(), a.nodes.end(),
                                 [&](const std::string& n) { return Covers(b, n); });
  if (!share) return std::nullopt;
  std::optional<Recurrence> rule_a = ParseRecurrence(a.repeat, nullptr);
  std::optional<Recurrence> rule_b = ParseRecurrence(b.repeat, nullptr);
  if (!rule_a || !rule_b) return std::nullopt;
  std::optional<Window> x = WindowBy(a, *rule_a, now);
  std::optional<Window> y = WindowBy(b, *rule_b, now);
  for (int steps = 0; x && y && steps < 20000; ++steps) {
    if (x->start >= now + kOverlapHorizon && y->start >= now + kOverlapHorizon) break;
    if (x->start < y->end && y->start < x->end) return std::max(x->start, y->start);
    // Advance whichever ends first.
    if (x->end <= y->end) {
      x = WindowBy(a, *rule_a, x->end);
    } else {
      y = WindowBy(b, *rule_b, y->end);
    }
  }
  return std::nullopt;
}

json::object ReservationJson(const Reservation& r, TimeMs now) {
  json::object o{{"name", r.name},
                 {"start", TimeToJson(r.start)},
                 {"duration_s", r.duration / 1000},
                 {"repeat", r.repeat},
                 {"all_nodes", r.all_nodes},
                 {"nodes", Strings(r.nodes)},
                 {"gpus", r.gpus},
                 {"pool", r.pool},
                 {"users", Strings(r.users)},
                 {"team", r.team},
                 {"maintenance", r.maintenance},
                 {"evict", r.evict},
                 {"release_unused_s", r.release_unused / 1000},
                 {"created_at", TimeToJson(r.created_at)},
                 {"created_by", r.created_by},
                 {"updated_at", TimeToJson(r.updated_at)},
                 {"updated_by", r.updated_by}};
  if (r.released_start >= 0) o["released_start"] = TimeToJson(r.released_start);
  if (now > 0) {
    std::optional<Window> w = WindowOf(r, now);
    o["active"] = w && w->start <= now;
    o["window"] =
        w ? json::value(json::object{{"start", TimeToJson(w->start)}, {"end", TimeToJson(w->end)}})
          : json::value(nullptr);
  }
  return o;
}

ReservationRow RowOf(const Reservation& r) {
  return ReservationRow{.name = r.name,
                        .spec = SerializeJson(ReservationJson(r, 0)),
                        .created_at = r.created_at,
                        .updated_at = r.updated_at,
                        .updated_by = r.updated_by};
}

Result<Reservation> ReservationFromRow(const ReservationRow& row) {
  Result<json::value> v = ParseJson(row.spec, "reservation " + row.name);
  if (!v.ok()) return v.status();
  if (!v->is_object()) return Status::Invalid("reservation " + row.name + ": not an object");
  const json::object& o = v->as_object();
  Reservation r;
  r.name = row.name;
  auto start = o.find("start");
  auto released = o.find("released_start");
  std::optional<TimeMs> at = start == o.end() ? std::nullopt : TimeFromJson(start->value());
  if (!at) return Status::Invalid("reservation " + row.name + ": no start");
  r.start = *at;
  if (released != o.end()) r.released_start = TimeFromJson(released->value()).value_or(-1);
  auto take = [](auto result, auto* out) -> Status {
    if (!result.ok()) return result.status();
    *out = std::move(*result);
    return Status::Ok();
  };
  int64_t duration_s = 0;
  int64_t release_s = 0;
  BERTH_RETURN_IF_ERROR(take(GetInt(o, "duration_s"), &duration_s));
  BERTH_RETURN_IF_ERROR(take(GetInt(o, "release_unused_s"), &release_s));
  r.duration = duration_s * 1000;
  r.release_unused = release_s * 1000;
  BERTH_RETURN_IF_ERROR(take(GetString(o, "repeat"), &r.repeat));
  BERTH_RETURN_IF_ERROR(take(GetBool(o, "all_nodes"), &r.all_nodes));
  BERTH_RETURN_IF_ERROR(take(StringsFrom(o, "nodes"), &r.nodes));
  BERTH_RETURN_IF_ERROR(take(GetString(o, "gpus"), &r.gpus));
  BERTH_RETURN_IF_ERROR(take(GetString(o, "pool"), &r.pool));
  BERTH_RETURN_IF_ERROR(take(StringsFrom(o, "users"), &r.users));
  BERTH_RETURN_IF_ERROR(take(GetString(o, "team"), &r.team));
  BERTH_RETURN_IF_ERROR(take(GetBool(o, "maintenance"), &r.maintenance));
  BERTH_RETURN_IF_ERROR(take(GetBool(o, "evict"), &r.evict));
  BERTH_RETURN_IF_ERROR(take(GetString(o, "created_by"), &r.created_by));
  r.created_at = row.created_at;
  r.updated_at = row.updated_at;
  r.updated_by = row.updated_by;
  return r;
}

}  // namespace berth
