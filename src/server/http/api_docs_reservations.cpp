// RouteDocs of the reservations' routes (api_docs.h), and their schema.
#include "server/http/api_docs.h"

namespace berth::api_docs {

namespace {

const char* const kWho =
    "Operators create (403 otherwise); the creator or an admin updates and deletes; recorded in "
    "the audit log (docs/reservations.md).";

json::value AskSchema(bool create) {
  json::value o = Obj({{"name", Str()},
                       {"start", Str()},
                       {"duration", Str()},
                       {"repeat", Str()},
                       {"nodes", Arr(Str())},
                       {"gpus", Str()},
                       {"pool", Str()},
                       {"all", Bool()},
                       {"users", Arr(Str())},
                       {"team", Str()},
                       {"maintenance", Bool()},
                       {"release_unused", Str()},
                       {"evict", Bool()}});
  if (create) o.as_object()["required"] = json::array{"name", "start", "duration"};
  return Closed(std::move(o));
}

}  // namespace

json::value ReservationSchema() {
  return Obj({{"name", Str()},
              {"start", Time()},
              {"duration_s", Int()},
              {"repeat", Str()},
              {"all_nodes", Bool()},
              {"nodes", Arr(Str())},
              {"gpus", Str()},
              {"pool", Str()},
              {"users", Arr(Str())},
              {"team", Str()},
              {"maintenance", Bool()},
              {"evict", Bool()},
              {"release_unused_s", Int()},
              {"created_at", Time()},
              {"created_by", Str()},
              {"updated_at", Time()},
              {"updated_by", Str()},
              {"released_start", Time()},
              {"active", Bool()},
              {"window", Nullable(Obj({{"start", Time()}, {"end", Time()}}, {"start", "end"}))}},
             {"name", "start", "duration_s", "nodes", "all_nodes"});
}

RouteDoc ListReservations() {
  return {.summary = "Every reservation, with its window now or next",
          .response =
              Obj({{"reservations", Arr(Ref("Reservation"))}, {"now", Time()}}, {"reservations"})};
}

RouteDoc ReservationsCalendar() {
  return {.summary =
              "The reservations' windows of the next 30 days as an iCalendar feed "
              "(text/calendar), for the cluster's calendar",
          .response_type = "text/calendar",
          .response = Str()};
}

RouteDoc ShowReservation() {
  return {.summary = "One reservation",
          .response = Ref("Reservation"),
          .errors = {{404, "no reservation of that name"}}};
}

RouteDoc CreateReservation() {
  return {.summary = "Reserve nodes for a time (or a maintenance window)",
          .description = std::string(kWho) +
                         " `start` is RFC 3339 or now+DURATION; `duration` 2h; `repeat` daily, "
                         "weekly or a 5-field cron expression (UTC); where: `nodes`, `gpus` "
                         "(TYPE:COUNT, whole nodes picked, topology-aware) with `pool`, or "
                         "`all`; who: `users` or `team`.",
          .request = AskSchema(true),
          .ok_status = 201,
          .response = Ref("Reservation"),
          .errors = {{400,
                      "a bad time, an unknown node, user or team, more than the cluster "
                      "has, or an overlap with another reservation of the same nodes"},
                     {409, "the name is taken"}}};
}

RouteDoc UpdateReservation() {
  return {.summary = "Change a reservation (fields given replace the old)",
          .description = kWho,
          .request = AskSchema(false),
          .response = Ref("Reservation"),
          .errors = {{404, "no reservation of that name"}}};
}

RouteDoc DeleteReservation() {
  return {.summary = "Delete a reservation; jobs running in it keep running",
          .description = kWho,
          .response = Obj({{"deleted", Str()}}, {"deleted"}),
          .errors = {{404, "no reservation of that name"}}};
}

}  // namespace berth::api_docs
