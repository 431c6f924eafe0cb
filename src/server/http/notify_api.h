// NotifyApi: a user's notification sinks, their notices and a test (docs/notifications.md,
// docs/api.md "Notifications"); notify_api.cpp. Every caller manages their own sinks.
//
// Each handler group holds the control plane's parts it reaches (ApiContext, api_context.h) and
// adds its own routes to the server's table; its handlers run where their route says (routes.h).
// Thread-safety: after AddRoutes, its handlers may run on any thread at once.
#pragma once

#include <optional>
#include <string>

#include "server/http/api_context.h"

namespace berth {

class NotifyApi {
 public:
  explicit NotifyApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, NotifyApi* self);

  // A notice as the API shows it (also in a job's detail, GET /v1/jobs/{id}).
  static json::object NoticeJson(const NoticeRow& row);

 private:
  net::HttpResponse HandleList(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleSetSink(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleRemoveSink(const std::string& kind, const Principal& by);
  net::HttpResponse HandleTest(const Principal& by);

  ApiContext& c_;
};

}  // namespace berth
