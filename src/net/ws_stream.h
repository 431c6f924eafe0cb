// RelayStream: a byte stream (a TCP connection) carried over a WebSocket, both ways, as
// `berth port-forward` does it (docs/api.md "Port forwarding"): the CLI relays the connection it
// accepted, the agent the one it made to the job's port, and the server relays the two
// WebSockets to each other. Each message is bytes of the stream, in order; an empty message says
// that its sender's side will send no more (a TCP half-close), so that a peer that shuts down its
// writing half still gets its answer.
//
// Bounded: at most kStreamBufferBytes wait in each direction; a side that does not read stops the
// other being read.
//
// Thread-safety: RelayStream blocks the calling thread; `stop` may be set from any thread.
#pragma once

#include <atomic>

#include "common/status.h"
#include "net/ws_client.h"

namespace berth::net {

// The WebSocket subprotocol of a forwarded stream.
inline constexpr char kStreamSubprotocol[] = "berth.stream.v1";
// The close code of a stream refused before it began (the port is not the job's, nothing listens
// there); the close's reason says why.
inline constexpr int kStreamRefusedCode = 4009;

inline constexpr size_t kStreamBufferBytes = 256 << 10;
// The most bytes of the stream one message carries.
inline constexpr size_t kStreamChunkBytes = 64 << 10;

// Relays between `ws` and the connected socket `fd` until both sides have ended their halves, the
// WebSocket closes, the socket fails, or `stop` is set; then closes the WebSocket (the caller
// closes `fd`). Ok when both halves ended cleanly; otherwise what broke.
Status RelayStream(WebSocketClient& ws, int fd, const std::atomic<bool>& stop);

}  // namespace berth::net
