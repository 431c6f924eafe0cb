// Socket helpers shared by the relays: the node supervisor's terminal legs, the agent's session
// pump (supervise/terminal.h) and the byte-stream relay of port forwarding (net/ws_stream.h).
// Thread-safety: reentrant; each call touches only the descriptor and buffer it is given.
#pragma once

#include <cstddef>
#include <string>

namespace berth {

// Sends what `out` holds past *pos on the socket `fd` without blocking, advancing *pos, until all
// of it is sent or the socket is full. False when the peer is gone.
bool SendPending(int fd, const std::string& out, size_t* pos);

}  // namespace berth
