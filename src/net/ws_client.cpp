#include "net/ws_client.h"

#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include "net/tls.h"
#include "net/ws_frames.h"

namespace berth::net {

namespace {
// At most this much is read in one Pump, so that a fast sender cannot keep a loop from its other
// sockets.
constexpr size_t kReadPerPump = 256 << 10;
}  // namespace

WebSocketClient::WebSocketClient(int fd, ssl_st* ssl, std::string received,
                                 size_t max_message_bytes)
    : fd_(fd), ssl_(ssl), max_message_bytes_(max_message_bytes), in_(std::move(received)) {
  // Queued bytes live in a string that grows while a TLS record waits to be sent.
  if (ssl_) SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
}

WebSocketClient::~WebSocketClient() {
  if (ssl_) SSL_free(ssl_);
  if (fd_ >= 0) ::close(fd_);
}

short WebSocketClient::events() const {
  if (closed_) return 0;
  short e = 0;
  if ((!eof_ && message_bytes_ < max_message_bytes_) || tls_wants_read_) e |= POLLIN;
  if (unsent() > 0 || tls_wants_write_) e |= POLLOUT;
  return e;
}

void WebSocketClient::Queue(WsOpcode opcode, std::string_view payload) {
  std::array<uint8_t, 4> mask{};
  RAND_bytes(mask.data(), static_cast<int>(mask.size()));
  AppendWsFrame(&out_, opcode, payload, true, mask);
}

void WebSocketClient::Send(std::string_view message) {
  if (closed_ || close_sent_) return;
  Queue(WsOpcode::kBinary, message);
}

void WebSocketClient::Close(int code, std::string_view reason) {
  if (closed_ || close_sent_) return;
  Queue(WsOpcode::kClose, WsClosePayload(code, reason));
  close_sent_ = true;
}

void WebSocketClient::Fail(int code) {
  closed_ = true;
  if (close_code_ == 0) close_code_ = code;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status WebSocketClient::WriteQueued() {
  tls_wants_read_ = false;
  while (out_pos_ < out_.size()) {
    const char* data = out_.data() + out_pos_;
    const size_t len = out_.size() - out_pos_;
    if (ssl_) {
      ERR_clear_error();
      int r = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(len, INT_MAX)));
      if (r > 0) {
        out_pos_ += static_cast<size_t>(r);
        continue;
      }
      int err = SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_WANT_WRITE) break;
      if (err == SSL_ERROR_WANT_READ) {
        tls_wants_read_ = true;
        break;
      }
      std::string why = OpenSslErrors();
      Fail(1006);
      return Status::Unavailable("sending on the WebSocket: " +
                                 (why.empty() ? std::string(std::strerror(errno)) : why));
    }
    ssize_t n = ::send(fd_, data, len, MSG_NOSIGNAL);
    if (n >= 0) {
      out_pos_ += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    int err = errno;
    Fail(1006);
    return Status::Unavailable(std::string("sending on the WebSocket: ") + std::strerror(err));
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  } else if (out_pos_ >= (1 << 20)) {
    out_.erase(0, out_pos_);  // the unsent bytes stay the same, only their address moves
    out_pos_ = 0;
  }
  return Status::Ok();
}

