// The HTTP server's connection parts, part 2 (net/http_server.cpp's internals; include nowhere
// else): Session, one HTTP connection — reading requests, admitting bodies, answering, streaming,
// and upgrading to a WebSocket (net/http_ws_session.h).
//
// Thread-safety: all socket work happens on the connection's worker; Responder calls from other
// threads are posted onto it.
#pragma once

#include "net/http_ws_session.h"

namespace berth::net::http_internal {

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

}  // namespace berth::net::http_internal
