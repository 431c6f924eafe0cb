// Server: berth's control plane over HTTP. It serves the users' API and the agents' protocol
// (docs/api.md) in front of the Core (server/core/core.h), which holds the state and makes every
// change (commit, then apply, then send); it keeps the agents' watch streams
// (server/http/watch_streams.h), the jobs' logs (server/log_store.h), and runs the scheduler and
// housekeeping threads.
//
// Threads. The HttpServer's I/O threads only parse requests and write answers: every handler that
// may wait for the core's lock or for the store runs on an executor — `state_exec_` for changes
// (submit, cancel, drain and the agents' calls), `read_exec_` for reads (listings, show, logs,
// specs, nodes) — so that a health check never waits and a listing never waits behind a
// submission or a scheduling pass. The scheduler thread runs passes when the core asks for one;
// the housekeeping thread checks leases and time limits every 200 ms and pings agents.
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
#include "server/core/core.h"
#include "server/http/body_admission.h"
#include "server/http/identity.h"
#include "server/http/routes.h"
#include "server/http/terminal_bridges.h"
#include "server/http/watch_streams.h"
#include "server/http/web_sessions.h"
#include "server/listing.h"
#include "server/log_store.h"
#include "server/uploads.h"
#include "store/store.h"

namespace berth {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string state_dir;
  // The cluster token, the agents' credential; empty: read or generate <state_dir>/token.
  std::string token;
  // TCP clients must present a token even from this machine's loopback (forced on when the
  // host is not a loopback address). The unix socket identifies local users either way.
  bool require_token = false;
  std::string unix_socket;       // empty: <state_dir>/berth.sock; "-": none
  bool allow_root_jobs = false;  // accept jobs of root (refused by default)
  bool owner_only = false;       // a private server: only its own user and root may use it
  // TLS: always on a non-loopback host; `tls` turns it on for loopback too. Without a certificate
  // a self-signed one is made at first start into <state_dir>/tls.crt and tls.key.
  bool tls = false;
  std::string tls_cert;
  std::string tls_key;
  DurationMs lease_ms = 30'000;
  DurationMs kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL, unless the job sets kill_grace
  DurationMs interactive_time_limit_ms = 24 * 3'600'000;  // CoreOptions'
  DurationMs interactive_idle_limit_ms = 0;               // CoreOptions'
  DurationMs interactive_connect_ms = 10'000;  // a session's wait for its node (TerminalBridges)
  DurationMs starvation_ms = 10 * 60'000;
  UsageConfig usage;                 // fair share: half-life and GPU weights
  double admission_charge_s = 3600;  // each weighted GPU held counts this much in advance
  int reclaim_limit = 3;             // reclaims per team per reclaim_window
  DurationMs reclaim_window = 60'000;
  size_t max_body_bytes = 64 << 20;
  int max_jobs_per_submit = 100'000;
  int threads = 0;  // I/O threads; 0: sized from the CPUs this process may use
  // Several servers on one PostgreSQL (docs/ha.md): what GET /v1/health says under "ha" (this
  // server's role, the leader, the store). Called on an I/O thread: must not wait. Unset: one
  // server, no "ha".
  std::function<boost::json::object()> ha_status;
  // Where jobs' output is kept: "" = files under <state_dir>/logs; a PostgreSQL URL = that database
  // (several servers: every one of them serves it after a failover; docs/ha.md).
  std::string log_store;
  std::optional<int64_t> log_store_fence;  // the leader's fencing token, for its appends there
  // Uploaded workdirs and file mounts (docs/user-guide.md "Workdir upload"): "" = files under
  // <state_dir>/uploads; a PostgreSQL URL = that database (every server serves them after a
  // failover). Each tree within `upload_limits`.
  std::string upload_store;
  upload::ManifestLimits upload_limits;
  // Blobs no pending or running job uses, and nobody sent or asked about for this long, are
  // deleted (checked every 10 minutes); 0: kept.
  DurationMs upload_retention_ms = 7LL * 24 * 3'600'000;
  // Pieces of an unfinished upload nobody went on with for this long are deleted.
  DurationMs upload_piece_retention_ms = 6LL * 3'600'000;
  UploadQuota upload_quota;
  // Open connections in all (0: from the open-file limit) and per remote address (loopback and
  // the unix socket count in the total only): net::HttpServerOptions'.
  size_t max_connections = 0;
  size_t max_connections_per_peer = 512;
  DurationMs node_retention_ms = 7LL * 24 * 3'600'000;  // CoreOptions'
};

