// AgentConnection: the agent's link to the server — the calls of the agent protocol
// (protocol/agent_protocol.h) without their transport. HttpAgentConnection speaks HTTP to a server
// URL; unit tests use a fake that plays the server (tests/fakes/fake_connection.h).
//
// Errors: Unavailable when the server cannot be reached (retry later); Conflict when the server
// does not know the session (register again) or, on Register, when the node's name is held by
// another live agent; Unauthorized for a wrong token; InvalidArgument for a refusal.
//
// Thread-safety: implementations are thread-safe; calls from different threads may overlap, Watch
// included (the hollow agent reads one stream per simulated node). AbortWatch from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http_client.h"
#include "net/ws_client.h"
#include "protocol/agent_protocol.h"

namespace berth {

namespace net {
class HttpClient;
}

struct SpecFetch {
  int64_t spec_id = 0;
  std::string node;
  std::string session;
  int64_t job = 0;  // the job whose launch needs it
};

// A node's fetch of uploaded blobs for one of its jobs (docs/api.md "Uploads"): each wanted blob
// from a byte offset; the answer holds frames (upload/blob_frames.h), as many as fit in one answer.
struct BlobFetch {
  std::string node;
  std::string session;
  int64_t job = 0;
  std::vector<std::pair<std::string, int64_t>> want;  // (digest, offset)
};

class AgentConnection {
 public:
  virtual ~AgentConnection() = default;
  virtual Result<proto::RegisterAnswer> Register(const proto::RegisterRequest& request) = 0;
  virtual Status Heartbeat(const proto::HeartbeatRequest& request) = 0;
  // The node's health after a round of probes; the answer carries the server's clock.
  virtual Result<proto::HealthAnswer> SendHealth(const proto::HealthRequest& request) = 0;
  // `timeout_ms` bounds the call (the agent's last flush at shutdown waits less).
  virtual Result<proto::ReportAnswer> Report(const proto::ReportRequest& request,
                                             int64_t timeout_ms) = 0;
  // Ships output bytes of several ranks in one request (at most proto::kMaxLogPieces pieces and
  // proto::kMaxLogBatchBytes bytes): an answer per piece, in order. A piece the server refuses
  // (it holds a different amount: a gap) is not an error: its answer carries the server's size
  // and an error text.
  virtual Result<proto::LogBatchAnswer> AppendLogs(const std::string& node,
                                                   const std::string& session,
                                                   const std::vector<proto::LogPiece>& pieces,
                                                   int64_t timeout_ms) = 0;
  // The spec text of a submission, fetched by the node `fetch` names, in its session, for its job
  // `fetch.job` (the server lets a node read only the specs of jobs placed on it: Forbidden
  // otherwise). NotFound if the server does not know it.
  virtual Result<std::string> GetSpec(const SpecFetch& fetch) = 0;
  // Blobs of the job's uploads (the server checks the job is placed on the node); the body of
  // frames.
  virtual Result<std::string> FetchBlobs(const BlobFetch& fetch) = 0;
  // Reads the session's watch stream, calling `on_message` for every message, until the stream
  // ends (Ok or an error), `on_message` returns false, or AbortWatch() is called.
  virtual Status Watch(const std::string& node, const std::string& session,
                       const std::function<bool(const proto::WatchMessage&)>& on_message) = 0;
  // Ends every Watch in progress (or the next one, if none is in progress) at once.
  virtual void AbortWatch() = 0;
  // The node's end of the interactive session `sid` the server announced (proto::SessionMessage):
  // a WebSocket the server relays to the user who attached. NotFound when the server no longer
  // waits for it; Forbidden when it is another node's. This default, for connections that cannot
  // open one, is Unavailable.
  virtual Result<std::unique_ptr<net::WebSocketClient>> OpenSession(const std::string& /*node*/,
                                                                    const std::string& /*session*/,
                                                                    const std::string& /*sid*/) {
    return Status::Unavailable("this connection cannot open interactive sessions");
  }
};

class HttpAgentConnection final : public AgentConnection {
 public:
  // `tls_fingerprint` pins an https server's certificate ("": verify with the system's CAs).
  HttpAgentConnection(std::string server_url, std::string token, std::string tls_fingerprint = "");
  ~HttpAgentConnection() override;

