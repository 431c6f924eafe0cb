#include "agent/watch_mux.h"

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <limits>
#include <optional>
#include <unordered_map>

#include "net/http.h"
#include "net/http_client.h"

namespace berth {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct WatchMux::Impl {
  // One node's stream, alive while an operation of it is pending. Lives on the Run() thread only.
  struct Stream {
    Stream(asio::io_context& io, size_t node) : node(node), socket(io) {}

    size_t node;
    beast::tcp_stream socket;
    beast::flat_buffer buffer;
    http::request<http::empty_body> request;
    std::optional<http::response_parser<http::buffer_body>> parser;
    char piece[16 << 10];
    std::string pending;  // the start of a line whose end has not arrived
    bool closed = false;  // by Open or Stop: its end is not reported
  };

  // One server of the list.
  struct Server {
    std::string host_header;
    std::string base_path;
    tcp::resolver::results_type endpoints;
  };

  Handlers handlers;
  DurationMs idle_timeout_ms;
  std::vector<Server> servers;
  std::string token;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::unordered_map<size_t, std::shared_ptr<Stream>> open;  // on the Run() thread only
  bool stopped = false;                                      // on the Run() thread only

  void Start(size_t node, const std::string& name, const std::string& session, size_t server) {
    if (stopped) return;
    if (auto it = open.find(node); it != open.end()) Close(*it->second);
    const Server& at = servers[server % servers.size()];
    auto s = std::make_shared<Stream>(io, node);
    open[node] = s;
    s->request.method(http::verb::get);
    s->request.target(at.base_path + "/v1/agent/watch?node=" + net::UrlEncode(name) +
                      "&session=" + net::UrlEncode(session));
    s->request.version(11);
    s->request.set(http::field::host, at.host_header);
    s->request.set(http::field::user_agent, "berth");
    if (!token.empty()) s->request.set(http::field::authorization, "Bearer " + token);
    s->parser.emplace();
    s->parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    s->socket.expires_after(std::chrono::milliseconds(idle_timeout_ms));
    s->socket.async_connect(at.endpoints, [this, s](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return End(*s, Status::Unavailable("cannot connect: " + ec.message()));
      s->socket.expires_after(std::chrono::milliseconds(idle_timeout_ms));
      http::async_write(s->socket, s->request, [this, s](beast::error_code ec, size_t) {
        if (ec) return End(*s, Status::Unavailable("sending the watch request: " + ec.message()));
        ReadHeader(s);
      });
    });
  }

  void ReadHeader(const std::shared_ptr<Stream>& s) {
    s->socket.expires_after(std::chrono::milliseconds(idle_timeout_ms));
    http::async_read_header(
        s->socket, s->buffer, *s->parser, [this, s](beast::error_code ec, size_t) {
          if (ec) return End(*s, Status::Unavailable("reading the watch answer: " + ec.message()));
          const unsigned code = s->parser->get().result_int();
          if (code == 409)
            return End(*s, Status::Conflict("unknown agent session; register again"));
          if (code != 200)
            return End(*s, Status::Unavailable(fmt::format("watch answered {}", code)));
          ReadBody(s);
        });
  }

  void ReadBody(const std::shared_ptr<Stream>& s) {
    auto& body = s->parser->get().body();
    body.data = s->piece;
    body.size = sizeof(s->piece);
    s->socket.expires_after(std::chrono::milliseconds(idle_timeout_ms));
    http::async_read_some(s->socket, s->buffer, *s->parser,
                          [this, s](beast::error_code ec, size_t) {
                            if (ec == http::error::need_buffer) ec = {};
                            if (ec)
                              return End(*s, Status::Unavailable("watch stream: " + ec.message()));
                            const size_t got = sizeof(s->piece) - s->parser->get().body().size;
                            if (!Deliver(*s, std::string_view(s->piece, got))) return;
                            if (s->parser->is_done())
                              return End(*s, Status::Unavailable("the server ended the stream"));
                            ReadBody(s);
                          });
  }

  // Hands every whole line to on_message; false when the stream ended meanwhile.
  bool Deliver(Stream& s, std::string_view data) {
    s.pending.append(data);
    size_t start = 0;
    for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      auto message =
          proto::DecodeWatchMessage(std::string_view(s.pending).substr(start, nl - start));
      if (message.ok()) handlers.on_message(s.node, *message);
      if (s.closed) return false;
    }
    s.pending.erase(0, start);
    if (s.pending.size() > kMaxLineBytes) {
      End(s, Status::Unavailable("a watch message over its size limit"));
      return false;
    }
    return true;
  }

  void End(Stream& s, const Status& why) {
    if (s.closed) return;
    Close(s);
    handlers.on_end(s.node, why);
  }

  void Close(Stream& s) {
    s.closed = true;
    beast::error_code ignored;
    s.socket.socket().close(ignored);
    if (auto it = open.find(s.node); it != open.end() && it->second.get() == &s) open.erase(it);
  }
};

Result<std::unique_ptr<WatchMux>> WatchMux::Make(const std::vector<std::string>& server_urls,
                                                 const std::string& token, Handlers handlers,
                                                 DurationMs idle_timeout_ms) {
  if (server_urls.empty()) return Status::Invalid("watch streams: no server URL");
  auto impl = std::make_unique<Impl>();
  impl->handlers = std::move(handlers);
  impl->idle_timeout_ms = idle_timeout_ms;
  impl->token = token;
  tcp::resolver resolver(impl->io);
  for (const std::string& server_url : server_urls) {
    auto url = net::ParseUrl(server_url);
    if (!url.ok()) return url.status();
    if (url->scheme != "http") {
      return Status::Invalid("watch streams on one thread speak http:// only, not " + url->scheme);
    }
    Impl::Server server;
    server.host_header =
        (url->host.find(':') != std::string::npos ? "[" + url->host + "]" : url->host) + ":" +
        std::to_string(url->port);
    server.base_path = url->base_path;
    beast::error_code ec;
    server.endpoints = resolver.resolve(url->host, std::to_string(url->port), ec);
    if (ec) return Status::Unavailable("cannot resolve " + url->host + ": " + ec.message());
    impl->servers.push_back(std::move(server));
  }
  return std::unique_ptr<WatchMux>(new WatchMux(std::move(impl)));
}

WatchMux::WatchMux(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WatchMux::~WatchMux() = default;

void WatchMux::Open(size_t node, const std::string& name, const std::string& session,
                    size_t server) {
  asio::post(impl_->io, [impl = impl_.get(), node, name, session, server] {
    impl->Start(node, name, session, server);
  });
}

void WatchMux::Run() { impl_->io.run(); }

void WatchMux::Stop() {
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->stopped = true;
    while (!impl->open.empty()) impl->Close(*impl->open.begin()->second);
    impl->work.reset();
  });
}

}  // namespace berth
