// LoopbackPeerUid: which local user owns the other end of a TCP connection that came in over the
// loopback interface, asked of the kernel (NETLINK_SOCK_DIAG / inet_diag) by the connection's
// exact 4-tuple. It lets a server tell local users apart on TCP as it does on a unix socket with
// SO_PEERCRED.
//
// Trust: the answer is as good as SO_PEERCRED only for loopback peers in the server's own kernel
// and network namespace, where the kernel holds both ends of the connection. It names the owner of
// the socket that connected, which for a relay on loopback (ssh -L, a container port forward such
// as docker-proxy, socat) is the relay's user, not the person behind it: do not run such relays
// on a host that trusts loopback identities. Connections from other addresses are refused.
// Thread-safe: each call opens, uses and closes its own netlink socket.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "net/http.h"

namespace berth::net {

// The uid that owns the client socket of the TCP connection `peer` describes (peer.remote is the
// client's end, peer.local the server's; both as the server sees them: an IPv4-mapped IPv6 address
// "::ffff:127.0.0.1" counts as IPv4). Errors: Invalid when `peer` is not TCP/TLS or its remote
// address is not loopback (127.0.0.0/8, ::1) or unparsable; NotFound when the kernel knows no
// such live connection (the client went away: a socket in TIME_WAIT has no owner and is refused);
// Unavailable when netlink fails or does not answer within a second.
Result<uint32_t> LoopbackPeerUid(const PeerInfo& peer);

}  // namespace berth::net