Status WebSocketClient::ReadAvailable() {
  tls_wants_write_ = false;
  char buf[16384];
  size_t total = 0;
  while (total < kReadPerPump) {
    ssize_t n;
    if (ssl_) {
      ERR_clear_error();
      int r = SSL_read(ssl_, buf, sizeof(buf));
      if (r <= 0) {
        int err = SSL_get_error(ssl_, r);
        if (err == SSL_ERROR_WANT_READ) break;
        if (err == SSL_ERROR_WANT_WRITE) {
          tls_wants_write_ = true;
          break;
        }
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && errno == 0)) {
          eof_ = true;
          break;
        }
        std::string why = OpenSslErrors();
        Fail(1006);
        return Status::Unavailable("reading the WebSocket: " +
                                   (why.empty() ? std::string(std::strerror(errno)) : why));
      }
      n = r;
    } else {
      n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) {
        eof_ = true;
        break;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        int err = errno;
        Fail(1006);
        return Status::Unavailable(std::string("reading the WebSocket: ") + std::strerror(err));
      }
    }
    in_.append(buf, static_cast<size_t>(n));
    total += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WebSocketClient::Decode() {
  while (!peer_closed_) {
    size_t used = 0;
    auto frame = TakeWsFrame(std::string_view(in_).substr(in_pos_), max_message_bytes_, &used);
    if (!frame.ok()) return frame.status();
    if (!*frame) break;
    in_pos_ += used;
    WsFrame& f = **frame;
    switch (f.opcode) {
      case WsOpcode::kPing:
        if (!close_sent_) Queue(WsOpcode::kPong, f.payload);
        break;
      case WsOpcode::kPong:
        break;
      case WsOpcode::kClose: {
        peer_closed_ = true;
        int code = 1005;  // "no status received"
        if (f.payload.size() >= 2) {
          code = (static_cast<uint8_t>(f.payload[0]) << 8) | static_cast<uint8_t>(f.payload[1]);
          close_reason_ = f.payload.substr(2);
        }
        close_code_ = code;
        if (!close_sent_) {
          Queue(WsOpcode::kClose, code == 1005 ? std::string() : WsClosePayload(code, ""));
          close_sent_ = true;
        }
        break;
      }
      case WsOpcode::kText:
      case WsOpcode::kBinary:
        if (in_fragmented_) return Status::Invalid("a WebSocket message began inside another");
        if (f.fin) {
          message_bytes_ += f.payload.size();
          messages_.push_back(std::move(f.payload));
        } else {
          partial_ = std::move(f.payload);
          in_fragmented_ = true;
        }
        break;
      case WsOpcode::kContinuation:
        if (!in_fragmented_)
          return Status::Invalid("a WebSocket continuation frame with no message");
        if (partial_.size() + f.payload.size() > max_message_bytes_) {
          return Status::TooLarge("a WebSocket message over the limit of " +
                                  std::to_string(max_message_bytes_) + " bytes");
        }
        partial_ += f.payload;
        if (f.fin) {
          in_fragmented_ = false;
          message_bytes_ += partial_.size();
          messages_.push_back(std::move(partial_));
          partial_.clear();
        }
        break;
    }
  }
  if (in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
  } else if (in_pos_ >= (64 << 10)) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
  return Status::Ok();
}

Status WebSocketClient::Pump() {
  if (closed_) return Status::Ok();
  BERTH_RETURN_IF_ERROR(WriteQueued());
  if ((!eof_ && message_bytes_ < max_message_bytes_) || tls_wants_read_) {
    BERTH_RETURN_IF_ERROR(ReadAvailable());
  }
  if (Status decoded = Decode(); !decoded.ok()) {
    const int code = decoded.code() == Code::kTooLarge ? 1009 : 1002;
    if (!close_sent_) {
      Queue(WsOpcode::kClose, WsClosePayload(code, decoded.message()));
      close_sent_ = true;
      (void)WriteQueued();
    }
    Fail(code);
    return decoded;
  }
  BERTH_RETURN_IF_ERROR(WriteQueued());  // pongs, the reply to a close
  if (peer_closed_ && unsent() == 0) {
    closed_ = true;  // the closing handshake is done; the server closes the TCP connection
  } else if (eof_) {
    Fail(1006);
    return Status::Unavailable("the WebSocket connection ended without a closing handshake");
  }
  return Status::Ok();
}

std::optional<std::string> WebSocketClient::TakeMessage() {
  if (messages_.empty()) return std::nullopt;
  std::string m = std::move(messages_.front());
  messages_.pop_front();
  message_bytes_ -= m.size();
  return m;
}

Status WebSocketClient::WaitReady(int64_t deadline) {
  while (true) {
    int64_t left = deadline - MonotonicMs();
    if (left <= 0) return Status::Unavailable("the WebSocket peer did not answer in time");
    pollfd p{fd_, events(), 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR) {
      return Status::Unavailable(std::string("waiting on the WebSocket: ") + std::strerror(errno));
    }
  }
}

Result<std::optional<std::string>> WebSocketClient::Receive(DurationMs timeout_ms) {
  const int64_t deadline = MonotonicMs() + timeout_ms;
  while (true) {
    BERTH_RETURN_IF_ERROR(Pump());
    if (auto m = TakeMessage()) return std::optional<std::string>(std::move(*m));
    if (closed_) return std::optional<std::string>();
    BERTH_RETURN_IF_ERROR(WaitReady(deadline));
  }
}

Status WebSocketClient::Flush(DurationMs timeout_ms) {
  const int64_t deadline = MonotonicMs() + timeout_ms;
  while (true) {
    BERTH_RETURN_IF_ERROR(Pump());
    if (unsent() == 0 || closed_) return Status::Ok();
    BERTH_RETURN_IF_ERROR(WaitReady(deadline));
  }
}

Status WebSocketClient::CloseAndWait(int code, std::string_view reason, DurationMs timeout_ms) {
  Close(code, reason);
  const int64_t deadline = MonotonicMs() + timeout_ms;
  while (true) {
    BERTH_RETURN_IF_ERROR(Pump());
    while (TakeMessage()) {
    }
    if (closed_) return Status::Ok();
    BERTH_RETURN_IF_ERROR(WaitReady(deadline));
  }
}

}  // namespace berth::net
