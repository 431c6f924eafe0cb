// ConnectionSlots: the open connections of an HttpServer, in all and per remote address, held
// against its caps (HttpServerOptions::max_connections, max_connections_per_peer). Each connection
// holds a slot (a shared pointer whose deleter gives it back) from its accept to its close, also
// after an upgrade to a WebSocket. Loopback and unix-socket peers count in the total only: they are
// this machine's users and agents (a hollow agent of ten thousand nodes among them).
//
// Thread-safety: thread-safe (one internal mutex). Slots may outlive the server (an owner may keep
// a WebSocket longer), so each holds the table by shared pointer: make it with make_shared.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "net/http.h"

namespace berth::net {

class ConnectionSlots : public std::enable_shared_from_this<ConnectionSlots> {
 public:
  // 0: no cap.
  ConnectionSlots(size_t max_total, size_t max_per_peer)
      : max_total_(max_total), max_per_peer_(max_per_peer) {}

  // A slot for a connection from `peer`; null when a cap is reached, and `why` says which.
  std::shared_ptr<void> Take(const PeerInfo& peer, std::string* why) EXCLUDES(mu_);
  // Slots held now.
  size_t open() const EXCLUDES(mu_);

 private:
  const size_t max_total_;
  const size_t max_per_peer_;
  mutable Mutex mu_;
  size_t total_ GUARDED_BY(mu_) = 0;
  // Remote address -> slots held; an address leaves with its last slot.
  std::unordered_map<std::string, size_t> per_peer_ GUARDED_BY(mu_);
};

}  // namespace berth::net