  Result<proto::RegisterAnswer> Register(const proto::RegisterRequest& request) override;
  Status Heartbeat(const proto::HeartbeatRequest& request) override;
  Result<proto::HealthAnswer> SendHealth(const proto::HealthRequest& request) override;
  Result<proto::ReportAnswer> Report(const proto::ReportRequest& request,
                                     int64_t timeout_ms) override;
  Result<proto::LogBatchAnswer> AppendLogs(const std::string& node, const std::string& session,
                                           const std::vector<proto::LogPiece>& pieces,
                                           int64_t timeout_ms) override;
  Result<std::string> GetSpec(const SpecFetch& fetch) override;
  Result<std::string> FetchBlobs(const BlobFetch& fetch) override;
  Status Watch(const std::string& node, const std::string& session,
               const std::function<bool(const proto::WatchMessage&)>& on_message) override;
  void AbortWatch() override;
  Result<std::unique_ptr<net::WebSocketClient>> OpenSession(const std::string& node,
                                                            const std::string& session,
                                                            const std::string& sid) override;
  // Ends the Watch in progress, if any, and nothing later (AbortWatch also ends the next one).
  void AbortWatchInProgress();

 private:
  // One client per kind of call, each used under its own mutex: calls from the agent's threads
  // (heartbeat, shipper, launcher, control) never wait for each other's requests.
  struct Lane;
  std::string server_url_;
  net::HttpClientOptions client_options_;
  std::unique_ptr<Lane> control_;  // register
  std::unique_ptr<Lane> heartbeat_;
  std::unique_ptr<Lane> health_;
  std::unique_ptr<Lane> shipping_;  // reports and logs
  std::unique_ptr<Lane> specs_;
  // The server answered 404 to a batch of output (a version before POST /v1/agent/logs/batch):
  // pieces go one request each. Used under shipping_'s mutex.
  bool one_piece_per_request_ = false;
  std::mutex watch_mu_;
  std::set<std::shared_ptr<net::HttpClient>> watches_;  // guarded by watch_mu_; streams being read
  bool watch_aborted_ = false;                          // guarded by watch_mu_
};

// Several servers sharing one database (docs/ha.md), one of them leading: calls go to the server
// that answered last; when it cannot be reached or answers 503 (a follower, or a leader that lost
// its database), the call fails as usual (kUnavailable: the agent retries) and the next call goes
// to the next server of the list. With one URL it is just that server's HttpAgentConnection.
class FailoverAgentConnection final : public AgentConnection {
 public:
  // `server_urls`: one or more URLs (a comma-separated --server is split by the caller).
  FailoverAgentConnection(const std::vector<std::string>& server_urls, const std::string& token,
                          const std::string& tls_fingerprint = "");

  Result<proto::RegisterAnswer> Register(const proto::RegisterRequest& request) override;
  Status Heartbeat(const proto::HeartbeatRequest& request) override;
  Result<proto::HealthAnswer> SendHealth(const proto::HealthRequest& request) override;
  Result<proto::ReportAnswer> Report(const proto::ReportRequest& request,
                                     int64_t timeout_ms) override;
  Result<proto::LogBatchAnswer> AppendLogs(const std::string& node, const std::string& session,
                                           const std::vector<proto::LogPiece>& pieces,
                                           int64_t timeout_ms) override;
  Result<std::string> GetSpec(const SpecFetch& fetch) override;
  Result<std::string> FetchBlobs(const BlobFetch& fetch) override;
  Status Watch(const std::string& node, const std::string& session,
               const std::function<bool(const proto::WatchMessage&)>& on_message) override;
  void AbortWatch() override;
  Result<std::unique_ptr<net::WebSocketClient>> OpenSession(const std::string& node,
                                                            const std::string& session,
                                                            const std::string& sid) override;

  // The URL calls go to now, and its place in the list.
  const std::string& current_url() const;
  size_t current_index() const { return current_.load(); }

 private:
  // Runs `call` on the current server; moves on to the next one when it is unavailable.
  template <typename Fn>
  auto OnCurrent(Fn&& call);

  std::vector<std::string> urls_;
  std::vector<std::unique_ptr<HttpAgentConnection>> servers_;
  std::atomic<size_t> current_{0};
};

// A --server value's URLs: split at its commas, blanks dropped.
std::vector<std::string> SplitServerUrls(const std::string& list);

// POST /v1/agent/join with `join_token`, to each of `servers` in turn until one answers (several
// servers share one store: any leader takes it): node `node`'s own credential. Unavailable when
// none answered; the server's refusal otherwise (Unauthorized, Conflict, ...).
Result<std::string> JoinCluster(const std::vector<std::string>& servers,
                                const std::string& tls_fingerprint, const std::string& join_token,
                                const std::string& node);

}  // namespace berth
