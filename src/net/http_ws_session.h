// The HTTP server's connection parts, part 1 (net/http_server.cpp's internals; include nowhere
// else): the streams a connection is served on, JSON errors, the registry of open connections that
// Stop closes, and WsSession, a connection after its upgrade to a WebSocket. Part 2 is
// net/http_session.h (Session, one HTTP connection).
//
// Thread-safety: as each class says; all socket work of a connection runs on its worker.
#pragma once

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/clock.h"
#include "common/executor.h"
#include "common/log.h"
#include "common/mutex.h"
#include "net/connection_slots.h"
#include "net/http_server.h"

namespace berth::net::http_internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;

inline constexpr char kServerName[] = "berth";

// The two kinds of connection; one Session template serves both. A plain one is a TCP or a unix
// socket behind one type (asio's generic stream protocol: the accepted descriptor is handed over),
// so that Beast's HTTP and WebSocket code is compiled twice for this file rather than three times.
using PlainStream = beast::basic_stream<asio::generic::stream_protocol>;
using TlsStream = beast::ssl_stream<PlainStream>;

// How much a connection waiting for its next request reads at once.
constexpr size_t kFirstReadBytes = 4096;
// How long a connection we are closing after an error response may keep sending (what it sends is
// discarded), so that closing with unread data does not reset the connection before the peer has
// read the response.
constexpr DurationMs kLingerMs = 2'000;

inline std::string JsonEscape(const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') {
      escaped += '\\';
      escaped += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      escaped += ' ';
    } else {
      escaped += c;
    }
  }
  return escaped;
}

inline HttpResponse JsonError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = "{\"error\":\"" + JsonEscape(message) + "\"}";
  return r;
}

// True for the ways a peer ends a connection or a deadline closes it: nothing to answer.
inline bool IsHangupOrTimeout(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == asio::error::operation_aborted || ec == beast::error::timeout ||
         ec == asio::error::connection_reset || ec == asio::error::eof ||
         ec == asio::error::broken_pipe || ec == asio::error::bad_descriptor ||
         ec == ssl::error::stream_truncated;
}

// What Stop() needs of a connection: to close it once no worker runs.
class Closable {
 public:
  virtual ~Closable() = default;
  // Only with no worker running (Stop, after joining them).
  virtual void CloseStopped() = 0;
};

// The connections a server accepted, so that Stop() closes them rather than leaving them open,
// unread, in a stopped io_context until the server object is destroyed (a client would wait for
// its deadline). Weak references: a connection that ended is pruned, amortised, on Add.
//
// Thread-safety: Add from the accepting workers, CloseAll from Stop; one internal mutex.
class OpenConnections {
 public:
  void Add(std::weak_ptr<Closable> connection) {
    MutexLock lock(mu_);
    if (connections_.size() >= prune_at_) {
      std::erase_if(connections_, [](const auto& c) { return c.expired(); });
      prune_at_ = std::max<size_t>(64, connections_.size() * 2);
    }
    connections_.push_back(std::move(connection));
  }
  void CloseAll() {
    MutexLock lock(mu_);
    for (const auto& weak : connections_) {
      if (std::shared_ptr<Closable> c = weak.lock()) c->CloseStopped();
    }
    connections_.clear();
  }

 private:
  Mutex mu_;
  std::vector<std::weak_ptr<Closable>> connections_ GUARDED_BY(mu_);
  size_t prune_at_ GUARDED_BY(mu_) = 64;
};

// Answers a connection refused at accept with 503 and closes it (a TLS one is only closed: it
// could not read a plain answer). A fresh socket's send buffer is empty, so the write does not
// wait.
inline void RefuseConnection(asio::generic::stream_protocol::socket& socket, bool tls,
                             const std::string& why) {
  beast::error_code ignored;
  if (!tls) {
    const std::string body = "{\"error\":\"" + JsonEscape(why) + "\"}";
    const std::string text =
        "HTTP/1.1 503 Service Unavailable\r\nServer: berth\r\nContent-Type: "
        "application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::write(socket, asio::buffer(text), ignored);
  }
  socket.shutdown(asio::socket_base::shutdown_both, ignored);
  socket.close(ignored);
}

