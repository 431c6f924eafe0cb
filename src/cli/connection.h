// Connection: how a user command finds and talks to a server: `--server`, then BERTH_SERVER, then
// the server saved by `berth login` (BERTH_HOME/config), then the local cluster of BERTH_HOME
// (started on demand, saying so on stderr), reached through its unix socket, where the kernel
// says who we are. Server URLs are http://HOST:PORT, https://HOST:PORT or unix:/path/berth.sock.
// The token (a user's own, from `berth admin token create`) comes from --token, BERTH_TOKEN,
// BERTH_TOKEN_FILE, or the login config when talking to the server saved there.
// Also the local cluster itself (`berth local up|down|status`). Not thread-safe; one per command.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "net/http_client.h"

namespace berth::cli {

// BERTH_HOME, default ~/.berth.
std::string BerthHome();

// What `berth login` saves in BERTH_HOME/config (mode 0600).
struct LoginConfig {
  std::string server;
  std::string token;
  std::string tls_fingerprint;  // "sha256:..." pinned at login; "" for http and unix servers
};
Result<LoginConfig> ReadLoginConfig();  // NotFound when there is none
Status WriteLoginConfig(const LoginConfig& config);

struct LocalClusterOptions {
  int nodes = 1;
  std::string gpus;                // "V100:4" per node; empty: discover
  std::string cpus;                // per node; empty: this machine's
  std::string memory;              // GiB per node; empty: this machine's
  std::string isolation = "auto";  // the agents' --isolation
};

struct LocalCluster {
  std::string server;       // the server's TCP URL (for agents)
  std::string unix_socket;  // where local users reach it: unix:/.../berth.sock
  std::vector<std::string> nodes;
  int server_pid = 0;
  std::vector<int> agent_pids;
};

// The local cluster recorded under BERTH_HOME if its server answers; NotFound otherwise.
Result<LocalCluster> FindLocalCluster();
// Starts server + agents under BERTH_HOME and waits until every node is UP. `self_exe` is this
// binary.
Result<LocalCluster> StartLocalCluster(const std::string& self_exe,
                                       const LocalClusterOptions& options);
// Stops the local cluster: the agents, the jobs' supervisors (which stop the jobs), then the
// server; then what podman left behind (its pause processes, mounts below BERTH_HOME and the
// agents' container run dirs). `say` hears each step as it begins (a line, no newline).
Status StopLocalCluster(const std::function<void(const std::string&)>& say = {});

// A berth agent of a real cluster running on this machine (not a local cluster's own), found in
// `proc`'s command lines: where its users' socket is (<state dir>/berth.sock unless
// --user-socket says otherwise; "" with --user-socket -) and its server.
struct NodeAgentHere {
  int pid = 0;
  std::string state_dir;
  std::string server;
  std::string user_socket;
};
std::optional<NodeAgentHere> FindNodeAgent(const std::string& proc = "/proc");

// A fresh idempotency key: 128 random bits in hex.
std::string NewIdempotencyKey();

class Connection {
 public:
  // `server_flag` is --server (may be empty). `token_flag` is --token (may be empty).
  Connection(std::string server_flag, std::string token_flag, std::string self_exe);

  // Resolves the server (starting the local cluster if none is configured or running).
  Status Connect();
  const std::string& url() const { return url_; }
  // Every server of --server/BERTH_SERVER (one unless it lists several), after Connect().
  const std::vector<std::string>& urls() const { return urls_; }
  const std::string& tls_fingerprint() const { return tls_fingerprint_; }

  // One API call; the JSON body of a 2xx answer, or an error carrying the server's message.
  // With several servers (--server/BERTH_SERVER a comma-separated list; docs/ha.md), a call that
  // cannot connect, or that a follower refuses, goes to the leader the follower names or to the
  // next server, for up to kFailoverWaitMs while no server leads (a failover in progress). A call
  // whose request may have reached a server is never sent twice.
  static constexpr DurationMs kFailoverWaitMs = 15'000;
  // How long a call retries before it says on stderr that it is waiting for a server.
  static constexpr DurationMs kAnnounceWaitMs = 1'000;
  Result<json::value> Call(const std::string& method, const std::string& target,
                           const std::string& body = "", DurationMs timeout_ms = 60'000);
  // A call that may be repeated safely (a submission with an Idempotency-Key: the server answers
  // a repeat with what the first made). Besides what Call() retries, it sends the request again,
  // to this server or the next, when the answer was lost or the server could not commit (5xx),
  // for up to kFailoverWaitMs. When it gives up, the error names the key and says whether the
  // submission may have been recorded (some attempt may have reached a server) or surely was not
  // (every attempt failed to connect).
  Result<json::value> CallIdempotent(const std::string& method, const std::string& target,
                                     const std::string& body, const std::string& key,
                                     DurationMs timeout_ms = 60'000);
  // The JSON answer of `method target`, or its error: berth's {"error": ...}, or what answered
  // when that was not a berth server (never an empty message).
  Result<json::value> Decode(Result<net::HttpResponse> res, const std::string& method,
                             const std::string& target) const;
  // A second connection to the server in use (after Connect()), with a client of its own: for
  // another thread (a connection is not thread-safe), e.g. to cancel a job being followed.
  std::unique_ptr<Connection> Another() const;
  // The client of the server in use, for requests that stream (starting the local cluster first if
  // its socket was there but its server is gone).
  net::HttpClient& http();
  // Connect() takes the local cluster's unix socket on trust and lets the first call find out
  // whether its server still runs; this finds out now (starting the cluster if it does not run),
  // for a caller that talks to urls() itself.
  Status VerifyLocal();

 private:
  std::string server_flag_;
  std::string token_;
  std::string tls_fingerprint_;
  std::string self_exe_;
  std::string url_;  // the server in use (one of urls_)
  std::vector<std::string> urls_;
  std::unique_ptr<net::HttpClient> client_;
  bool local_unverified_ = false;  // url_ is the local socket, not yet known to answer

  // The request surely never left: no connection was made.
  static bool NeverSent(const Result<net::HttpResponse>& res);

  // The local cluster's URL (its unix socket where it has one), starting the cluster if its
  // server does not answer.
  Result<std::string> FindOrStartLocalCluster();

  // Switches to `url` (a member of urls_).
  void UseServer(const std::string& url);
  // Sends the request, and again to the leader a follower names or the next server, as Call()
  // and CallIdempotent() (`repeatable`) say. `maybe_delivered` (if given) is set to whether any
  // attempt may have reached a server (false: every one failed to connect).
  Result<net::HttpResponse> Send(const std::string& method, const std::string& target,
                                 const std::string& body, DurationMs timeout_ms,
                                 const net::HttpHeaders& headers, bool repeatable,
                                 bool* maybe_delivered = nullptr);
};

}  // namespace berth::cli