class Server {
 public:
  // Listings' pages and caps: server/listing.h.
  // Requests waiting for a handler thread, per executor: past it a request is answered 503 with
  // Retry-After (a flood is refused, not queued without bound).
  static constexpr size_t kMaxQueuedRequests = 10'000;

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
  // The URL a listener on `host`:`port` is reached at (a wildcard host as 127.0.0.1).
  static std::string UrlFor(std::string host, int port, bool tls);
  const std::string& token() const { return token_; }
  // The unix socket's path ("" when none).
  const std::string& unix_socket() const { return options_.unix_socket; }
  // The TLS certificate's fingerprint ("sha256:..."; "" without TLS).
  const std::string& tls_fingerprint() const { return tls_fingerprint_; }
  // Stops serving: in-flight handlers finish, streams close, threads join. Idempotent.
  void Stop();

 private:
  void Handle(net::HttpRequest&& req, std::shared_ptr<net::Responder> res);
  // Fills routes_ (api.cpp); runs a matched route's handler where the route says.
  void AddRoutes();
  void Dispatch(const RouteTable::Route& route, RouteCall call);
  // Sets up TLS when it is on: the certificate (made if needed) and its fingerprint.
  Status SetUpTls(net::HttpServerOptions& http);
  void SchedulerLoop();
  void HousekeepingLoop();
  // Starts an idle trim (common/heap.h): asks every thread that allocates for requests and passes
  // to give its heap arena's free top back; HousekeepingLoop ends it.
  void StartIdleTrim();
  // Gives the calling thread's arena back during an idle trim, and counts it.
  void TrimThisThreadsArena();
  // Deletes the uploads no live job uses past their retention (Uploads::Collect), on the read
  // executor; one at a time.
  void CollectUploads();

