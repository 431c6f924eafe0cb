// ReservationsApi: operators' reservations and maintenance windows (docs/reservations.md,
// docs/api.md "Reservations"): list, show, create, update, delete, and the cluster's calendar as an
// iCalendar feed; reservations_api.cpp.
//
// Who: anyone reads; operators create; the creator or an admin updates and deletes (the core
// says). Users and teams named must exist (Accounts: a row, or for users a local account).
//
// Each handler group holds the control plane's parts it reaches (ApiContext, api_context.h) and
// adds its own routes to the server's table; its handlers run where their route says (routes.h).
// Thread-safety: after AddRoutes, its handlers may run on any thread at once.
#pragma once

#include <string>

#include "server/http/api_context.h"

namespace berth {

class ReservationsApi {
 public:
  explicit ReservationsApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, ReservationsApi* self);

 private:
  net::HttpResponse HandleList();
  net::HttpResponse HandleShow(const std::string& name);
  net::HttpResponse HandleCalendar();
  net::HttpResponse HandleCreate(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleUpdate(const std::string& name, const net::HttpRequest& req,
                                 const Principal& by);
  net::HttpResponse HandleDelete(const std::string& name, const Principal& by);
  // The ask in a request body; checks the users and team it names exist.
  Result<ReservationAsk> AskOf(const net::HttpRequest& req, const std::string& name);

  ApiContext& c_;
};

}  // namespace berth
