#include "net/http_server.h"

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

#include "common/executor.h"
#include "common/log.h"
#include "common/mutex.h"
#include "net/connection_slots.h"

namespace berth::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;

namespace {

const char* kServerName = "berth";

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

std::string JsonEscape(const std::string& message) {
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

HttpResponse JsonError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = "{\"error\":\"" + JsonEscape(message) + "\"}";
  return r;
}

// True for the ways a peer ends a connection or a deadline closes it: nothing to answer.
bool IsHangupOrTimeout(const beast::error_code& ec) {
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
void RefuseConnection(asio::generic::stream_protocol::socket& socket, bool tls,
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
bool OffersSubprotocol(std::string_view offered, std::string_view protocol) {
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

// One connection. All socket work happens on the connection's worker (HttpServer::Impl), one
// handler at a time; Responder calls from other threads are posted onto it. `Stream` is PlainStream
// or TlsStream; deadlines and closing act on its lowest layer (a beast::basic_stream).
template <class Stream>
class Session : public Closable, public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  template <class... StreamArgs>
  Session(PeerInfo peer, std::shared_ptr<void> slot, const Handler& handler,
          const HttpServerOptions& options, OpenConnections& connections,
          StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...),
        handler_(handler),
        options_(options),
        connections_(connections),
        peer_(std::move(peer)),
        slot_(std::move(slot)) {}

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        self->Handshake();
      } else {
        self->DoRead();
      }
    });
  }

  // --- called through SessionResponder, from any thread ---
  void PostSend(HttpResponse response) {
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this(), r = std::move(response)]() mutable {
                 self->DoSend(std::move(r));
               });
  }
  void PostStartStream(int status, std::string content_type) {
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this(), status, ct = std::move(content_type)] {
                 self->DoStartStream(status, ct);
               });
  }
  bool PostWrite(std::string chunk) {
    if (closed_) return false;
    backlog_ += chunk.size();
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this(), c = std::move(chunk)]() mutable {
                 self->QueueChunk(std::move(c));
               });
    return true;
  }
  void PostEnd() {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->QueueEnd(); });
  }
  void PostAcceptWebSocket(std::string subprotocol,
                           std::function<void(std::shared_ptr<WebSocket>)> on_open) {
    asio::post(stream_.get_executor(), [self = this->shared_from_this(), p = std::move(subprotocol),
                                        on_open = std::move(on_open)]() mutable {
      self->DoAcceptWebSocket(std::move(p), std::move(on_open));
    });
  }
  bool closed() const { return closed_; }
  size_t backlog() const { return backlog_; }
  void CloseStopped() override { Close(); }

 private:
  auto& Lowest() { return beast::get_lowest_layer(stream_); }
  void Deadline(DurationMs ms) { Lowest().expires_after(std::chrono::milliseconds(ms)); }

  void Handshake() {
    if constexpr (kTls) {
      Deadline(options_.header_timeout_ms);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) {
                                  self->DoRead();
                                } else if (ec.category() == asio::error::get_ssl_category() &&
                                           ERR_GET_REASON(ec.value()) == SSL_R_HTTP_REQUEST) {
                                  self->AnswerPlainHttp();
                                } else {
                                  self->Close();
                                }
                              });
    }
  }

  // A plain HTTP request reached the TLS port: tell the client in plain HTTP, which it can read,
  // instead of leaving it with a reset connection.
  void AnswerPlainHttp() {
    std::string body = "{\"error\":\"this port speaks HTTPS only: use an https:// server URL\"}";
    auto text = std::make_shared<std::string>(
        "HTTP/1.1 400 Bad Request\r\nServer: berth\r\nContent-Type: application/json\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    Deadline(kLingerMs);
    asio::async_write(Lowest(), asio::buffer(*text),
                      [self = this->shared_from_this(), text](beast::error_code ec, size_t) {
                        if (ec) {
                          self->Close();
                        } else {
                          self->LingerThenClose();
                        }
                      });
  }

  // Waits for the next request: its first bytes under the idle deadline, then the rest of its
  // headers under the header deadline, then its body under the body deadline.
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    parser_->header_limit(
        static_cast<uint32_t>(std::min<size_t>(options_.max_header_bytes, UINT32_MAX)));
    if (buffer_.size() > 0) {  // the client sent (part of) its next request already
      ReadHeader();
      return;
    }
    Deadline(options_.idle_timeout_ms);
    stream_.async_read_some(buffer_.prepare(kFirstReadBytes),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->buffer_.commit(n);
                              if (ec) {
                                self->Close();
                              } else {
                                self->ReadHeader();
                              }
                            });
  }

  void ReadHeader() {
    Deadline(options_.header_timeout_ms);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      OnReadError(ec);
      return;
    }
    const auto& header = parser_->get();
    if (header.target().size() > options_.max_target_bytes) {
      SendError(414, "request target too long: " + std::to_string(header.target().size()) +
                         " bytes, the limit is " + std::to_string(options_.max_target_bytes) +
                         " bytes (max_target_bytes)");
      return;
    }
    size_t fields = static_cast<size_t>(std::distance(header.begin(), header.end()));
    if (fields > options_.max_header_count) {
      SendError(431, "too many request header fields: " + std::to_string(fields) +
                         ", the limit is " + std::to_string(options_.max_header_count) +
                         " (max_header_count)");
      return;
    }
    if (parser_->is_done()) {
      Dispatch();
      return;
    }
    if (options_.admit && !Admit()) return;
    Deadline(options_.body_timeout_ms);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) {
                         self->OnReadError(ec);
                       } else {
                         self->Dispatch();
                       }
                     });
  }

  // Asks options_.admit about the request whose headers are in: false when it was answered
  // (refused, or its declared body is over the limit admitted), and its body is not to be read.
  bool Admit() {
    HttpRequest head;
    FillHead(parser_->get(), head);
    Admission admission = options_.admit(head);
    if (admission.refuse) {
      keep_alive_ = false;
      linger_ = true;
      responded_ = false;
      DoSend(std::move(*admission.refuse));
      return false;
    }
    const auto declared = parser_->content_length();
    if (declared && *declared > admission.max_body_bytes) {
      SendError(413, "request body too large: " + std::to_string(*declared) +
                         " bytes, the limit for this request is " +
                         std::to_string(admission.max_body_bytes) + " bytes");
      return false;
    }
    parser_->body_limit(admission.max_body_bytes);
    admitted_ = std::move(admission.hold);
    return true;
  }

  // The request line, headers and peer of `msg` into `req` (all but the body).
  template <class Message>
  void FillHead(const Message& msg, HttpRequest& req) const {
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    ParseTarget(req.target, &req.path, &req.query);
    for (const auto& field : msg) {
      std::string name(field.name_string());
      for (auto& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(field.value());
    }
    req.websocket_upgrade = websocket::is_upgrade(msg);
    req.peer = peer_;
    if (peer_.transport != PeerInfo::Transport::kUnix) req.remote_address = peer_.remote_address;
  }

  void OnReadError(beast::error_code ec) {
    if (IsHangupOrTimeout(ec)) {
      Close();
    } else if (ec == http::error::body_limit) {
      SendError(413, "request body too large: the limit is " +
                         std::to_string(options_.max_body_bytes) + " bytes (max_body_bytes)");
    } else if (ec == http::error::header_limit) {
      // The parser keeps an incomplete header in the buffer: a first line longer than a target
      // may be is a 414, anything else a 431.
      auto data = buffer_.data();
      std::string_view head(static_cast<const char*>(data.data()), data.size());
      size_t eol = head.find("\r\n");
      if ((eol == std::string_view::npos ? head.size() : eol) > options_.max_target_bytes + 64) {
        SendError(414, "request line too long: the limit for the request target is " +
                           std::to_string(options_.max_target_bytes) + " bytes (max_target_bytes)");
      } else {
        SendError(431, "request header block too large: the limit is " +
                           std::to_string(options_.max_header_bytes) + " bytes (max_header_bytes)");
      }
    } else {
      SendError(400, "malformed HTTP request: " + ec.message());
    }
  }

  // Answers a request the handler never sees, then closes the connection.
  void SendError(int status, const std::string& message) {
    keep_alive_ = false;
    linger_ = true;
    responded_ = false;
    DoSend(JsonError(status, message));
  }

  void Dispatch() {
    auto msg = parser_->release();
    admitted_.reset();
    keep_alive_ = msg.keep_alive();
    HttpRequest req;
    FillHead(msg, req);
    req.body = std::move(msg.body());
    if (req.websocket_upgrade) upgrade_request_ = std::move(msg);
    // Long polls and streams may take as long as they need.
    Lowest().expires_never();
    responded_ = false;
    streaming_ = false;
    auto responder = std::make_shared<SessionResponder>(this->shared_from_this());
    try {
      handler_(std::move(req), responder);
    } catch (const std::exception& e) {
      LogError("handler threw: {}", e.what());
      if (!responded_) responder->Send(JsonError(500, std::string("internal error: ") + e.what()));
    }
  }

  void DoSend(HttpResponse r) {
    if (responded_ || closed_) return;
    responded_ = true;
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(static_cast<unsigned>(r.status));
    res->set(http::field::server, kServerName);
    if (!r.content_type.empty()) res->set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) {
      // A handler may end the connection after this answer (a follower: docs/ha.md).
      if (beast::iequals(k, "connection") && beast::iequals(v, "close")) keep_alive_ = false;
      res->set(k, v);
    }
    res->keep_alive(keep_alive_);
    res->body() = std::move(r.body);
    res->prepare_payload();
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec) {
                          self->Close();
                        } else if (!self->keep_alive_) {
                          if (self->linger_) {
                            self->LingerThenClose();
                          } else {
                            self->Close();
                          }
                        } else {
                          self->DoRead();
                        }
                      });
  }

  // The connection leaves this session for a WsSession, which Stop() closes from now on; this
  // session is done (closed_, so that it never touches the moved-from stream).
  void DoAcceptWebSocket(std::string subprotocol,
                         std::function<void(std::shared_ptr<WebSocket>)> on_open) {
    if (responded_ || closed_) return;
    std::optional<http::request<http::string_body>> request = std::move(upgrade_request_);
    upgrade_request_.reset();
    if (!request) {
      SendError(400, "this endpoint needs a WebSocket upgrade (Upgrade: websocket)");
      return;
    }
    auto offered = (*request)[http::field::sec_websocket_protocol];
    if (!offered.empty() && !OffersSubprotocol(offered, subprotocol)) {
      SendError(400, "the WebSocket subprotocols offered (" + std::string(offered) +
                         ") do not include " + subprotocol);
      return;
    }
    if (offered.empty()) subprotocol.clear();
    responded_ = true;
    closed_ = true;
    auto ws = std::make_shared<WsSession<Stream>>(std::move(stream_), options_, std::move(slot_));
    connections_.Add(ws);
    ws->Accept(std::move(*request), std::move(subprotocol), std::move(on_open));
  }

  void DoStartStream(int status, const std::string& content_type) {
    if (responded_ || closed_) return;
    responded_ = true;
    streaming_ = true;
    stream_res_ = std::make_shared<http::response<http::empty_body>>();
    stream_res_->version(11);
    stream_res_->result(static_cast<unsigned>(status));
    stream_res_->set(http::field::server, kServerName);
    stream_res_->set(http::field::content_type, content_type);
    stream_res_->set(http::field::cache_control, "no-cache");
    stream_res_->chunked(true);
    stream_sr_ = std::make_shared<http::response_serializer<http::empty_body>>(*stream_res_);
    writing_ = true;
    http::async_write_header(stream_, *stream_sr_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               self->writing_ = false;
                               if (ec) {
                                 self->Close();
                                 return;
                               }
                               self->WatchPeer();
                               self->FlushQueue();
                             });
  }

  // While streaming nothing is expected from the peer; a read that completes means it hung up.
  // (Through the stream, not the raw socket: TLS may read records of its own meanwhile.)
  void WatchPeer() {
    stream_.async_read_some(asio::buffer(peek_),
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) {
                                self->Close();
                              } else {
                                self->WatchPeer();
                              }
                            });
  }

  void QueueChunk(std::string chunk) {
    out_.push_back(std::move(chunk));
    FlushQueue();
  }
  void QueueEnd() {
    end_queued_ = true;
    FlushQueue();
  }

  void FlushQueue() {
    if (writing_ || closed_ || !streaming_) return;
    if (out_.empty()) {
      if (end_queued_) {
        writing_ = true;
        asio::async_write(stream_, http::make_chunk_last(),
                          [self = this->shared_from_this()](beast::error_code, size_t) {
                            self->writing_ = false;
                            self->Close();
                          });
      }
      return;
    }
    // Coalesce what is queued into one chunk: fewer syscalls when a producer writes many small
    // pieces.
    auto data = std::make_shared<std::string>();
    while (!out_.empty()) {
      *data += out_.front();
      out_.pop_front();
    }
    writing_ = true;
    asio::async_write(stream_, http::make_chunk(asio::buffer(*data)),
                      [self = this->shared_from_this(), data](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        self->backlog_ -= std::min(self->backlog_.load(), data->size());
                        if (ec) {
                          self->Close();
                          return;
                        }
                        self->FlushQueue();
                      });
  }

  // After an error response: stop sending, discard what the peer still sends for a little while,
  // then close (see kLingerMs).
  void LingerThenClose() {
    beast::error_code ignored;
    Lowest().socket().shutdown(asio::socket_base::shutdown_send, ignored);
    Deadline(std::min(kLingerMs, options_.header_timeout_ms));
    Drain();
  }
  void Drain() {
    Lowest().async_read_some(asio::buffer(peek_),
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) {
                                 self->Close();
                               } else {
                                 self->Drain();
                               }
                             });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    admitted_.reset();
    beast::error_code ignored;
    Lowest().socket().shutdown(asio::socket_base::shutdown_both, ignored);
    Lowest().socket().close(ignored);
    out_.clear();
  }

  class SessionResponder : public Responder {
   public:
    explicit SessionResponder(std::shared_ptr<Session> s) : session_(std::move(s)) {}
    void Send(HttpResponse response) override { session_->PostSend(std::move(response)); }
    void StartStream(int status, std::string content_type) override {
      session_->PostStartStream(status, std::move(content_type));
    }
    bool Write(std::string chunk) override { return session_->PostWrite(std::move(chunk)); }
    void End() override { session_->PostEnd(); }
    bool closed() const override { return session_->closed(); }
    size_t backlog() const override { return session_->backlog(); }
    void AcceptWebSocket(std::string subprotocol,
                         std::function<void(std::shared_ptr<WebSocket>)> on_open) override {
      session_->PostAcceptWebSocket(std::move(subprotocol), std::move(on_open));
    }

   private:
    std::shared_ptr<Session> session_;
  };

  Stream stream_;
  beast::flat_buffer buffer_;
  const Handler& handler_;
  const HttpServerOptions& options_;
  OpenConnections& connections_;
  const PeerInfo peer_;             // filled at accept
  std::shared_ptr<void> slot_;      // the connection's (ConnectionSlots); a WebSocket takes it over
  std::shared_ptr<void> admitted_;  // Admission::hold of the request whose body is being read
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::request<http::string_body>> upgrade_request_;  // a WebSocket upgrade's
  bool keep_alive_ = true;
  bool linger_ = false;
  bool responded_ = false;
  bool streaming_ = false;
  bool writing_ = false;
  bool end_queued_ = false;
  std::atomic<bool> closed_{false};
  std::atomic<size_t> backlog_{0};
  std::deque<std::string> out_;
  std::shared_ptr<http::response<http::empty_body>> stream_res_;
  std::shared_ptr<http::response_serializer<http::empty_body>> stream_sr_;
  char peek_[512];
};

