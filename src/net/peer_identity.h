// Placeholder until the net layer's implementation lands (branch net-auth).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "net/http.h"

namespace berth::net {

Result<uint32_t> LoopbackPeerUid(const PeerInfo& peer);

}  // namespace berth::net
