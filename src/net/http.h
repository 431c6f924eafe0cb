// Plain HTTP/1.1 message types shared by berth's HTTP server and client, free of Boost.Beast so
// that only net/*.cpp pay Beast's compile time. Values; thread-safe like any value type.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace berth::net {

// How a request reached the server, for identifying its sender (server/http/identity.h).
struct PeerInfo {
  enum class Transport { kTcp, kTls, kUnix };
  Transport transport = Transport::kTcp;
  // kUnix: the connecting process's credentials from SO_PEERCRED, which the kernel attests.
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  int pid = 0;
  // kTcp/kTls: both ends of the connection (a loopback peer's uid can be asked of the kernel with
  // net::LoopbackPeerUid).
  std::string local_address;
  int local_port = 0;
  std::string remote_address;
  int remote_port = 0;
};

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // as sent: "/v1/jobs?all=1"
  std::string path;                            // decoded path without the query: "/v1/jobs"
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote_address;  // peer IP ("" on the unix socket)
  PeerInfo peer;
  // A GET asking to become a WebSocket (RFC 6455: "Upgrade: websocket" and the handshake's
  // headers); a handler may then answer with Responder::AcceptWebSocket.
  bool websocket_upgrade = false;

  // The value of a header (lower-case name) or "".
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  std::string Query(const std::string& name, const std::string& fallback = "") const {
    auto it = query.find(name);
    return it == query.end() ? fallback : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::string Header(const std::string& name) const;  // case-insensitive; "" if absent
};

// One WebSocket connection (RFC 6455) that a handler accepted with Responder::AcceptWebSocket:
// binary messages both ways, each at most HttpServerOptions::max_websocket_message_bytes (a bigger
// one closes the connection with code 1009). The server pings a quiet peer and closes one that
// stops answering.
//
// Flow control is the owner's: it asks for one message at a time (Read) and learns when each
// Write has reached the socket, so that a relay between two connections holds at most a message
// or two per direction instead of buffering without bound.
//
// Thread-safety: every method may be called from any thread. Callbacks run on the server's worker
// threads, one at a time per connection, and must not block.
class WebSocket {
 public:
  virtual ~WebSocket() = default;
  // Reads the next message: `done` gets it, or nullopt once the connection closed (either side
  // closed it, it failed, or the server stopped). One Read at a time.
  virtual void Read(std::function<void(std::optional<std::string> message)> done) = 0;
  // Sends one binary message after those written before it. `done(true)` once it is written,
  // `done(false)` when the connection closed first. `done` may be empty.
  virtual void Write(std::string message, std::function<void(bool written)> done) = 0;
  // Starts the closing handshake: `code` 1000 is a normal close, 4000-4999 are the application's;
  // `reason` at most 123 bytes. A Read waiting then gets nullopt.
  virtual void Close(int code, std::string reason) = 0;
  virtual bool closed() const = 0;
  // The close code the peer sent (or the one we sent first); 0 while open or when there was none.
  virtual int close_code() const = 0;
  // The reason the peer's close gave ("" when none, or we closed first).
  virtual std::string close_reason() const = 0;
  // Bytes handed to Write and not yet written.
  virtual size_t backlog() const = 0;
};

// How a handler answers one request: once with Send(), or as a chunked stream (StartStream,
// Write..., End), or by becoming a WebSocket (AcceptWebSocket). Every method is thread-safe and
// may be called from any thread, long after the handler returned (long polls, watch streams).
// Calls after the peer went away are ignored.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void Send(HttpResponse response) = 0;
  virtual void StartStream(int status, std::string content_type) = 0;
  // Queues one chunk. Returns false when the peer is gone (the stream should be abandoned).
  virtual bool Write(std::string chunk) = 0;
  virtual void End() = 0;
  virtual bool closed() const = 0;
  // Bytes queued but not yet written to the socket: lets producers notice a peer that stopped
  // reading.
  virtual size_t backlog() const = 0;
  // Answers a WebSocket upgrade (HttpRequest::websocket_upgrade) with 101, naming `subprotocol`
  // when the client offered it (Sec-WebSocket-Protocol; "" names none), and hands the open
  // connection to `on_open` on a worker thread. A request that is not an upgrade gets 400, and so
  // does a client that offered subprotocols without `subprotocol` among them; on_open is not
  // called then, nor when the handshake fails. This default, for responders that cannot upgrade,
  // answers 501.
  virtual void AcceptWebSocket(std::string subprotocol,
                               std::function<void(std::shared_ptr<WebSocket>)> on_open);
};

using Handler = std::function<void(HttpRequest&& request, std::shared_ptr<Responder> responder)>;

// Percent-decoding of a URL component ("+" is a space in queries). Invalid escapes are kept as is.
std::string UrlDecode(const std::string& s, bool plus_is_space);
std::string UrlEncode(const std::string& s);
// Splits "/a/b?x=1&y=2" into the decoded path and query map.
void ParseTarget(const std::string& target, std::string* path,
                 std::map<std::string, std::string>* query);

}  // namespace berth::net
