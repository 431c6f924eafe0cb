// WebSocketClient: the client end of a WebSocket (RFC 6455) that HttpClient::OpenWebSocket opened,
// made to be pumped from a poll loop: a CLI relaying a terminal, an agent relaying a job's pty.
// Binary messages; the frames it sends are masked, as a client's must be; it answers pings and
// the closing handshake by itself. Over plain TCP, a unix socket or TLS (the connection, with its
// checked certificate, is the HttpClient's, handed over).
//
// Flow control: Pump reads only while fewer than `max_message_bytes` bytes of messages wait to be
// taken (TakeMessage), and a caller that stops taking them stops reading the socket, so that the
// server's sends block instead of anything buffering without bound. What Send queues is the
// caller's to bound (unsent()).
//
// Not thread-safe: one thread owns a client.
#pragma once

#include <poll.h>

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "net/ws_frames.h"

struct ssl_st;

namespace berth::net {

class WebSocketClient {
 public:
  // Takes over a connected non-blocking socket `fd`, and its TLS state `ssl` (or null), on which
  // the opening handshake is done; `received` is what arrived after the 101 response.
  WebSocketClient(int fd, ssl_st* ssl, std::string received, size_t max_message_bytes);
  ~WebSocketClient();  // closes the socket at once (Close first for a closing handshake)
  WebSocketClient(const WebSocketClient&) = delete;
  WebSocketClient& operator=(const WebSocketClient&) = delete;

  int fd() const { return fd_; }
  // What to poll fd() for: POLLIN while the client reads, POLLOUT while bytes wait to be sent.
  short events() const;

  // Queues one binary message.
  void Send(std::string_view message);
  // Queues the closing handshake: `code` 1000 is a normal close, 4000-4999 the application's.
  // Nothing may be sent after it.
  void Close(int code, std::string_view reason = "");

  // Does what the socket allows without blocking: sends what is queued, reads what arrived and
  // decodes it into messages (TakeMessage). Unavailable when the connection failed (closed() is
  // then true); Invalid when the server broke the protocol (the connection is closed with 1002).
  Status Pump();
  // The oldest message received and not yet taken.
  std::optional<std::string> TakeMessage();

  // No more messages will come: the closing handshake is done, or the connection ended.
  bool closed() const { return closed_; }
  // The code in the server's close frame; 1006 when the connection ended without one; 0 while
  // open.
  int close_code() const { return close_code_; }
  const std::string& close_reason() const { return close_reason_; }
  size_t unsent() const { return out_.size() - out_pos_; }

  // Blocking conveniences. Receive waits for the next message (nullopt once closed), Flush until
  // everything queued is sent; each gives up with Unavailable after `timeout_ms`.
  Result<std::optional<std::string>> Receive(DurationMs timeout_ms);
  Status Flush(DurationMs timeout_ms);
  // Close(code, reason), then waits for the peer's close (messages that come meanwhile are
  // dropped), at most `timeout_ms`: closing the socket before the peer has read everything would
  // reset the connection, and a reset makes the peer drop what it had not yet read.
  Status CloseAndWait(int code, std::string_view reason, DurationMs timeout_ms);

 private:
  Status WriteQueued();
  Status ReadAvailable();
  Status Decode();
  void Queue(WsOpcode opcode, std::string_view payload);
  void Fail(int code);
  Status WaitReady(int64_t deadline);

  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
  const size_t max_message_bytes_;
  std::string in_;
  size_t in_pos_ = 0;
  std::string out_;
  size_t out_pos_ = 0;
  std::string partial_;  // a fragmented message's parts so far
  bool in_fragmented_ = false;
  std::deque<std::string> messages_;
  size_t message_bytes_ = 0;  // in messages_
  bool close_sent_ = false;
  bool peer_closed_ = false;  // its close frame arrived
  bool eof_ = false;
  bool closed_ = false;
  bool tls_wants_write_ = false;  // TLS must write before it can read on
  bool tls_wants_read_ = false;   // TLS must read before it can write on
  int close_code_ = 0;
  std::string close_reason_;
};

}  // namespace berth::net
