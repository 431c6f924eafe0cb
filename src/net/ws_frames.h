// WebSocket framing (RFC 6455 section 5) for berth's own client side: encoding a frame, taking
// complete frames off a byte buffer, and the handshake's accept key. The server side uses
// Boost.Beast's implementation (net/http_server.cpp); this one keeps the static CLI free of it
// and lets a client pump a socket from a poll loop (net/ws_client.h).
//
// Pure functions on values: thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace berth::net {

enum class WsOpcode : uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xA,
};

struct WsFrame {
  bool fin = true;
  WsOpcode opcode = WsOpcode::kBinary;
  std::string payload;  // unmasked
};

// Appends one frame to *out; with `mask` its payload is masked with that key, as every frame a
// client sends must be.
void AppendWsFrame(std::string* out, WsOpcode opcode, std::string_view payload, bool fin,
                   const std::optional<std::array<uint8_t, 4>>& mask);

// Takes the first frame of `in` when it is complete: returns it and sets *used to its size on the
// wire; nullopt when more bytes are needed. Invalid, naming the fault, for reserved bits or
// opcodes, a fragmented or oversize (over 125 bytes) control frame, or a payload longer than
// `max_payload`.
Result<std::optional<WsFrame>> TakeWsFrame(std::string_view in, size_t max_payload, size_t* used);

// The Sec-WebSocket-Accept value a server answers to a client's Sec-WebSocket-Key.
std::string WsAcceptKey(std::string_view key);

// A fresh random Sec-WebSocket-Key (16 random bytes, base64).
std::string NewWsKey();

// A close frame's payload: the code (two bytes, network order) and the reason.
std::string WsClosePayload(int code, std::string_view reason);

}  // namespace berth::net
