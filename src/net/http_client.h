// HttpClient: a small blocking HTTP/1.1 client for the CLI and the agent, on Boost.Beast's parser
// and serializer over a plain socket or OpenSSL.
//
// Speaks to "http://host:port[/prefix]", "https://host:port[/prefix]" (TLS 1.2+) and
// "unix:/path/to/berth.sock" (HTTP over a unix socket, where the server learns the caller's uid
// from the kernel). Keeps one keep-alive connection to the server and reconnects on demand. Every
// call has a timeout; a server that stops answering yields an Unavailable status, never a hang.
// Presents the token as "Authorization: Bearer" when one is set.
//
// TLS trust: with a pinned fingerprint (HttpClientOptions::tls_fingerprint) the server's leaf
// certificate must have exactly that SHA-256 fingerprint, and nothing else is checked (trust on
// first use: `berth login` shows the fingerprint, FetchServerFingerprint, for the user to compare).
// Without a pin the chain is verified against `ca_file`, or the system's CAs, and the certificate
// must name the URL's host (DNS name or IP address).
//
// Not thread-safe: use one client per thread (except Abort(), which any thread may call).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "net/http.h"

namespace berth::net {

class WebSocketClient;  // net/ws_client.h

struct Url {
  std::string scheme = "http";  // "http", "https" or "unix"
  std::string host;             // http(s): a name or an address (IPv6 without brackets)
  int port = 80;                // http(s)
  std::string base_path;        // http(s): "" or "/prefix"
  std::string socket_path;      // unix: the socket file
};
// Parses "http://host:port[/prefix]", "https://host[:port][/prefix]" (port 443 by default),
// "unix:/path/to/socket" (also "unix:///path"), or "host:port" (http). IPv6 hosts go in brackets:
// "http://[::1]:8080". Invalid, naming the problem, for an unknown scheme, a bad port or an empty
// host.
Result<Url> ParseUrl(const std::string& url);

// Whether `host` names only the local machine ("localhost", "::1", "127.x.y.z").
bool IsLoopbackHost(const std::string& host);

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpClientOptions {
  std::string token;  // sent as "Authorization: Bearer <token>" when not empty
  // https: the server certificate's SHA-256 fingerprint ("sha256:<hex>", any spelling
  // NormalizeFingerprint accepts). When set, it replaces CA and hostname verification.
  std::string tls_fingerprint;
  // https without a pin: PEM file of the CAs to trust instead of the system's.
  std::string ca_file;
};

class HttpClient {
 public:
  HttpClient(std::string base_url, std::string token);
  HttpClient(std::string base_url, HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends one request and reads the whole response. Unavailable on connection failure or timeout
  // (`timeout_ms` bounds each wait for the server: connecting, the TLS handshake, each read and
  // write). Unauthorized when the server's TLS certificate is not the pinned one or not trusted.
  // `headers` are sent besides the usual ones (Host, Authorization, Content-Type).
  Result<HttpResponse> Request(const std::string& method, const std::string& target,
                               const std::string& body = "", DurationMs timeout_ms = 30'000,
                               const HttpHeaders& headers = {});

  // Sends one request and delivers the response body as it arrives. `on_data` returns false to
  // stop. `idle_timeout_ms` bounds the wait for each piece (the server sends keep-alive pings on
  // streams). Returns the status line's code in *status_code. Ok when the stream ended normally or
  // was stopped.
  Status Stream(const std::string& method, const std::string& target, const std::string& body,
                DurationMs idle_timeout_ms, const std::function<bool(std::string_view)>& on_data,
                int* status_code);

  // Asks for `GET target` to become a WebSocket (RFC 6455) speaking `subprotocol`, on a connection
  // of its own. On 101, with the server's accept key and subprotocol checked, *socket takes that
  // connection over (the client keeps none; its next call connects anew) and the 101 response is
  // returned. Any other answer is returned as from Request, for the caller to decode, and *socket
  // stays empty. Unavailable when the server cannot be reached or its 101 is not a valid one.
  Result<HttpResponse> OpenWebSocket(const std::string& target, const std::string& subprotocol,
                                     DurationMs timeout_ms,
                                     std::unique_ptr<WebSocketClient>* socket,
                                     size_t max_message_bytes = 16 << 20);

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

// Connects to an https:// URL, completes a TLS handshake WITHOUT verifying the certificate, and
// returns the fingerprint ("sha256:<hex>") of the server's leaf certificate, for a user to compare
// with the one the server's admin announces before pinning it. Invalid for a URL that is not
// https://; Unavailable when the server cannot be reached or the handshake fails or takes longer
// than `timeout_ms` per step.
Result<std::string> FetchServerFingerprint(const std::string& https_url,
                                           DurationMs timeout_ms = 10'000);

}  // namespace berth::net
