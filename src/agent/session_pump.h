// The agent's part of an interactive session (docs/design.md "Interactive ranks"): it relays a
// WebSocket the server opened for a user who attached (proto::SessionMessage) and a leg of the
// rank's terminal in the node supervisor (Launcher::OpenTerminalLeg), both ways, until either
// ends. A WebSocket message is a leg frame's channel byte and payload (kSessionSubprotocol).
//
// Bounded: at most kPumpBufferBytes wait in each direction; a side that does not read stops the
// other being read (the terminal's output meanwhile waits in the node supervisor's scrollback).
//
// Thread-safety: RelaySession blocks the calling thread (the agent gives each session one);
// `stop` may be set from any thread.
#pragma once

#include <atomic>

#include "common/status.h"
#include "common/term_channel.h"
#include "net/ws_client.h"

namespace berth {

inline constexpr size_t kPumpBufferBytes = 256 << 10;

// Relays until the leg closes (the rank ended: its last output and exit were sent on), the
// WebSocket closes (the user went away: the leg is closed, the job goes on) or `stop` is set.
// Ok in the first two cases; the failure otherwise.
Status RelaySession(net::WebSocketClient& ws, int leg_fd, const std::atomic<bool>& stop);

}  // namespace berth
