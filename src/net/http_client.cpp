#include "net/http_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <optional>

namespace berth::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Result<Url> ParseUrl(const std::string& url) {
  std::string rest = url;
  const std::string scheme = "http://";
  if (rest.rfind("https://", 0) == 0) {
    return Status::Invalid("https is not supported by berth's client: '" + url +
                           "' (use http:// behind a TLS proxy)");
  }
  if (rest.rfind(scheme, 0) == 0) rest = rest.substr(scheme.size());
  Url out;
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    out.host = rest;
    out.port = 80;
  } else {
    out.host = rest.substr(0, colon);
    try {
      out.port = std::stoi(rest.substr(colon + 1));
    } catch (...) {
      return Status::Invalid("bad port in server URL '" + url + "'");
    }
  }
  if (out.host.empty() || out.port <= 0 || out.port > 65535) {
    return Status::Invalid("bad server URL '" + url + "' (expected http://HOST:PORT)");
  }
  return out;
}

namespace {

// A SyncReadStream/SyncWriteStream over a connected socket that gives up after a timeout, so that a
// server that stops answering makes a call fail instead of hanging (asio's blocking reads ignore
// SO_RCVTIMEO).
class TimedSocket {
 public:
  using executor_type = tcp::socket::executor_type;
  TimedSocket(tcp::socket& socket, DurationMs* timeout_ms)
      : socket_(socket), timeout_ms_(timeout_ms) {}
  executor_type get_executor() { return socket_.get_executor(); }

  template <class Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    if (!Wait(POLLIN, ec)) return 0;
    return socket_.read_some(buffers, ec);
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    if (!Wait(POLLOUT, ec)) return 0;
    return socket_.write_some(buffers, ec);
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    size_t n = write_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  bool Wait(short events, beast::error_code& ec) {
    pollfd p{socket_.native_handle(), events, 0};
    int timeout = static_cast<int>(std::min<DurationMs>(*timeout_ms_, 24LL * 3600 * 1000));
    int r;
    do {
      r = ::poll(&p, 1, timeout);
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
      ec = asio::error::timed_out;
      return false;
    }
    if (r < 0) {
      ec = beast::error_code(errno, boost::system::system_category());
      return false;
    }
    return true;
  }
  tcp::socket& socket_;
  DurationMs* timeout_ms_;
};

}  // namespace

struct HttpClient::Impl {
  Url url;
  Status url_status;
  std::string token;
  asio::io_context ioc;
  std::optional<tcp::socket> socket;
  beast::flat_buffer buffer;
  DurationMs timeout_ms = 30'000;
  // Abort() may come from another thread: it reads only these, under abort_mu, and shuts down the
  // connected socket's fd; Close() forgets the fd under the same lock before closing it, so Abort()
  // never touches a closed (or reused) descriptor.
  std::mutex abort_mu;
  int live_fd = -1;      // guarded by abort_mu
  bool aborted = false;  // guarded by abort_mu; sticky

  bool Aborted() {
    std::lock_guard lock(abort_mu);
    return aborted;
  }

