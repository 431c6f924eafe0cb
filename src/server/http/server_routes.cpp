// The server's routing: the route table (each handler group adds its own routes), who may call
// what, and where each matched route runs.
#include <fmt/format.h>

#include "common/log.h"
#include "common/strings.h"
#include "server/http/api_docs.h"
#include "server/http/http_metrics.h"
#include "server/http/responses.h"
#include "server/http/server.h"

namespace berth {

// A request that found its executor's queue full: try again in a second.
net::HttpResponse BusyResponse() {
  net::HttpResponse r = ErrorResponse(Status::Unavailable(fmt::format(
      "the server is busy ({} requests wait already); try again shortly", kMaxQueuedRequests)));
  r.headers.push_back({"Retry-After", "1"});
  return r;
}

void Server::AddRoutes(RouteTable& t, Server* self) {
  using R = RunsOn;
  // Answered on the I/O thread, to anyone: never waits for anything.
  t.Add(
      "GET", "/v1/health", R::kIoThread,
      [self](const RouteCall&) {
        json::object health{{"ok", true}, {"version", BERTH_VERSION}};
        if (self->options_.ha_status) health["ha"] = self->options_.ha_status();
        return JsonResponse(200, std::move(health));
      },
      api_docs::Health(), Callers::kAnyone);
  t.Add(
      "GET", "/v1/openapi.json", R::kIoThread,
      [self](const RouteCall&) {
        return net::HttpResponse{.status = 200, .body = self->openapi_json_};
      },
      api_docs::OpenApi(), Callers::kAnyone);
  t.Add(
      "GET", "/metrics", R::kRead, [self](const RouteCall&) { return self->HandleMetrics(); },
      api_docs::Metrics());
  // Each concern's routes.
  JobsApi::AddRoutes(t, self ? self->jobs_api_.get() : nullptr);
  TerminalsApi::AddRoutes(t, self ? self->terminals_api_.get() : nullptr);
  DashboardApi::AddRoutes(t, self ? self->dashboard_api_.get() : nullptr);
  UploadsApi::AddRoutes(t, self ? self->uploads_api_.get() : nullptr);
  AdminApi::AddRoutes(t, self ? self->admin_api_.get() : nullptr);
  NotifyApi::AddRoutes(t, self ? self->notify_api_.get() : nullptr);
  ReservationsApi::AddRoutes(t, self ? self->reservations_api_.get() : nullptr);
  AgentsApi::AddRoutes(t, self ? self->agents_api_.get() : nullptr);
}

RouteTable Server::DescribeRoutes() {
  RouteTable t;
  AddRoutes(t, nullptr);
  return t;
}

void Server::Dispatch(const RouteTable::Route& route, RouteCall call) {
  if (route.runs_on == RunsOn::kIoThread) {
    call.res->Send(route.handler(call));
    return;
  }
  Executor& exec = route.runs_on == RunsOn::kState ? *state_exec_ : *read_exec_;
  auto res = call.res;
  const bool queued = exec.TryPost(
      [&route, call = std::move(call)] {
        net::HttpResponse out;
        try {
          out = route.handler(call);
        } catch (const std::exception& e) {
          LogError("{} {}: {}", call.req->method, call.req->path, e.what());
          out = ErrorResponse(Status::Internal(std::string("internal error: ") + e.what()));
        }
        if (out.status == 0) return;
        if (call.req->method == "GET") AnswerWithEtag(*call.req, out);
        call.res->Send(std::move(out));
      },
      kMaxQueuedRequests);
  if (!queued) res->Send(BusyResponse());
}

void Server::Handle(net::HttpRequest&& request, std::shared_ptr<net::Responder> res) {
  const std::vector<std::string> parts = Split(request.path, '/');  // "", "v1", ...
  RouteTable::Match match = routes_.Find(request.method, parts);
  // The matched route's template labels the request; only a request no route takes is labelled by
  // its shape alone.
  res = std::make_shared<ObservedResponder>(std::move(res), http_seconds_,
                                            match.route ? match.route->path : routes_.Label(parts),
                                            request.method);
  const Callers callers = match.route ? match.route->callers : Callers::kIdentified;
  auto call = [&](std::shared_ptr<net::HttpRequest> req, std::shared_ptr<Principal> by) {
    Dispatch(*match.route, RouteCall{.req = std::move(req),
                                     .by = std::move(by),
                                     .res = res,
                                     .params = std::move(match.params),
                                     .id = match.id});
  };
  if (callers == Callers::kAnyone) {
    return call(std::make_shared<net::HttpRequest>(std::move(request)), nullptr);
  }
  // The dashboard's page and files are served before anyone is identified.
  if (parts.size() <= 2 && request.method == "GET") {
    if (auto asset = dashboard_api_->HandleWebAsset(request)) return res->Send(std::move(*asset));
  }
  auto who = identity_->Identify(request);
  if (!who.ok()) return res->Send(ErrorResponse(who.status()));
  auto req = std::make_shared<net::HttpRequest>(std::move(request));
  auto by = std::make_shared<Principal>(std::move(*who));
  if (by->is_join) {
    if (callers == Callers::kJoinToken) return call(std::move(req), std::move(by));
    return res->Send(ErrorResponse(Status::Forbidden(
        "a join token may only join a node (POST /v1/agent/join); the node then uses its own "
        "credential")));
  }
  // The agents' protocol is for nodes, everything else for users.
  const bool agent_call =
      parts.size() >= 3 && parts[1] == "v1" && (parts[2] == "agent" || parts[2] == "specs");
  if (agent_call && !by->is_node) {
    return res->Send(ErrorResponse(Status::Forbidden(
        "the agents' protocol needs a node's credential or the cluster token (" +
        (by->is_user ? by->user + " is a user, not a node" : std::string("none presented")) +
        ")")));
  }
  if (!agent_call && !by->is_user) {
    return res->Send(ErrorResponse(Status::Forbidden(
        "the cluster token identifies nodes, not users: present your own token (berth login) or "
        "use the server's unix socket")));
  }
  if (!match.route || callers != Callers::kIdentified) {
    return res->Send(
        ErrorResponse(Status::NotFound("no such endpoint: " + req->method + " " + req->path)));
  }
  if (!match.error.ok()) return res->Send(ErrorResponse(match.error));
  call(std::move(req), std::move(by));
}

}  // namespace berth
