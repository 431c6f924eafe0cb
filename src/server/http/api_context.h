// ApiContext: what the HTTP handler groups (jobs_api.h, agents_api.h, admin_api.h, uploads_api.h,
// terminals_api.h, dashboard_api.h) reach of the control plane the Server wires: its options, the
// clock, the store, the Core, logs, uploads, accounts and identity, the agents' streams, the
// terminal bridges, the GPU usage the heartbeats bring, the read executor and the HTTP server (for
// timers). Each group holds one; the Server builds it in Start, once every part exists, before any
// request is served.
//
// Thread-safety: the parts are each thread-safe (their own headers say how); the context itself is
// read-only after it is built.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/executor.h"
#include "common/json_util.h"
#include "common/status.h"
#include "net/http.h"
#include "net/http_server.h"
#include "server/accounts.h"
#include "server/core/core.h"
#include "server/gpu_usage_table.h"
#include "server/http/identity.h"
#include "server/http/routes.h"
#include "server/http/terminal_bridges.h"
#include "server/http/watch_streams.h"
#include "server/http/web_sessions.h"
#include "server/listing.h"
#include "server/log_store.h"
#include "server/server_options.h"
#include "server/uploads.h"
#include "store/store.h"

namespace berth {

struct ApiContext {
  const ServerOptions& options;
  const Clock& clock;
  Store& store;
  Core& core;
  LogStore& logs;
  Uploads& uploads;
  Accounts& accounts;
  WebSessions& sessions;
  Identity& identity;
  WatchStreams& streams;
  TerminalBridges& terminals;
  GpuUsageTable& gpu_usage;  // what running jobs' GPUs did, from the heartbeats
  Executor& read_exec;       // where a streamed answer's later reads run (HandleLogs)
  net::HttpServer& http;     // its timers (RunAfter)
  const std::string& tls_fingerprint;
  const std::atomic<bool>& stopping;  // the server is stopping: streams end
};

// Requests waiting for a handler thread, per executor: past it a request is answered 503 with
// Retry-After (BusyResponse: a flood is refused, not queued without bound).
constexpr size_t kMaxQueuedRequests = 10'000;
// 503 with Retry-After: a request that found its executor's queue full (server_routes.cpp).
net::HttpResponse BusyResponse();

// The URL the server is reached at, for links it hands out.
inline std::string ServerUrl(const ApiContext& c) {
  return UrlFor(c.options.host, c.http.port(), !c.tls_fingerprint.empty());
}

}  // namespace berth
