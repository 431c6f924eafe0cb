// WatchMux: many agent watch streams (GET /v1/agent/watch, protocol/agent_protocol.h) read on
// one thread, one socket each: what lets the hollow agent (agent/hollow.h) simulate 10,000 nodes
// without a thread per node, so that a scale benchmark measures the server, not the load
// generator's scheduler. Plain http:// servers only (ParseUrl's "http" scheme): hollow nodes are
// a load generator on a trusted network; HollowNodes reads https:// and unix: servers' streams the
// blocking way.
//
// Each stream: connect, send the GET with the cluster token, read the chunked answer, split it into
// lines and decode each as a watch message (types this version does not know are skipped, as
// HttpAgentConnection::Watch does). A stream ends when the server ends it, answers something other
// than 200 (409: Conflict, the session is unknown), the connection fails, a line passes
// kMaxLineBytes, or nothing arrives within the idle timeout (the server pings streams). Opening a
// node's stream again closes its previous one first, without reporting that one's end.
//
// Several servers sharing one store (docs/ha.md): the mux knows each by its place in the list it
// was made with, and each stream is opened at the server its caller names (the one that answered
// the node's registration: the leader).
//
// Thread-safety: Open and Stop may be called from any thread. Run() runs the streams on the
// calling thread until Stop(); the handlers run there, one at a time, so they must not block:
// every stream waits meanwhile.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace berth {

class WatchMux {
 public:
  struct Handlers {
    std::function<void(size_t node, const proto::WatchMessage& message)> on_message;
    // The stream of `node` ended (Conflict: register again; Unavailable: anything else). Not
    // called for a stream closed by Open or Stop.
    std::function<void(size_t node, const Status& why)> on_end;
  };
  static constexpr size_t kMaxLineBytes = 16 << 20;

  // `server_urls`: one or more. Invalid for a URL that is not http:// (or none); Unavailable
  // when a host does not resolve.
  static Result<std::unique_ptr<WatchMux>> Make(const std::vector<std::string>& server_urls,
                                                const std::string& token, Handlers handlers,
                                                DurationMs idle_timeout_ms = 20'000);
  ~WatchMux();
  WatchMux(const WatchMux&) = delete;
  WatchMux& operator=(const WatchMux&) = delete;

  // Opens the watch stream of node number `node` (any number the caller uses to tell its nodes
  // apart), named `name`, in agent session `session`, at server number `server` of the list.
  void Open(size_t node, const std::string& name, const std::string& session, size_t server = 0);
  void Run();
  // Closes every stream and makes Run() return; Open does nothing afterwards.
  void Stop();

 private:
  struct Impl;
  explicit WatchMux(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace berth
