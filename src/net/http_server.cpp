#include "net/http_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"

namespace berth::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

const char* kServerName = "berth";

HttpResponse JsonError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  r.body = "{\"error\":\"" + escaped + "\"}";
  return r;
}

// One connection. All socket work happens on the session's strand; Responder calls from other
// threads are posted onto it.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const Handler& handler, const HttpServerOptions& options)
      : stream_(std::move(socket)), handler_(handler), options_(options) {}

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }

  // --- called through SessionResponder, from any thread ---
  void PostSend(HttpResponse response) {
    asio::post(stream_.get_executor(),
               [self = shared_from_this(), r = std::move(response)]() mutable {
                 self->DoSend(std::move(r));
               });
  }
  void PostStartStream(int status, std::string content_type) {
    asio::post(stream_.get_executor(),
               [self = shared_from_this(), status, ct = std::move(content_type)] {
                 self->DoStartStream(status, ct);
               });
  }
  bool PostWrite(std::string chunk) {
    if (closed_) return false;
    backlog_ += chunk.size();
    asio::post(stream_.get_executor(), [self = shared_from_this(), c = std::move(chunk)]() mutable {
      self->QueueChunk(std::move(c));
    });
    return true;
  }
  void PostEnd() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->QueueEnd(); });
  }
  bool closed() const { return closed_; }
  size_t backlog() const { return backlog_; }

 private:
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    parser_->header_limit(64 * 1024);
    buffer_.consume(buffer_.size() > 0 ? 0 : 0);
    stream_.expires_after(std::chrono::milliseconds(options_.idle_timeout_ms));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted ||
        ec == beast::error::timeout || ec == asio::error::connection_reset ||
        ec == asio::error::eof) {
      Close();
      return;
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      DoSend(JsonError(413, "request body too large (limit " +
                                std::to_string(options_.max_body_bytes) + " bytes)"));
      return;
    }
    if (ec) {
      keep_alive_ = false;
      DoSend(JsonError(400, "malformed HTTP request: " + ec.message()));
      return;
    }
    auto msg = parser_->release();
    keep_alive_ = msg.keep_alive();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    ParseTarget(req.target, &req.path, &req.query);
    for (const auto& field : msg) {
      std::string name(field.name_string());
      for (auto& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(field.value());
    }
    req.body = std::move(msg.body());
    beast::error_code ignored;
    auto endpoint = stream_.socket().remote_endpoint(ignored);
    if (!ignored) req.remote_address = endpoint.address().to_string();
    stream_.expires_never();
    responded_ = false;
    auto responder = std::make_shared<SessionResponder>(shared_from_this());
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
    res->set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->body() = std::move(r.body);
    res->prepare_payload();
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || !self->keep_alive_) {
                          self->Close();
                          return;
                        }
                        self->DoRead();
                      });
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
                             [self = shared_from_this()](beast::error_code ec, size_t) {
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
  void WatchPeer() {
    stream_.socket().async_read_some(asio::buffer(peek_),
                                     [self = shared_from_this()](beast::error_code ec, size_t) {
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
                          [self = shared_from_this()](beast::error_code, size_t) {
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
                      [self = shared_from_this(), data](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        self->backlog_ -= std::min(self->backlog_.load(), data->size());
                        if (ec) {
                          self->Close();
                          return;
                        }
                        self->FlushQueue();
                      });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
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

   private:
    std::shared_ptr<Session> session_;
  };

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  const Handler& handler_;
  const HttpServerOptions& options_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
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

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};
  int port = 0;

  void Accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (stopped) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session>(std::move(socket), handler, options)->Start();
      } else if (ec == asio::error::operation_aborted) {
        return;
      } else {
        LogWarn("accept failed: {}", ec.message());
      }
      Accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  beast::error_code ec;
  auto address = asio::ip::make_address(impl_->options.host, ec);
  if (ec)
    return Status::Invalid("bad listen address '" + impl_->options.host + "': " + ec.message());
  tcp::endpoint endpoint(address, static_cast<unsigned short>(impl_->options.port));
  auto& acc = impl_->acceptor;
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("cannot listen on " + impl_->options.host + ":" +
                               std::to_string(impl_->options.port) + ": " + ec.message());
  }
  impl_->port = acc.local_endpoint().port();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->Accept();
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) {
    impl_->threads.emplace_back([this] {
      while (true) {
        try {
          impl_->ioc.run();
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

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  asio::post(impl_->ioc, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

void HttpServer::Post(std::function<void()> fn) {
  if (impl_->stopped) return;
  asio::post(impl_->ioc, std::move(fn));
}

void HttpServer::RunAfter(DurationMs delay, std::function<void()> fn) {
  if (impl_->stopped) return;
  auto timer = std::make_shared<asio::steady_timer>(impl_->ioc, std::chrono::milliseconds(delay));
  timer->async_wait([timer, fn = std::move(fn)](beast::error_code ec) {
    if (!ec) fn();
  });
}

}  // namespace berth::net
