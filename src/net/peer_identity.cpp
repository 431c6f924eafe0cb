#include "net/peer_identity.h"

namespace berth::net {

Result<uint32_t> LoopbackPeerUid(const PeerInfo&) {
  return Status::Unavailable("loopback peer identification is not built yet");
}

}  // namespace berth::net
