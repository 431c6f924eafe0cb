// HttpClient: a small blocking HTTP/1.1 client for the CLI and the agent, on Boost.Beast.
//
// Keeps one keep-alive connection to `base_url` and reconnects on demand. Every call has a timeout;
// a server that stops answering yields an Unavailable status, never a hang. Presents the cluster
// token as "Authorization: Bearer" when one is set. Not thread-safe: use one client per thread
// (except Abort(), which any thread may call).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "net/http.h"

namespace berth::net {

struct Url {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix"
};
// Parses "http://host:port[/prefix]". https is not supported (put berth behind a TLS proxy).
Result<Url> ParseUrl(const std::string& url);

class HttpClient {
 public:
  HttpClient(std::string base_url, std::string token);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends one request and reads the whole response. Unavailable on connection failure or timeout.
  Result<HttpResponse> Request(const std::string& method, const std::string& target,
                               const std::string& body = "", DurationMs timeout_ms = 30'000);

  // Sends one request and delivers the response body as it arrives. `on_data` returns false to
  // stop. `idle_timeout_ms` bounds the wait for each piece (the server sends keep-alive pings on
  // streams). Returns the status line's code in *status_code. Ok when the stream ended normally or
  // was stopped.
  Status Stream(const std::string& method, const std::string& target, const std::string& body,
                DurationMs idle_timeout_ms, const std::function<bool(std::string_view)>& on_data,
                int* status_code);

  // Ends the client for good, from any thread: a request or stream in progress fails at once (its
  // socket is shut down) and every later call fails with Unavailable. The only method that is safe
  // to call concurrently with the others.
  void Abort();

  const std::string& base_url() const { return base_url_; }

 private:
  struct Impl;
  std::string base_url_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace berth::net
