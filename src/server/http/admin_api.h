// AdminApi: who am I, users, teams, tokens, join tokens, nodes' credentials and the audit log
// (docs/admin.md); admin_api.cpp.
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

class AdminApi {
 public:
  explicit AdminApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, AdminApi* self);

 private:
  net::HttpResponse HandleWhoami(const Principal& by);
  net::HttpResponse HandleCreateToken(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleListTokens(const Principal& by);
  net::HttpResponse HandleRevokeToken(const std::string& name, const Principal& by);
  net::HttpResponse HandleListUsers(const Principal& by);
  net::HttpResponse HandleSetUser(const std::string& name, const net::HttpRequest& req,
                                  const Principal& by);
  net::HttpResponse HandleAudit(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleSetTeam(const std::string& name, const net::HttpRequest& req,
                                  const Principal& by);
  net::HttpResponse HandleCreateJoinToken(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleRevokeNode(const std::string& node, const Principal& by);
  net::HttpResponse HandleSetNodeUsers(const net::HttpRequest& req, const std::string& node,
                                       const Principal& by);

  ApiContext& c_;
};

}  // namespace berth
