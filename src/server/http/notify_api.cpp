// NotifyApi: sinks, notices, tests.
#include "server/http/notify_api.h"

#include <charconv>

#include "server/http/api_docs.h"
#include "server/http/responses.h"
#include "spec/notify_events.h"

namespace berth {

namespace {

json::object SinkJson(const NotifySinkRow& row) {
  json::object o{{"kind", row.kind},
                 {"target", row.target},
                 {"events", row.events},
                 {"updated_at", TimeToJson(row.updated_at)}};
  if (row.kind == "webhook") o["format"] = row.format;
  return o;
}

}  // namespace

json::object NotifyApi::NoticeJson(const NoticeRow& row) {
  return json::object{{"id", row.event_id},
                      {"type", row.type},
                      {"sink", row.sink},
                      {"job", row.job},
                      {"group", row.group ? json::value(*row.group) : nullptr},
                      {"state", row.state},
                      {"attempts", row.attempts},
                      {"created_at", TimeToJson(row.created_at)},
                      {"sent_at", TimeToJson(row.sent_at)},
                      {"next_at", row.state == "pending" ? TimeToJson(row.next_at) : nullptr},
                      {"last_error", row.last_error}};
}

void NotifyApi::AddRoutes(RouteTable& t, NotifyApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  t.Add(
      "GET", "/v1/notify", R::kRead,
      [self](const RouteCall& c) { return self->HandleList(*c.req, *c.by); }, NotifyList());
  t.Add(
      "POST", "/v1/notify/sinks", R::kState,
      [self](const RouteCall& c) { return self->HandleSetSink(*c.req, *c.by); }, NotifySetSink());
  t.Add(
      "DELETE", "/v1/notify/sinks/{kind}", R::kState,
      [self](const RouteCall& c) { return self->HandleRemoveSink(c.params[0], *c.by); },
      NotifyRemoveSink());
  t.Add(
      "POST", "/v1/notify/test", R::kState,
      [self](const RouteCall& c) { return self->HandleTest(*c.by); }, NotifyTest());
}

net::HttpResponse NotifyApi::HandleList(const net::HttpRequest& req, const Principal& by) {
  int limit = 50;
  if (const std::string text = req.Query("limit"); !text.empty()) {
    const char* end = text.data() + text.size();
    auto [at, ec] = std::from_chars(text.data(), end, limit);
    if (ec != std::errc() || at != end || limit < 1 || limit > 1000) {
      return ErrorResponse(400, "limit: expected a number from 1 to 1000");
    }
  }
  json::array sinks;
  for (const NotifySinkRow& row : c_.core.notices().SinksOf(by.user)) {
    sinks.push_back(SinkJson(row));
  }
  Result<std::vector<NoticeRow>> notices = c_.store.ListNotices(by.user, std::nullopt, limit);
  if (!notices.ok()) return ErrorResponse(notices.status());
  json::array list;
  for (const NoticeRow& row : *notices) list.push_back(NoticeJson(row));
  return JsonResponse(200, json::object{{"sinks", std::move(sinks)}, {"notices", std::move(list)}});
}

net::HttpResponse NotifyApi::HandleSetSink(const net::HttpRequest& req, const Principal& by) {
  auto o = BodyObject(req);
  if (!o.ok()) return ErrorResponse(o.status());
  BERTH_RESPOND_IF_ERROR(OnlyFields(*o, {"kind", "target", "secret", "format", "events"}));
  NotifySinkRow row;
  row.user = by.user;
  auto kind = GetString(*o, "kind");
  auto target = GetString(*o, "target");
  auto secret = GetString(*o, "secret", "");
  auto format = GetString(*o, "format", "json");
  auto events = GetString(*o, "events", "");
  for (const auto* r : {&kind, &target, &secret, &format, &events}) {
    if (!r->ok()) return ErrorResponse(r->status());
  }
  row.kind = *kind;
  row.target = *target;
  row.secret = *secret;
  row.format = row.kind == "webhook" ? *format : "";
  row.events = *events;
  if (Result<NotifyEvents> asked = ParseNotifyEvents(row.events);
      asked.ok() && asked->nodes && !by.Has(Role::kOperator)) {
    return ErrorResponse(403, "notify: only operators hear of nodes (events: nodes)");
  }
  if (row.kind == "email" && !row.secret.empty()) {
    return ErrorResponse(400, "notify: an email sink takes no secret");
  }
  BERTH_RESPOND_IF_ERROR(c_.core.notices().SetSink(row));
  row.secret.clear();
  row.updated_at = c_.clock.Now();
  return JsonResponse(200, SinkJson(row));
}

net::HttpResponse NotifyApi::HandleRemoveSink(const std::string& kind, const Principal& by) {
  BERTH_RESPOND_IF_ERROR(c_.core.notices().RemoveSink(by.user, kind));
  return JsonResponse(200, json::object{{"removed", kind}});
}

net::HttpResponse NotifyApi::HandleTest(const Principal& by) {
  Result<std::string> id = c_.core.notices().SendTest(by.user);
  if (!id.ok()) return ErrorResponse(id.status());
  return JsonResponse(200, json::object{{"id", *id}});
}

}  // namespace berth