PeerInfo TcpPeer(const tcp::socket& socket, bool tls) {
  PeerInfo peer;
  peer.transport = tls ? PeerInfo::Transport::kTls : PeerInfo::Transport::kTcp;
  beast::error_code ec;
  auto local_end = socket.local_endpoint(ec);
  if (!ec) {
    peer.local_address = local_end.address().to_string();
    peer.local_port = local_end.port();
  }
  auto remote_end = socket.remote_endpoint(ec);
  if (!ec) {
    peer.remote_address = remote_end.address().to_string();
    peer.remote_port = remote_end.port();
  }
  return peer;
}

// The accepted socket `socket` of `protocol` as a generic stream socket on the same executor (its
// worker's). Not open when the descriptor could not be handed over (the connection is then closed).
template <class Protocol>
asio::generic::stream_protocol::socket AsGeneric(asio::basic_stream_socket<Protocol>& socket,
                                                 asio::generic::stream_protocol protocol) {
  asio::generic::stream_protocol::socket generic(socket.get_executor());
  beast::error_code ec;
  int fd = socket.release(ec);
  if (!ec) {
    generic.assign(protocol, fd, ec);
    if (ec) ::close(fd);
  }
  if (ec) LogWarn("cannot take over an accepted connection: {}", ec.message());
  return generic;
}