  // api.cpp: the users' API. `by` is who asks.
  net::HttpResponse HandleSubmit(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleListJobs(const net::HttpRequest& req);
  // GET /v1/queue: the summary `berth queue` prints (bulk groups as one row each).
  net::HttpResponse HandleQueue(const net::HttpRequest& req);
  // GET /v1/groups/{id}: a bulk group's size and its jobs' counts per status (`berth wait`).
  // From the core's tally while the group has jobs in memory, else from the store.
  net::HttpResponse HandleGroup(int64_t group);
  // Each group's jobs per status: the core's tally where it keeps one, the store's count else.
  Result<std::map<int64_t, std::map<JobStatus, int>>> GroupCounts(
      const std::vector<int64_t>& groups);
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
  // terminal_api.cpp: interactive sessions (server/http/terminal_bridges.h), the user's end and the
  // node's.
  void HandleAttach(int64_t id, const net::HttpRequest& req, const Principal& by,
                    std::shared_ptr<net::Responder> res);
  void HandlePortForward(int64_t id, const net::HttpRequest& req, const Principal& by,
                         std::shared_ptr<net::Responder> res);
  void HandleExecInto(int64_t id, const net::HttpRequest& req, const Principal& by,
                      std::shared_ptr<net::Responder> res);
  // Who reaches rank `rank` of job `id` (its terminal, a command run into it, a port): its owner,
  // or an operator (on the audit record first, when `audit`); an error when `by` may not, or has
  // too many sessions open. Only an interactive job has a terminal; any running job the others.
  enum class SessionKind { kAttach, kExec, kPort };
  Result<TerminalBridges::Target> SessionTarget(int64_t id, int rank, SessionKind kind,
                                                const Principal& by, bool audit);
  void HandleAgentSession(const std::string& sid, const net::HttpRequest& req, const Principal& by,
                          std::shared_ptr<net::Responder> res);

  // admin_api.cpp: who am I, users, tokens, audit.
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
  // metrics_api.cpp: Prometheus text exposition (docs/monitoring.md).
  net::HttpResponse HandleMetrics();

  // dashboard_api.cpp: the web dashboard's files, its way in, and its reads (docs/dashboard.md).
  // Ahead of identification: the page and its files (public), a login link, a token login.
  std::optional<net::HttpResponse> HandleWebAsset(const net::HttpRequest& req);
  net::HttpResponse HandleLoginPage(const net::HttpRequest& req);
  net::HttpResponse HandleSessionLogin(const net::HttpRequest& req);
  // Identified: a one-time login link for `by` (`berth dashboard`), who the page is, logout.
  net::HttpResponse HandleLoginLink(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleSessionInfo(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleLogout(const net::HttpRequest& req);
  net::HttpResponse HandleOverview();
  net::HttpResponse HandleDashboardQueue(const net::HttpRequest& req);
  // HandleDashboardQueue's two views, written into `page` (its rows, total and more).
  Status DashboardFinishedPage(const listing::RowFilter& filter, int offset, int limit,
                               boost::json::object& page);
  Status DashboardActivePage(const listing::RowFilter& filter, const std::string& sort,
                             bool descending, int offset, int limit, boost::json::object& page);
  // The Set-Cookie value of a session (an empty id with max age 0 ends it in the browser).
  std::string SessionCookie(const std::string& id, int64_t max_age_s) const;

  // share_api.cpp
  net::HttpResponse HandleUsage(const net::HttpRequest& req);
  net::HttpResponse HandleListTeams();
  json::object WaitingJson(const WaitingDetail& waiting);

  // agent_api.cpp: the agents' protocol. `by` is a node: the cluster token or a local admin (any
  // node), or a node credential (that node only: each handler checks the node it names).
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
  // upload_api.cpp: users' uploads (server/uploads.h), and the nodes' fetch of their jobs' blobs.
  net::HttpResponse HandleUploadMissing(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleUploadBlobs(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleUploadPiece(const std::string& digest, const net::HttpRequest& req,
                                      const Principal& by);
  net::HttpResponse HandleUploadReceived(const std::string& digest, const Principal& by);
  net::HttpResponse HandleUploadManifest(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleAgentBlobs(const net::HttpRequest& req, const Principal& by);
  // admin_api.cpp: join tokens, and revoking a node's credential (which ends its session).
  net::HttpResponse HandleCreateJoinToken(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleRevokeNode(const std::string& node, const Principal& by);
  net::HttpResponse HandleSetNodeUsers(const net::HttpRequest& req, const std::string& node,
                                       const Principal& by);

  ServerOptions options_;
  const Clock& clock_;
  std::string token_;
  std::string tls_fingerprint_;
  std::unique_ptr<Store> store_;
  RealSystemUsers system_users_;
  std::unique_ptr<Accounts> accounts_;
  std::unique_ptr<WebSessions> sessions_;
  std::unique_ptr<Identity> identity_;
  // Before http_: the requests being read hold shares of its budget until they end.
  std::unique_ptr<BodyAdmission> body_admission_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<Uploads> uploads_;
  std::atomic<bool> collecting_uploads_{false};
  // The threads of an idle trim that have not yet trimmed their arenas; whether the scheduler
  // thread still has to (it trims when it next wakes without a pass to run).
  std::atomic<int> arena_trims_owed_{0};
  std::atomic<bool> scheduler_trim_owed_{false};
  WatchStreams streams_;
  // Outlives http_, whose WebSockets it relays.
  TerminalBridges terminals_{streams_, 1024, 32, options_.interactive_connect_ms};
  std::unique_ptr<Core> core_;
  std::unique_ptr<Executor> state_exec_;
  std::unique_ptr<Executor> read_exec_;
  std::unique_ptr<net::HttpServer> http_;
  // berth_http_request_seconds{route,method,code}: every answer (server/http/http_metrics.h).
  RouteTable routes_;  // filled by the constructor, read-only after
  metrics::HistogramFamily http_seconds_{
      "berth_http_request_seconds",
      "Time from a request's arrival to its answer (streams: to the stream's start), by route "
      "template, method and status code.",
      {"route", "method", "code"},
      metrics::HistogramFamily::FastSeconds()};
  std::thread scheduler_thread_;
  std::thread housekeeping_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
};

}  // namespace berth