// Whether a comma-separated Sec-WebSocket-Protocol list names `protocol`.
inline bool OffersSubprotocol(std::string_view offered, std::string_view protocol) {
  while (!offered.empty()) {
    size_t comma = offered.find(',');
    std::string_view item = offered.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item == protocol) return true;
    if (comma == std::string_view::npos) break;
    offered.remove_prefix(comma + 1);
  }
  return false;
}

// A connection after its upgrade to a WebSocket (net::WebSocket). Like Session, all socket work
// happens on the connection's worker (HttpServer::Impl). Beast allows one read and one write at a
// time: reads are one at a time by contract, writes queue, and the closing handshake waits for the
// queue to empty. The waiting Read and the queued Writes are recorded when they are called (under
// mu_), not when their posted work runs, so that a close (or Stop, which runs no more posted work)
// always answers them.
template <class Stream>
class WsSession : public Closable,
                  public WebSocket,
                  public std::enable_shared_from_this<WsSession<Stream>> {
 public:
  WsSession(Stream&& stream, const HttpServerOptions& options, std::shared_ptr<void> slot)
      : options_(options), slot_(std::move(slot)) {
    ws_.emplace(std::move(stream));
    MutexLock lock(mu_);
    executor_ = ws_->get_executor();
  }

  // Completes the handshake for `request` and, once it is done, calls on_open.
  void Accept(http::request<http::string_body> request, std::string subprotocol,
              std::function<void(std::shared_ptr<WebSocket>)> on_open) {
    websocket::stream_base::timeout timeouts{};
    timeouts.handshake_timeout = std::chrono::milliseconds(options_.header_timeout_ms);
    timeouts.idle_timeout = std::chrono::milliseconds(options_.websocket_idle_ms);
    timeouts.keep_alive_pings = true;
    ws_->set_option(timeouts);
    ws_->set_option(
        websocket::stream_base::decorator([subprotocol](websocket::response_type& response) {
          response.set(http::field::server, kServerName);
          if (!subprotocol.empty()) response.set(http::field::sec_websocket_protocol, subprotocol);
        }));
    ws_->read_message_max(options_.max_websocket_message_bytes);
    ws_->binary(true);
    auto req = std::make_shared<http::request<http::string_body>>(std::move(request));
    ws_->async_accept(*req, [self = this->shared_from_this(), req,
                             on_open = std::move(on_open)](beast::error_code ec) {
      if (ec) {
        self->Fail(false);
        return;
      }
      on_open(self);
    });
  }

  // --- WebSocket, from any thread ---
  void Read(std::function<void(std::optional<std::string>)> done) override {
    {
      MutexLock lock(mu_);
      if (!closed_ && !reader_) {
        reader_ = std::move(done);
        done = nullptr;
        asio::post(executor_, [self = this->shared_from_this()] { self->DoRead(); });
      }
    }
    if (done) done(std::nullopt);  // closed, or a Read already waits
  }
  void Write(std::string message, std::function<void(bool)> done) override {
    {
      MutexLock lock(mu_);
      if (!closed_) {
        backlog_ += message.size();
        queue_.push_back({std::move(message), std::move(done)});
        done = nullptr;
        asio::post(executor_, [self = this->shared_from_this()] { self->Flush(); });
      }
    }
    if (done) done(false);
  }
  void Close(int code, std::string reason) override {
    if (reason.size() > 123) reason.resize(123);
    MutexLock lock(mu_);
    if (closed_) return;
    asio::post(executor_, [self = this->shared_from_this(), code, r = std::move(reason)] {
      if (self->closed_ || self->close_requested_) return;
      self->close_requested_ = true;
      self->close_reason_.code = static_cast<uint16_t>(code);
      self->close_reason_.reason = r;
      self->Flush();
    });
  }
  bool closed() const override { return closed_; }
  int close_code() const override { return close_code_; }
  std::string close_reason() const override {
    MutexLock lock(mu_);
    return peer_reason_;
  }
  size_t backlog() const override { return backlog_; }

  // With no worker running (Stop): closes the socket, answers the waiting callbacks, and lets go
  // of the stream, which must not outlive the server's io_context (an owner may keep this object
  // longer: every later call is then answered at once).
  void CloseStopped() override {
    Fail(true);
    ws_.reset();
    MutexLock lock(mu_);
    executor_ = {};
  }

 private:
  struct Outgoing {
    std::string message;
    std::function<void(bool)> done;
  };

  std::function<void(std::optional<std::string>)> TakeReader() {
    MutexLock lock(mu_);
    return std::exchange(reader_, nullptr);
  }

  void DoRead() {
    if (reading_ || closed_) return;
    {
      MutexLock lock(mu_);
      if (!reader_) return;
    }
    reading_ = true;
    ws_->async_read(in_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->reading_ = false;
      if (ec) {
        self->NoteClose();
        self->Fail(false);  // answers the reader
        return;
      }
      std::string message = beast::buffers_to_string(self->in_.data());
      self->in_.consume(self->in_.size());
      if (auto reader = self->TakeReader()) reader(std::move(message));
    });
  }

  void Flush() {
    if (writing_ || closed_) return;
    {
      MutexLock lock(mu_);
      if (!queue_.empty()) {
        in_flight_ = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (!in_flight_) {
      if (close_requested_ && !close_sent_) {
        close_sent_ = true;
        writing_ = true;
        close_code_ = close_reason_.code;
        ws_->async_close(close_reason_, [self = this->shared_from_this()](beast::error_code) {
          self->writing_ = false;
          self->Fail(false);
        });
      }
      return;
    }
    writing_ = true;
    ws_->async_write(asio::buffer(in_flight_->message),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       Outgoing sent = std::move(*self->in_flight_);
                       self->in_flight_.reset();
                       self->backlog_ -= std::min(self->backlog_.load(), sent.message.size());
                       if (ec) {
                         self->NoteClose();
                         self->Fail(false);
                       }
                       if (sent.done) sent.done(!ec);
                       if (!ec) self->Flush();
                     });
  }

  // The code the peer closed with, if it did.
  void NoteClose() {
    if (close_code_ == 0 && ws_->reason().code != websocket::close_code::none) {
      close_code_ = ws_->reason().code;
      MutexLock lock(mu_);
      peer_reason_ = std::string(ws_->reason().reason.data(), ws_->reason().reason.size());
    }
  }

  // The connection is over: the socket closes, every queued write fails and a waiting read ends.
  // A write in flight is answered by its completion, or here when `stopped` (no completion will
  // run; its buffer is no longer used). Idempotent.
  void Fail(bool stopped) {
    std::deque<Outgoing> failed;
    std::function<void(std::optional<std::string>)> reader;
    {
      MutexLock lock(mu_);
      if (!closed_.exchange(true)) {
        beast::error_code ignored;
        beast::get_lowest_layer(*ws_).socket().close(ignored);
      }
      failed.swap(queue_);
      reader = std::exchange(reader_, nullptr);
    }
    if (stopped && in_flight_) {
      failed.push_front(std::move(*in_flight_));
      in_flight_.reset();
    }
    backlog_ = 0;
    for (auto& f : failed) {
      if (f.done) f.done(false);
    }
    if (reader) reader(std::nullopt);
  }

  std::optional<websocket::stream<Stream>> ws_;  // reset by CloseStopped
  const HttpServerOptions& options_;
  const std::shared_ptr<void> slot_;  // the connection's (ConnectionSlots), until this ends
  mutable Mutex mu_;
  asio::any_io_executor executor_ GUARDED_BY(mu_);  // the connection's worker's
  std::function<void(std::optional<std::string>)> reader_ GUARDED_BY(mu_);  // the Read waiting
  std::deque<Outgoing> queue_ GUARDED_BY(mu_);
  // The rest only on the worker (or in CloseStopped, when no worker runs).
  beast::flat_buffer in_;
  std::optional<Outgoing> in_flight_;  // being written
  bool reading_ = false;
  bool writing_ = false;
  bool close_requested_ = false;
  bool close_sent_ = false;
  websocket::close_reason close_reason_;
  std::atomic<bool> closed_{false};  // set under mu_
  std::atomic<int> close_code_{0};
  std::string peer_reason_ GUARDED_BY(mu_);
  std::atomic<size_t> backlog_{0};
};

}  // namespace berth::net::http_internal
