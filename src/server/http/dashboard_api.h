// DashboardApi: the web dashboard's files, its ways in (a login link, a token login, sessions) and
// its reads (docs/dashboard.md); dashboard_api.cpp.
//
// Each handler group holds the control plane's parts it reaches (ApiContext, api_context.h) and
// adds its own routes to the server's table; its handlers run where their route says (routes.h).
// Thread-safety: after AddRoutes, its handlers may run on any thread at once.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http/api_context.h"

namespace berth {

class DashboardApi {
 public:
  explicit DashboardApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, DashboardApi* self);
  // Ahead of identification: the page and its files (public); nullopt when not one of them.
  std::optional<net::HttpResponse> HandleWebAsset(const net::HttpRequest& req);

 private:
  // Ahead of identification: a login link, a token login.
  net::HttpResponse HandleLoginPage(const net::HttpRequest& req);
  net::HttpResponse HandleSessionLogin(const net::HttpRequest& req);
  // Identified: a one-time login link for `by` (`berth dashboard`), who the page is, logout.
  net::HttpResponse HandleLoginLink(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleSessionInfo(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleLogout(const net::HttpRequest& req);
  net::HttpResponse HandleOverview();
  // The overview's list of who holds idle GPUs now (docs/idle.md).
  boost::json::array IdleGpusJson();
  net::HttpResponse HandleDashboardQueue(const net::HttpRequest& req);
  // HandleDashboardQueue's two views, written into `page` (its rows, total and more).
  Status DashboardFinishedPage(const listing::RowFilter& filter, int offset, int limit,
                               boost::json::object& page);
  Status DashboardActivePage(const listing::RowFilter& filter, const std::string& sort,
                             bool descending, int offset, int limit, boost::json::object& page);
  // The Set-Cookie value of a session (an empty id with max age 0 ends it in the browser).
  std::string SessionCookie(const std::string& id, int64_t max_age_s) const;

  ApiContext& c_;
};

}  // namespace berth
