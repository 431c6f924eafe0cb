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

// How a request reached the server, for identifying its sender (server/identity.h).
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

// How a handler answers one request: once with Send(), or as a chunked stream (StartStream,
// Write..., End). Every method is thread-safe and may be called from any thread, long after the
// handler returned (long polls, watch streams). Calls after the peer went away are ignored.
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
};

using Handler = std::function<void(HttpRequest&& request, std::shared_ptr<Responder> responder)>;

// Percent-decoding of a URL component ("+" is a space in queries). Invalid escapes are kept as is.
std::string UrlDecode(const std::string& s, bool plus_is_space);
std::string UrlEncode(const std::string& s);
// Splits "/a/b?x=1&y=2" into the decoded path and query map.
void ParseTarget(const std::string& target, std::string* path,
                 std::map<std::string, std::string>* query);

}  // namespace berth::net
