// The channels of an interactive session, the same on every leg: the node supervisor's
// terminal leg frames them (supervise/terminal.h), and the WebSocket messages between the CLI, the
// server and the agent begin with one of them as a byte (proto::kSessionSubprotocol).
// A value type; thread-safe.
#pragma once

#include <cstdint>

namespace berth {

// The WebSocket subprotocol of interactive sessions, on both of their legs: binary messages whose
// first byte is the channel and whose rest is the payload.
inline constexpr char kSessionSubprotocol[] = "berth.v1";

enum class TermChannel : uint8_t {
  kStdin = 0,    // typing, to the job's terminal
  kOutput = 1,   // what the job printed on it
  kControl = 3,  // JSON: {"resize":[R,C]}, {"signal":N} to the job; {"from":N}, {"exit":C,...},
                 // {"error":"..."} from it
};

}  // namespace berth
