// HttpServer: an HTTP/1.1 server on Boost.Beast/Asio with a fixed pool of worker threads.
//
// Each request is handed to one Handler on a worker thread; the handler answers through a
// Responder, at once or later (long polls) or as a chunked stream (agents' watch streams), or
// turns the connection into a WebSocket (net::WebSocket, interactive sessions).
// Thousands of idle streams cost only their buffers, not threads. Each worker runs an io_context
// of its own and each connection stays on the worker it was dealt when accepted (in turn), so a
// handler that runs on a worker holds up that worker's other connections while it runs: a handler
// that may block hands its work to another thread and answers through its Responder; so does a
// RunAfter callback, which runs on the first worker, the one that accepts. The server listens on
// TCP (plain, or TLS only when a certificate is configured) and, optionally, also on a unix
// socket, and tells the handler who is at the other end of each request (HttpRequest::peer).
//
// Slow or idle peers cost a socket and a buffer each, never a thread: a connection that sends
// nothing is closed after `idle_timeout_ms`, and once a request's first byte arrived its headers
// must be complete within `header_timeout_ms` and its body within `body_timeout_ms`. Requests
// over the limits below get a JSON error ({"error": "..."}, naming the limit) and
// "Connection: close" without reaching the handler: 413 (body), 431 (header block or header
// count), 414 (request target). Responses being streamed are never cut by these deadlines.
//
// Thread-safety: Start/Stop from one controlling thread; port(), Post() and RunAfter() from any
// thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "net/http.h"

namespace berth::net {

// What HttpServerOptions::admit decides for a request whose body has not been read yet.
struct Admission {
  // The most body bytes it may send (a bigger Content-Length, or chunks adding up to more, get
  // 413 without the body being kept).
  size_t max_body_bytes = 0;
  // When set, sent instead (with "Connection: close"); the body is never read.
  std::optional<HttpResponse> refuse;
  // Kept until the request is handed to the handler (or the connection ends): what the decision
  // reserved (a share of a budget), released when this is destroyed.
  std::shared_ptr<void> hold;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free port
  int threads = 1;
  size_t max_body_bytes =
      64 << 20;  // 64 MiB: a 100k-job spec fits easily; a runaway upload does not
  size_t max_header_bytes = 64 << 10;  // request line and headers together
  size_t max_header_count = 100;
  size_t max_target_bytes = 8 << 10;  // the request target ("/v1/jobs?...")
  // Called on the I/O thread for a request that has a body, once its headers are in and before a
  // byte of the body is read, with the request as it will be handed over but for its body: says
  // how big a body it may send, or answers it at once (a sender not identified: memory is never
  // spent on a body before its sender is known). Unset: every body up to max_body_bytes. Must not
  // block.
  std::function<Admission(const HttpRequest& head)> admit;
  // Open connections (HTTP and WebSocket) in all, and from one remote address (loopback and unix
  // socket peers count in the total only: they are this machine's users and agents); 0: no cap.
  // Past either a new connection is answered 503 with a JSON error naming the limit (TLS ones
  // are closed) and closed at once.
  size_t max_connections = 0;
  size_t max_connections_per_peer = 0;
  // A connection with no request in progress (before the first request, or kept alive after a
  // response) is closed after this long.
  DurationMs idle_timeout_ms = 60'000;
  // From a request's first byte (or a TLS connection's start, for its handshake) to the end of
  // its headers.
  DurationMs header_timeout_ms = 10'000;
  // From the end of the headers to the end of the body.
  DurationMs body_timeout_ms = 60'000;
  // A WebSocket message bigger than this closes its connection with code 1009.
  size_t max_websocket_message_bytes = 1 << 20;
  // A WebSocket with nothing received for this long is pinged; one that then stays silent as
  // long again is closed.
  DurationMs websocket_idle_ms = 30'000;
  // When set, the server also listens on a unix stream socket at this path, made 0666 so that
  // every local user can connect (the server tells them apart by SO_PEERCRED). A stale socket
  // file left by a dead server is replaced; a live server answering on it makes Start() fail.
  // Removed by Stop(). Always plain HTTP.
  std::string unix_socket_path;
  // False: no TCP listener at all (a unix socket only; `host` and `port` are unused).
  bool listen_tcp = true;
  // When > 0, Start() grows the process's file-descriptor table to this many slots (at most the
  // open-file limit) before any connection arrives, so that connections arriving later never wait
  // for the kernel to grow it (which stalls a threaded process for an RCU grace period, 10-30 ms,
  // at every doubling). ~8.3 bytes of kernel memory per slot, for the process's lifetime.
  size_t reserve_fds = 0;
  // When both are set, the TCP listener speaks TLS (1.2 or later) only, with this PEM
  // certificate (chain) and private key.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Raises the soft limit on open files to the hard limit (so that thousands of connections fit),
  // loads the TLS certificate and key if configured, binds and listens on TCP (and the unix
  // socket), then starts the worker threads. Returns an error, and listens on nothing, if the
  // address cannot be bound, the unix socket path is taken or unusable, or the certificate or
  // key cannot be loaded or do not match.
  Status Start();
  // The bound TCP port (valid after Start).
  int port() const;
  // Connections open now (HTTP and WebSocket, every listener).
  size_t open_connections() const;
  // Stops accepting, lets running handlers finish, closes connections, removes the unix socket
  // file and joins the workers. Idempotent.
  void Stop();

  // Runs `fn` on a worker thread soon / after `delay`. Safe from any thread; dropped after Stop().
  void Post(std::function<void()> fn);
  void RunAfter(DurationMs delay, std::function<void()> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace berth::net