  Status Connect() {
    if (Aborted()) return Status::Unavailable("the connection was aborted");
    if (socket && socket->is_open()) return Status::Ok();
    buffer.clear();
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
    if (ec) return Status::Unavailable("cannot resolve " + url.host + ": " + ec.message());
    for (const auto& entry : results) {
      socket.emplace(ioc);
      socket->open(entry.endpoint().protocol(), ec);
      if (ec) continue;
      // Connect without blocking forever on an unroutable address.
      socket->non_blocking(true, ec);
      socket->connect(entry.endpoint(), ec);
      if (ec == asio::error::would_block || ec == asio::error::in_progress) {
        pollfd p{socket->native_handle(), POLLOUT, 0};
        int r = ::poll(&p, 1, static_cast<int>(std::min<DurationMs>(timeout_ms, 10'000)));
        int err = 0;
        socklen_t len = sizeof(err);
        if (r <= 0) {
          ec = asio::error::timed_out;
        } else if (getsockopt(socket->native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
                   err != 0) {
          ec = beast::error_code(err, boost::system::system_category());
        } else {
          ec = {};
        }
      }
      if (!ec) {
        socket->non_blocking(false, ec);
        socket->set_option(tcp::no_delay(true), ec);
        std::lock_guard lock(abort_mu);
        if (aborted) return Status::Unavailable("the connection was aborted");
        live_fd = socket->native_handle();
        return Status::Ok();
      }
      socket.reset();
    }
    return Status::Unavailable("cannot connect to berth server at http://" + url.host + ":" +
                               std::to_string(url.port) + ": " + ec.message());
  }

  void Close() {
    {
      std::lock_guard lock(abort_mu);
      live_fd = -1;
    }
    if (socket) {
      beast::error_code ignored;
      socket->shutdown(tcp::socket::shutdown_both, ignored);
      socket->close(ignored);
      socket.reset();
    }
    buffer.clear();
  }

  http::request<http::string_body> MakeRequest(const std::string& method, const std::string& target,
                                               const std::string& body) {
    http::request<http::string_body> req;
    req.method_string(method);
    req.target(url.base_path + target);
    req.version(11);
    req.set(http::field::host, url.host + ":" + std::to_string(url.port));
    req.set(http::field::user_agent, "berth");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    return req;
  }
};

HttpClient::HttpClient(std::string base_url, std::string token)
    : base_url_(std::move(base_url)), impl_(std::make_unique<Impl>()) {
  auto url = ParseUrl(base_url_);
  if (url.ok()) {
    impl_->url = *url;
  } else {
    impl_->url_status = url.status();
  }
  impl_->token = std::move(token);
}

HttpClient::~HttpClient() = default;

Result<HttpResponse> HttpClient::Request(const std::string& method, const std::string& target,
                                         const std::string& body, DurationMs timeout_ms) {
  if (!impl_->url_status.ok()) return impl_->url_status;
  impl_->timeout_ms = timeout_ms;
  auto req = impl_->MakeRequest(method, target, body);
  // A kept-alive connection may have been closed by the server meanwhile: retry once on a fresh
  // one, but only if nothing of the response arrived (so a request is never applied twice by our
  // retry... the server may still have applied it; callers that must be exactly-once use idempotent
  // requests).
  for (int tries = 0; tries < 2; ++tries) {
    bool reused = impl_->socket.has_value();
    BERTH_RETURN_IF_ERROR(impl_->Connect());
    TimedSocket stream(*impl_->socket, &impl_->timeout_ms);
    beast::error_code ec;
    http::write(stream, req, ec);
    if (ec) {
      impl_->Close();
      if (reused) continue;
      return Status::Unavailable("sending to berth server: " + ec.message());
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ULL << 30);
    http::read(stream, impl_->buffer, parser, ec);
    if (ec) {
      impl_->Close();
      if (reused && (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
                     ec == asio::error::eof)) {
        continue;
      }
      if (ec == asio::error::timed_out) {
        return Status::Unavailable("berth server did not answer " + method + " " + target +
                                   " within " + FormatDuration(timeout_ms));
      }
      return Status::Unavailable("reading from berth server: " + ec.message());
    }
    auto msg = parser.release();
    HttpResponse out;
    out.status = static_cast<int>(msg.result_int());
    out.content_type = std::string(msg[http::field::content_type]);
    for (const auto& f : msg)
      out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    out.body = std::move(msg.body());
    if (!msg.keep_alive()) impl_->Close();
    return out;
  }
  return Status::Unavailable("berth server closed the connection");
}

Status HttpClient::Stream(const std::string& method, const std::string& target,
                          const std::string& body, DurationMs idle_timeout_ms,
                          const std::function<bool(std::string_view)>& on_data, int* status_code) {
  if (!impl_->url_status.ok()) return impl_->url_status;
  impl_->Close();  // a stream gets its own connection
  impl_->timeout_ms = idle_timeout_ms;
  BERTH_RETURN_IF_ERROR(impl_->Connect());
  TimedSocket stream(*impl_->socket, &impl_->timeout_ms);
  auto req = impl_->MakeRequest(method, target, body);
  beast::error_code ec;
  http::write(stream, req, ec);
  if (ec) {
    impl_->Close();
    return Status::Unavailable("sending to berth server: " + ec.message());
  }
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  http::read_header(stream, impl_->buffer, parser, ec);
  if (ec) {
    impl_->Close();
    return Status::Unavailable("reading from berth server: " + ec.message());
  }
  if (status_code) *status_code = static_cast<int>(parser.get().result_int());
  char buf[16384];
  while (!parser.is_done()) {
    parser.get().body().data = buf;
    parser.get().body().size = sizeof(buf);
    // read_some returns as soon as some body arrived; read() would wait to fill the whole buffer.
    http::read_some(stream, impl_->buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      impl_->Close();
      if (ec == asio::error::timed_out)
        return Status::Unavailable("berth server stream went silent");
      return Status::Unavailable("berth server stream ended: " + ec.message());
    }
    size_t n = sizeof(buf) - parser.get().body().size;
    if (n > 0 && !on_data(std::string_view(buf, n))) {
      impl_->Close();
      return Status::Ok();
    }
  }
  impl_->Close();
  return Status::Ok();
}

void HttpClient::Abort() {
  std::lock_guard lock(impl_->abort_mu);
  impl_->aborted = true;
  if (impl_->live_fd >= 0) ::shutdown(impl_->live_fd, SHUT_RDWR);
}

}  // namespace berth::net
