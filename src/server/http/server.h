// Server: berth's control plane over HTTP. It serves the users' API and the agents' protocol
// (docs/api.md) in front of the ControlPlane (server/control_plane.h: the Core, which holds the
// state and makes every change, the accounts, logs and uploads, and the scheduler and housekeeping
// threads), and keeps what is HTTP's own: identity, the agents' watch streams
// (server/http/watch_streams.h), terminal bridges, executors and routes.
//
// Threads. The HttpServer's I/O threads only parse requests and write answers: every handler that
// may wait for the core's lock or for the store runs on an executor — `state_exec_` for changes
// (submit, cancel, drain and the agents' calls), `read_exec_` for reads (listings, show, logs,
// specs, nodes) — so that a health check never waits and a listing never waits behind a
// submission or a scheduling pass. The control plane's threads run the passes and the housekeeping;
// its housekeeping tick also pings the agents' streams and expires waiting terminals here.
//
// Routes. The handlers are grouped per concern (JobsApi, AgentsApi, AdminApi, UploadsApi,
// TerminalsApi, DashboardApi), each built in Start with an ApiContext (api_context.h) and adding
// its own routes; the Server keeps routing, identity's gate, health and metrics.
//
// Thread-safety: Start/Stop from one controlling thread; everything else is internal.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/executor.h"
#include "common/json_util.h"
#include "common/metrics.h"
#include "common/status.h"
#include "net/http.h"
#include "net/http_server.h"
#include "server/accounts.h"
#include "server/control_plane.h"
#include "server/core/core.h"
#include "server/http/admin_api.h"
#include "server/http/agents_api.h"
#include "server/http/api_context.h"
#include "server/http/body_admission.h"
#include "server/http/dashboard_api.h"
#include "server/http/identity.h"
#include "server/http/jobs_api.h"
#include "server/http/notify_api.h"
#include "server/http/reservations_api.h"
#include "server/http/routes.h"
#include "server/http/terminal_bridges.h"
#include "server/http/terminals_api.h"
#include "server/http/uploads_api.h"
#include "server/http/watch_streams.h"
#include "server/http/web_sessions.h"
#include "server/listing.h"
#include "server/log_store.h"
#include "server/server_options.h"
#include "server/uploads.h"
#include "store/store.h"

namespace berth {

class Server {
 public:
  // Listings' pages and caps: server/listing.h; requests queued per executor: kMaxQueuedRequests
  // (api_context.h).

  // `store` holds the durable state (src/exe opens SQLite under the state dir; tests may wrap it
  // to inject faults). `clock` must outlive the server.
  Server(ServerOptions options, const Clock& clock, std::unique_ptr<Store> store);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the state, binds the port and starts serving. The port is known when this returns.
  Status Start();
  int port() const;
  std::string url() const;
  const std::string& token() const { return token_; }
  // The unix socket's path ("" when none).
  const std::string& unix_socket() const { return options_.unix_socket; }
  // The TLS certificate's fingerprint ("sha256:..."; "" without TLS).
  const std::string& tls_fingerprint() const { return tls_fingerprint_; }
  // Stops serving: in-flight handlers finish, streams close, threads join. Idempotent.
  void Stop();
  // The server's routes with their contracts, described only (handlers never called): what
  // `berth openapi` prints and the tests check (server/http/openapi.h).
  static RouteTable DescribeRoutes();

 private:
  void Handle(net::HttpRequest&& req, std::shared_ptr<net::Responder> res);
  // Fills `t` (server_routes.cpp: health, the OpenAPI description and metrics, then each handler
  // group's), each handler calling `self`; with `self` null the routes are only described. Dispatch
  // runs a matched route's handler where the route says.
  static void AddRoutes(RouteTable& t, Server* self);
  void Dispatch(const RouteTable::Route& route, RouteCall call);
  // Sets up TLS when it is on: the certificate (made if needed) and its fingerprint.
  Status SetUpTls(net::HttpServerOptions& http);
  // What the control plane's housekeeping tends on this side (ControlPlane::Hooks).
  ControlPlane::Hooks HousekeepingHooks();

  // metrics_api.cpp: Prometheus text exposition (docs/monitoring.md).
  net::HttpResponse HandleMetrics();

  ServerOptions options_;
  const Clock& clock_;
  std::string token_;
  std::string tls_fingerprint_;
  std::unique_ptr<Store> store_;
  RealSystemUsers system_users_;
  std::unique_ptr<WebSessions> sessions_;
  std::unique_ptr<Identity> identity_;
  // Before http_: the requests being read hold shares of its budget until they end.
  std::unique_ptr<BodyAdmission> body_admission_;
  WatchStreams streams_;
  // Outlives http_, whose WebSockets it relays.
  TerminalBridges terminals_{streams_, 1024, 32, options_.interactive_connect_ms};
  GpuUsageTable gpu_usage_;
  // The accounts, logs, uploads, the Core and the scheduler and housekeeping threads.
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<Executor> state_exec_;
  std::unique_ptr<Executor> read_exec_;
  std::unique_ptr<net::HttpServer> http_;
  // The handler groups, each adding its routes (built in Start, once every part above exists).
  std::unique_ptr<ApiContext> api_;
  std::unique_ptr<JobsApi> jobs_api_;
  std::unique_ptr<TerminalsApi> terminals_api_;
  std::unique_ptr<DashboardApi> dashboard_api_;
  std::unique_ptr<UploadsApi> uploads_api_;
  std::unique_ptr<AdminApi> admin_api_;
  std::unique_ptr<NotifyApi> notify_api_;
  std::unique_ptr<ReservationsApi> reservations_api_;
  std::unique_ptr<AgentsApi> agents_api_;
  // berth_http_request_seconds{route,method,code}: every answer (server/http/http_metrics.h).
  RouteTable routes_;         // filled by Start before it listens, read-only after
  std::string openapi_json_;  // GET /v1/openapi.json: the description of routes_
  metrics::HistogramFamily http_seconds_{
      "berth_http_request_seconds",
      "Time from a request's arrival to its answer (streams: to the stream's start), by route "
      "template, method and status code.",
      {"route", "method", "code"},
      metrics::HistogramFamily::FastSeconds()};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
};

}  // namespace berth
