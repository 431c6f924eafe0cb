// HttpServer: an HTTP/1.1 server on Boost.Beast/Asio with a fixed pool of worker threads.
//
// Each request is handed to one Handler on a worker thread; the handler answers through a
// Responder, at once or later (long polls) or as a chunked stream (agents' watch streams).
// Thousands of idle streams cost only their buffers, not threads. A request body over
// `max_body_bytes` gets 413 without reaching the handler. Thread-safety: Start/Stop from one
// controlling thread; port(), Post() and RunAfter() from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "net/http.h"

namespace berth::net {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free port
  int threads = 1;
  size_t max_body_bytes =
      64 << 20;  // 64 MiB: a 100k-job spec fits easily; a runaway upload does not
  DurationMs idle_timeout_ms = 120'000;
  std::string unix_socket_path;  // also listen here (mode 0666) when set
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, then starts the worker threads. Returns an error if the address cannot be
  // bound.
  Status Start();
  // The bound port (valid after Start).
  int port() const;
  // Stops accepting, lets running handlers finish, closes connections and joins the workers.
  // Idempotent.
  void Stop();

  // Runs `fn` on a worker thread soon / after `delay`. Safe from any thread; dropped after Stop().
  void Post(std::function<void()> fn);
  void RunAfter(DurationMs delay, std::function<void()> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace berth::net
