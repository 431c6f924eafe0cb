// BodyAdmission: how big a body the server reads for a request, decided from its headers before a
// byte of the body is read (net::HttpServerOptions::admit; docs/security.md "Limits"). A sender the
// server cannot identify gets a few KiB at most, and a request that declares more is answered (401
// or 403, as Identity says) at once: no login is needed to spend the server's memory otherwise.
// An identified sender gets up to 1 MiB, or up to the server's body limit on the routes that take
// big bodies (submissions, uploads, the agents' protocol), and at most `in_flight_per_sender` of
// bodies being read at once (503 with Retry-After past it; a node's own credential is a sender, the
// cluster token and the server's own admins are not held to it).
//
// Thread-safety: Admit is thread-safe (one internal mutex); the budget's entries exist only while
// a body is being read (an entry goes with its last reservation), so the map is bounded by the
// open connections.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "net/http_server.h"
#include "server/http/identity.h"

namespace berth {

class BodyAdmission {
 public:
  struct Limits {
    size_t unidentified_bytes = 8 << 10;
    size_t small_bytes = 1 << 20;
    size_t large_bytes = 64 << 20;  // the server's body limit
    size_t in_flight_per_sender = 256 << 20;
  };
  // `identity` must outlive this.
  BodyAdmission(const Identity& identity, Limits limits);

  net::Admission Admit(const net::HttpRequest& head) EXCLUDES(mu_);

  // Whether a request of `method` to `path` may carry a big body.
  static bool TakesLargeBody(const std::string& method, const std::string& path);

 private:
  const Identity& identity_;
  const Limits limits_;
  Mutex mu_;
  std::unordered_map<std::string, size_t> in_flight_ GUARDED_BY(mu_);  // sender -> body bytes
};

}  // namespace berth