PeerInfo UnixPeer(local::socket& socket) {
  PeerInfo peer;
  peer.transport = PeerInfo::Transport::kUnix;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
      len == sizeof(cred)) {
    peer.uid = cred.uid;
    peer.gid = cred.gid;
    peer.pid = cred.pid;
  }
  return peer;
}

// So that a few thousand connections fit: the soft limit is often 1024, the hard one far more.
void RaiseOpenFileLimit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  rlim_t wanted = lim.rlim_max;
  if (wanted == RLIM_INFINITY) {  // the kernel caps it at fs.nr_open
    wanted = 1 << 20;
    if (FILE* f = std::fopen("/proc/sys/fs/nr_open", "r")) {
      unsigned long long n = 0;
      if (std::fscanf(f, "%llu", &n) == 1 && n > 0) wanted = static_cast<rlim_t>(n);
      std::fclose(f);
    }
  }
  lim.rlim_cur = wanted;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    LogWarn("cannot raise the open-file limit to {}: {}", static_cast<uint64_t>(wanted),
            std::strerror(errno));
  }
}

// Grows this process's file-descriptor table to hold `fds` descriptors (fewer when the open-file
// limit is lower) by duplicating one to the highest of them, then closing it. The kernel grows the
// table by doubling, and in a process with several threads each growth waits for an RCU grace
// period (`expand_files` calls `synchronize_rcu`; 10-30 ms, bench/README.md), during which the
// accepting I/O thread is stuck in accept() and the other one waits for it. Grown once at start, a
// thousand agents connecting (or reconnecting after a restart) no longer stall every request at
// each power of two. The table is never shrunk; its cost is ~8.3 bytes of kernel memory per slot.
void ReserveFileTable(size_t fds) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t highest = std::min<rlim_t>(fds, lim.rlim_cur) - 1;
  if (highest <= 0 || highest > INT32_MAX) return;
  int any = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (any < 0) return;
  int high = ::fcntl(any, F_DUPFD_CLOEXEC, static_cast<int>(highest));
  if (high >= 0) ::close(high);
  ::close(any);
}

