// ServerOptions: how a berth server is set up (`berth server`'s flags, docs/operations.md): where
// it listens, its state, its limits, fair share's settings and where logs and uploads are kept. The
// Server keeps one; the handler groups read it through their ApiContext.
//
// A plain value; not thread-safe to change once the server started.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/json_util.h"
#include "server/core/core.h"
#include "server/notify/notice_sender.h"
#include "server/notify/notice_transport.h"
#include "server/uploads.h"
#include "upload/manifest.h"

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
  // The state machine's own settings (server/core/core.h: leases, kill grace, interactive limits,
  // starvation, fair share, jobs per submission, node retention), passed to the Core as they are.
  CoreOptions core;
  DurationMs interactive_connect_ms = 10'000;  // a session's wait for its node (TerminalBridges)
  size_t max_body_bytes = 64 << 20;
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
  // Notifications (docs/notifications.md): the mail relay and webhooks' trust, and the sender's
  // retries and rate limit.
  RelayOptions notify_relay;
  NoticeSenderOptions notify;
};

// The URL a listener on `host`:`port` is reached at (a wildcard host as 127.0.0.1).
inline std::string UrlFor(std::string host, int port, bool tls) {
  if (host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return (tls ? "https://" : "http://") + host + ":" + std::to_string(port);
}

}  // namespace berth
