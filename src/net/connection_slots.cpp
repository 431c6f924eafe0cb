// Open connections against an HttpServer's caps (net/connection_slots.h).
#include "net/connection_slots.h"

#include "net/http_client.h"

namespace berth::net {

std::shared_ptr<void> ConnectionSlots::Take(const PeerInfo& peer, std::string* why) {
  const bool counted_per_peer =
      peer.transport != PeerInfo::Transport::kUnix && !IsLoopbackHost(peer.remote_address);
  MutexLock lock(mu_);
  if (max_total_ > 0 && total_ >= max_total_) {
    *why = "the server has " + std::to_string(total_) +
           " connections open, its limit (--max-connections); try again shortly";
    return nullptr;
  }
  if (counted_per_peer && max_per_peer_ > 0 && per_peer_[peer.remote_address] >= max_per_peer_) {
    *why = "too many connections from " + peer.remote_address + ": " +
           std::to_string(max_per_peer_) +
           " are open, the limit per address (--max-connections-per-peer)";
    return nullptr;
  }
  ++total_;
  std::string key = counted_per_peer ? peer.remote_address : "";
  if (counted_per_peer) ++per_peer_[key];
  // Not null (a taken slot must test true): it points at the table, which the deleter keeps.
  return std::shared_ptr<void>(static_cast<void*>(this), [self = shared_from_this(), key](void*) {
    MutexLock lock(self->mu_);
    --self->total_;
    if (key.empty()) return;
    auto it = self->per_peer_.find(key);
    if (it != self->per_peer_.end() && --it->second == 0) self->per_peer_.erase(it);
  });
}

size_t ConnectionSlots::open() const {
  MutexLock lock(mu_);
  return total_;
}

}  // namespace berth::net