// Whether a server answers on the unix socket at `path`.
bool UnixSocketIsLive(const std::string& path) {
  // Non-blocking: a unix socket connect() to a full backlog would wait instead of saying EAGAIN.
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ||
              errno == EAGAIN;  // EAGAIN: its backlog is full, so it is alive
  ::close(fd);
  return live;
}

}  // namespace

// One io_context per worker, run by that worker alone (concurrency hint 1), and each connection
// bound to one of them, round robin, when it is accepted: all of a connection's handlers, and
// the completions of its deadlines, run on its worker, one at a time, without a strand. With one
// io_context shared by all workers, every handler one of them queued (a read's, a cancelled
// deadline's, a response posted by an executor thread) could wake another to run it: two workers
// switched ~8.5 times per `berth exec -d` request, 3.5 now (bench/README.md, session 39). Hint 1
// keeps the context's locks (executor threads post to it) and queues what its own worker posts
// without waking anyone. The acceptors and the server's timers (RunAfter, Post) use the first.
struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  // Before the contexts: sessions, destroyed with them, refer to the handler, the options and
  // the TLS context.
  std::optional<ssl::context> tls;                          // set when the TCP listener speaks TLS
  std::vector<std::unique_ptr<asio::io_context>> contexts;  // one per worker, never empty
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // Optional only to be destroyed before the contexts (~Impl); set from construction on.
  std::optional<tcp::acceptor> tcp_acceptor;
  // Its protocol (IPv4 or IPv6), as the generic one its connections are handed to; set at Start.
  asio::generic::stream_protocol tcp_protocol{AF_INET, IPPROTO_TCP};
  std::optional<local::acceptor> unix_acceptor;
  // The unix socket file we created, to remove it on Stop (only if it is still ours).
  dev_t unix_dev = 0;
  ino_t unix_ino = 0;
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};
  int port = 0;
  OpenConnections connections;
  std::shared_ptr<ConnectionSlots> slots;
  std::atomic<int64_t> last_refusal_logged{-1'000'000};  // monotonic ms
  std::atomic<size_t> accepted{0};                       // picks the next connection's context

  Impl(HttpServerOptions o, Handler h)
      : options(std::move(o)),
        handler(std::move(h)),
        contexts(MakeContexts(std::max(1, options.threads))),
        tcp_acceptor(std::in_place, *contexts.front()),
        unix_acceptor(std::in_place, *contexts.front()),
        slots(std::make_shared<ConnectionSlots>(options.max_connections,
                                                options.max_connections_per_peer)) {}

  // Work left queued on the first context (RunAfter's timers) may hold responders of connections
  // on the others, so it is destroyed before them; the acceptors, on it too, before it.
  ~Impl() {
    work.clear();
    tcp_acceptor.reset();
    unix_acceptor.reset();
    for (auto& context : contexts) context.reset();
  }

  static std::vector<std::unique_ptr<asio::io_context>> MakeContexts(int n) {
    std::vector<std::unique_ptr<asio::io_context>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::make_unique<asio::io_context>(1));
    return out;
  }

  asio::io_context& First() { return *contexts.front(); }
  // The context of the next connection accepted.
  asio::io_context& Next() { return *contexts[accepted++ % contexts.size()]; }

  template <class Stream, class... StreamArgs>
  void StartSession(PeerInfo peer, std::shared_ptr<void> slot, StreamArgs&&... stream_args) {
    auto session =
        std::make_shared<Session<Stream>>(std::move(peer), std::move(slot), handler, options,
                                          connections, std::forward<StreamArgs>(stream_args)...);
    connections.Add(session);
    session->Start();
  }

  // A slot for a new connection from `peer`, or null once it was refused (and closed).
  std::shared_ptr<void> TakeSlot(const PeerInfo& peer,
                                 asio::generic::stream_protocol::socket& socket, bool tls) {
    std::string why;
    std::shared_ptr<void> slot = slots->Take(peer, &why);
    if (!slot) {
      // Once a second at most: a flood past the cap must not flood the log too.
      const int64_t now = MonotonicMs();
      int64_t last = last_refusal_logged.load();
      if (now - last >= 1000 && last_refusal_logged.compare_exchange_strong(last, now)) {
        LogWarn(
            "connection from {} refused: {}",
            peer.transport == PeerInfo::Transport::kUnix ? "the unix socket" : peer.remote_address,
            why);
      }
      RefuseConnection(socket, tls, why);
    }
    return slot;
  }

  Status LoadTls() {
    const auto& o = options;
    if (o.tls_cert_file.empty() && o.tls_key_file.empty()) return Status::Ok();
    if (o.tls_cert_file.empty() || o.tls_key_file.empty())
      return Status::Invalid("TLS needs both a certificate file and a key file");
    for (const auto& f : {o.tls_cert_file, o.tls_key_file}) {
      if (::access(f.c_str(), R_OK) != 0)
        return Status::Invalid("cannot read TLS file " + f + ": " + std::strerror(errno));
    }
    tls.emplace(ssl::context::tls_server);
    SSL_CTX* ctx = tls->native_handle();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(
        ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    beast::error_code ec;
    tls->use_certificate_chain_file(o.tls_cert_file, ec);
    if (ec) {
      tls.reset();
      return Status::Invalid("cannot load the TLS certificate " + o.tls_cert_file + ": " +
                             ec.message());
    }
    tls->use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
    if (ec || SSL_CTX_check_private_key(ctx) != 1) {
      std::string why = ec ? ec.message() : "it does not match the certificate";
      ERR_clear_error();
      tls.reset();
      return Status::Invalid("cannot use the TLS key " + o.tls_key_file + " with " +
                             o.tls_cert_file + ": " + why);
    }
    return Status::Ok();
  }

  Status ListenUnix() {
    const std::string& path = options.unix_socket_path;
    if (path.empty()) return Status::Ok();
    if (path.size() >= sizeof(sockaddr_un{}.sun_path))
      return Status::Invalid("unix socket path too long (" + std::to_string(path.size()) +
                             " bytes, at most " +
                             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + "): " + path);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode))
        return Status::Conflict(path + " exists and is not a unix socket; remove it or choose " +
                                "another socket path");
      if (UnixSocketIsLive(path))
        return Status::Conflict("another server is already listening on the unix socket " + path +
                                " (stop it first)");
      ::unlink(path.c_str());  // left behind by a server that died
    }
    beast::error_code ec;
    local::endpoint endpoint(path);
    unix_acceptor->open(endpoint.protocol(), ec);
    if (!ec) unix_acceptor->bind(endpoint, ec);
    if (ec) {
      beast::error_code ignored;
      unix_acceptor->close(ignored);
      return Status::Unavailable("cannot listen on unix socket " + path + ": " + ec.message());
    }
    // Every local user may connect; who they are comes from SO_PEERCRED, not from the mode.
    if (::chmod(path.c_str(), 0666) != 0 || ::stat(path.c_str(), &st) != 0) {
      int err = errno;
      beast::error_code ignored;
      unix_acceptor->close(ignored);
      ::unlink(path.c_str());
      return Status::Unavailable("cannot make unix socket " + path +
                                 " world-connectable: " + std::strerror(err));
    }
    unix_dev = st.st_dev;
    unix_ino = st.st_ino;
    unix_acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      CloseUnix();
      return Status::Unavailable("cannot listen on unix socket " + path + ": " + ec.message());
    }
    return Status::Ok();
  }

  void CloseUnix() {
    if (!unix_acceptor->is_open()) return;
    beast::error_code ignored;
    unix_acceptor->close(ignored);
    struct stat st {};
    const std::string& path = options.unix_socket_path;
    if (::lstat(path.c_str(), &st) == 0 && st.st_dev == unix_dev && st.st_ino == unix_ino)
      ::unlink(path.c_str());
  }

  // An accept that failed for lack of descriptors (or memory) is retried after a pause, not at
  // once: the connection stays queued, so an immediate retry would spin.
  template <class Retry>
  void AcceptFailed(const beast::error_code& ec, Retry retry) {
    LogWarn("accept failed: {}", ec.message());
    auto timer = std::make_shared<asio::steady_timer>(First(), std::chrono::milliseconds(100));
    timer->async_wait([this, timer, retry](beast::error_code wait_ec) {
      if (!wait_ec && !stopped) retry();
    });
  }

  void AcceptTcp() {
    tcp_acceptor->async_accept(Next(), [this](beast::error_code ec, tcp::socket socket) {
      if (stopped || ec == asio::error::operation_aborted) return;
      if (ec) {
        AcceptFailed(ec, [this] { AcceptTcp(); });
        return;
      }
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      PeerInfo peer = TcpPeer(socket, tls.has_value());
      auto generic = AsGeneric(socket, tcp_protocol);
      std::shared_ptr<void> slot;
      if (generic.is_open()) slot = TakeSlot(peer, generic, tls.has_value());
      if (slot && tls) {
        StartSession<TlsStream>(std::move(peer), std::move(slot), std::move(generic), *tls);
      } else if (slot) {
        StartSession<PlainStream>(std::move(peer), std::move(slot), std::move(generic));
      }
      AcceptTcp();
    });
  }

  void AcceptUnix() {
    unix_acceptor->async_accept(Next(), [this](beast::error_code ec, local::socket socket) {
      if (stopped || ec == asio::error::operation_aborted) return;
      if (ec) {
        AcceptFailed(ec, [this] { AcceptUnix(); });
        return;
      }
      PeerInfo peer = UnixPeer(socket);
      auto generic = AsGeneric(socket, asio::generic::stream_protocol(AF_UNIX, 0));
      std::shared_ptr<void> slot;
      if (generic.is_open()) slot = TakeSlot(peer, generic, false);
      if (slot) StartSession<PlainStream>(std::move(peer), std::move(slot), std::move(generic));
      AcceptUnix();
    });
  }
};

