// AgentsApi: the agents' protocol (docs/api.md "Agents"): join, register, the watch stream,
// heartbeats, health, reports, logs, specs, the blobs of their jobs' uploads and the node's end of
// interactive sessions. `by` is a node: the cluster token or a local admin (any node), or a node
// credential (that node only: each handler checks the node it names); agent_api.cpp.
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

class AgentsApi {
 public:
  explicit AgentsApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, AgentsApi* self);

 private:
  net::HttpResponse HandleJoin(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleRegister(const net::HttpRequest& req, const Principal& by);
  void HandleWatch(const net::HttpRequest& req, const Principal& by,
                   std::shared_ptr<net::Responder> res);
  net::HttpResponse HandleHeartbeat(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleHealth(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleReport(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleLogAppend(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleLogBatch(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleGetSpec(int64_t spec_id, const net::HttpRequest& req,
                                  const Principal& by);
  void HandleAgentSession(const std::string& sid, const net::HttpRequest& req, const Principal& by,
                          std::shared_ptr<net::Responder> res);
  net::HttpResponse HandleAgentBlobs(const net::HttpRequest& req, const Principal& by);

  ApiContext& c_;
};

}  // namespace berth
