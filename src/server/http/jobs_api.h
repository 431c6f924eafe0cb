// JobsApi: the users' API for jobs, groups, the queue, nodes, logs, usage and teams (docs/api.md);
// api.cpp and share_api.cpp.
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

class JobsApi {
 public:
  explicit JobsApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, JobsApi* self);

 private:
  net::HttpResponse HandleSubmit(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleListJobs(const net::HttpRequest& req);
  // GET /v1/queue: the summary `berth queue` prints (bulk groups as one row each).
  net::HttpResponse HandleQueue(const net::HttpRequest& req);
  // GET /v1/groups/{id}: a bulk group's size and its jobs' counts per status (`berth wait`).
  // From the core's tally while the group has jobs in memory, else from the store.
  net::HttpResponse HandleGroup(int64_t group);
  // POST /v1/groups/N {"max_running": M|null}: the owner or an operator.
  net::HttpResponse HandleUpdateGroup(int64_t group, const net::HttpRequest& req,
                                      const Principal& by);
  net::HttpResponse HandleShowJob(int64_t id, const Principal& by);
  net::HttpResponse HandleCancel(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleRequeue(int64_t id, const Principal& by);
  net::HttpResponse HandleNodes(bool holders);
  net::HttpResponse HandleDrain(const std::string& node, bool drain, bool force,
                                const Principal& by);
  void HandleLogs(int64_t id, const net::HttpRequest& req, const Principal& by,
                  std::shared_ptr<net::Responder> res);
  // share_api.cpp: fair share, usage and teams.
  net::HttpResponse HandleUsage(const net::HttpRequest& req);
  net::HttpResponse HandleListTeams();
  json::object WaitingJson(const WaitingDetail& waiting);

  ApiContext& c_;
};

}  // namespace berth