// Binds and listens on options.host:options.port.
Status ListenTcp(const HttpServerOptions& options, tcp::acceptor& acc) {
  beast::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) return Status::Invalid("bad listen address '" + options.host + "': " + ec.message());
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    acc.close(ignored);
    return Status::Unavailable("cannot listen on " + options.host + ":" +
                               std::to_string(options.port) + ": " + ec.message());
  }
  return Status::Ok();
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  RaiseOpenFileLimit();
  if (impl_->options.reserve_fds > 0) ReserveFileTable(impl_->options.reserve_fds);
  BERTH_RETURN_IF_ERROR(impl_->LoadTls());
  auto& acc = *impl_->tcp_acceptor;
  if (impl_->options.listen_tcp) {
    BERTH_RETURN_IF_ERROR(ListenTcp(impl_->options, acc));
  } else if (impl_->options.unix_socket_path.empty()) {
    return Status::Invalid("nothing to listen on: no TCP and no unix socket");
  }
  if (Status st = impl_->ListenUnix(); !st.ok()) {
    beast::error_code ignored;
    acc.close(ignored);
    return st;
  }
  if (acc.is_open()) {
    impl_->port = acc.local_endpoint().port();
    impl_->tcp_protocol = asio::generic::stream_protocol(acc.local_endpoint().protocol());
  }
  for (auto& context : impl_->contexts) impl_->work.emplace_back(context->get_executor());
  if (acc.is_open()) impl_->AcceptTcp();
  if (impl_->unix_acceptor->is_open()) impl_->AcceptUnix();
  for (auto& context : impl_->contexts) {
    impl_->threads.emplace_back([context = context.get()] {
      NameThisThread("berth-http");
      while (true) {
        try {
          context->run();
          return;
        } catch (const std::exception& e) {
          LogError("worker caught: {}", e.what());
        }
      }
    });
  }
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

size_t HttpServer::open_connections() const { return impl_->slots->open(); }

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->work.clear();
  for (auto& context : impl_->contexts) context->stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
  // No worker runs any more: the acceptors can be closed from here.
  beast::error_code ignored;
  impl_->tcp_acceptor->close(ignored);
  impl_->CloseUnix();
  // Connections accepted (even ones whose request is not read yet) close now: a client gets an
  // error at once and tries again elsewhere, rather than waiting out its deadline.
  impl_->connections.CloseAll();
}

void HttpServer::Post(std::function<void()> fn) {
  if (impl_->stopped) return;
  asio::post(impl_->First(), std::move(fn));
}

void HttpServer::RunAfter(DurationMs delay, std::function<void()> fn) {
  if (impl_->stopped) return;
  auto timer =
      std::make_shared<asio::steady_timer>(impl_->First(), std::chrono::milliseconds(delay));
  timer->async_wait([timer, fn = std::move(fn)](beast::error_code ec) {
    if (!ec) fn();
  });
}

}  // namespace berth::net
