#include "net/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "net/tls.h"
#include "net/ws_client.h"
#include "net/ws_frames.h"

namespace berth::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  // A dotted IPv4 address in 127.0.0.0/8, and nothing else: "127.0.0.1.attacker.example" is a
  // name that anyone's DNS may point anywhere.
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

Result<Url> ParseUrl(const std::string& url) {
  Url out;
  std::string rest = url;
  size_t sep = rest.find("://");
  if (rest.rfind("unix:", 0) == 0) {
    out.scheme = "unix";
    out.port = 0;
    out.socket_path = rest.substr(5);
    if (out.socket_path.rfind("//", 0) == 0) out.socket_path = out.socket_path.substr(2);
    if (out.socket_path.empty() || out.socket_path[0] != '/') {
      return Status::Invalid("bad server URL '" + url +
                             "': a unix socket URL names an absolute path, as in "
                             "unix:/run/berth/berth.sock");
    }
    if (out.socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return Status::Invalid("bad server URL '" + url + "': the socket path is longer than " +
                             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
    }
    return out;
  }
  if (sep != std::string::npos) {
    out.scheme = rest.substr(0, sep);
    for (auto& c : out.scheme) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    if (out.scheme != "http" && out.scheme != "https") {
      return Status::Invalid("unknown scheme '" + rest.substr(0, sep) + "' in server URL '" + url +
                             "' (expected http://HOST:PORT, https://HOST:PORT or "
                             "unix:/path/to/socket)");
    }
    rest = rest.substr(sep + 3);
  }
  out.port = out.scheme == "https" ? 443 : 80;
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos)
      return Status::Invalid("bad server URL '" + url + "': unclosed '[' in the host");
    out.host = rest.substr(1, close - 1);
    std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Status::Invalid("bad server URL '" + url + "'");
      port_text = after.substr(1);
    }
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos) {
      out.host = rest;
    } else {
      out.host = rest.substr(0, colon);
      port_text = rest.substr(colon + 1);
    }
  }
  if (!port_text.empty()) {
    try {
      size_t used = 0;
      out.port = std::stoi(port_text, &used);
      if (used != port_text.size()) throw std::invalid_argument("trailing characters");
    } catch (...) {
      return Status::Invalid("bad port in server URL '" + url + "'");
    }
  }
  if (out.host.empty() || out.port <= 0 || out.port > 65535) {
    return Status::Invalid("bad server URL '" + url + "' (expected " + out.scheme +
                           "://HOST:PORT)");
  }
  return out;
}

namespace {

// A BIO over a non-blocking socket that sends with MSG_NOSIGNAL: OpenSSL's own socket BIO
// write()s, which raises SIGPIPE when the server has gone, killing a CLI that does not ignore it.
int BioWrite(BIO* bio, const char* data, int len) {
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(bio);
  return static_cast<int>(n);
}

int BioRead(BIO* bio, char* data, int len) {
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = ::recv(fd, data, static_cast<size_t>(len), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(bio);
  return static_cast<int>(n);
}

long BioCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int BioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "berth socket");
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    return m;
  }();
  return method;
}

// One client's connection to the server and its settings; HttpClient::Impl is one.
struct Connection {
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Url url;
  Status url_status;
  HttpClientOptions options;
  std::string pin;               // options.tls_fingerprint, normalized
  bool skip_verify = false;      // FetchServerFingerprint: handshake without any check
  std::string peer_fingerprint;  // of the TLS server's certificate, after a handshake
  int fd = -1;                   // the connection, non-blocking; -1 when none
  SSL_CTX* ssl_ctx = nullptr;    // https: made on first use
  SSL* ssl = nullptr;            // https: the connection's TLS state
  beast::flat_buffer buffer;
  DurationMs timeout_ms = 30'000;
  // Abort() may come from another thread: it reads only these, under abort_mu, and shuts down the
  // connected socket's fd; Close() forgets the fd under the same lock before closing it, so Abort()
  // never touches a closed (or reused) descriptor.
  std::mutex abort_mu;
  int live_fd = -1;      // guarded by abort_mu
  bool aborted = false;  // guarded by abort_mu; sticky

  ~Connection() {
    Close();
    if (ssl_ctx) SSL_CTX_free(ssl_ctx);
  }

  bool Aborted() {
    std::lock_guard lock(abort_mu);
    return aborted;
  }

  std::string Where() const {
    if (url.scheme == "unix") return "unix:" + url.socket_path;
    std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
    return url.scheme + "://" + host + ":" + std::to_string(url.port);
  }

  // Waits until the socket is ready for `events`, at most timeout_ms.
  bool Wait(short events, beast::error_code& ec) {
    pollfd p{fd, events, 0};
    int timeout = static_cast<int>(std::min<DurationMs>(timeout_ms, 24LL * 3600 * 1000));
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

  // Maps a failed SSL_read/SSL_write/SSL_connect to "wait for events" (true) or an error.
  bool SslRetry(int result, beast::error_code& ec) {
    int err = SSL_get_error(ssl, result);
    switch (err) {
      case SSL_ERROR_WANT_READ:
        return Wait(POLLIN, ec);
      case SSL_ERROR_WANT_WRITE:
        return Wait(POLLOUT, ec);
      case SSL_ERROR_ZERO_RETURN:
        ec = asio::error::eof;
        return false;
      case SSL_ERROR_SYSCALL:
        ec = errno != 0 ? beast::error_code(errno, boost::system::system_category())
                        : beast::error_code(asio::error::eof);
        ERR_clear_error();
        return false;
      default: {
        std::string why = OpenSslErrors();
        ec = asio::error::connection_aborted;
        tls_error = why.empty() ? "TLS error" : why;
        return false;
      }
    }
  }
  std::string tls_error;  // the last TLS failure's OpenSSL errors

  size_t ReadSome(void* data, size_t size, beast::error_code& ec) {
    if (size == 0) return 0;
    while (true) {
      if (ssl) {
        errno = 0;
        int n = SSL_read(ssl, data, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
        if (n > 0) return static_cast<size_t>(n);
        // SSL_read hands out what TLS has buffered before it reports WANT_READ, so waiting on
        // the socket here never sleeps on data already decrypted (SSL_pending).
        if (!SslRetry(n, ec)) return 0;
        continue;
      }
      ssize_t n = ::recv(fd, data, size, 0);
      if (n > 0) return static_cast<size_t>(n);
      if (n == 0) {
        ec = asio::error::eof;
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = beast::error_code(errno, boost::system::system_category());
        return 0;
      }
      if (!Wait(POLLIN, ec)) return 0;
    }
  }

  size_t WriteSome(const void* data, size_t size, beast::error_code& ec) {
    if (size == 0) return 0;
    while (true) {
      if (ssl) {
        errno = 0;
        int n = SSL_write(ssl, data, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
        if (n > 0) return static_cast<size_t>(n);
        if (!SslRetry(n, ec)) return 0;
        continue;
      }
      ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = beast::error_code(errno, boost::system::system_category());
        return 0;
      }
      if (!Wait(POLLOUT, ec)) return 0;
    }
  }

  // Connects a non-blocking socket of `family` to `addr`, waiting at most timeout_ms (10 s at
  // most). Returns the fd or -1 with `err` set.
  int ConnectSocket(int family, const sockaddr* addr, socklen_t len, int* err) {
    int s = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
      *err = errno;
      return -1;
    }
    DurationMs wait = std::min<DurationMs>(timeout_ms, 10'000);
    int64_t deadline = MonotonicMs() + wait;
    while (true) {
      if (::connect(s, addr, len) == 0) return s;
      if (errno == EINTR) continue;
      if (errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        int r = ::poll(&p, 1, static_cast<int>(wait));
        socklen_t elen = sizeof(*err);
        if (r <= 0) {
          *err = r == 0 ? ETIMEDOUT : errno;
        } else if (getsockopt(s, SOL_SOCKET, SO_ERROR, err, &elen) != 0) {
          *err = errno;
        }
        if (r > 0 && *err == 0) return s;
        break;
      }
      // A unix socket whose listen backlog is full says EAGAIN: the server is alive but busy.
      if (errno == EAGAIN && family == AF_UNIX && MonotonicMs() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      *err = errno == EAGAIN ? ETIMEDOUT : errno;
      break;
    }
    ::close(s);
    return -1;
  }

  Status Connect() {
    if (Aborted()) return Status::Unavailable("the connection was aborted");
    if (fd >= 0) return Status::Ok();
    buffer.clear();
    int err = 0;
    if (url.scheme == "unix") {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, url.socket_path.data(), url.socket_path.size());
      fd = ConnectSocket(AF_UNIX, reinterpret_cast<sockaddr*>(&addr), sizeof(addr), &err);
    } else {
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = AI_ADDRCONFIG;
      addrinfo* results = nullptr;
      int rc = ::getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &results);
      if (rc == EAI_NONAME || rc == EAI_ADDRFAMILY) {
        hints.ai_flags = 0;  // e.g. "::1" on a host whose only IPv6 address is loopback
        rc = ::getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &results);
      }
      if (rc != 0)
        return Status::Unavailable("cannot resolve " + url.host + ": " + gai_strerror(rc));
      for (addrinfo* ai = results; ai && fd < 0; ai = ai->ai_next) {
        fd = ConnectSocket(ai->ai_family, ai->ai_addr, ai->ai_addrlen, &err);
      }
      ::freeaddrinfo(results);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      }
    }
    if (fd < 0) {
      return Status::Unavailable("cannot connect to berth server at " + Where() + ": " +
                                 std::strerror(err));
    }
    {
      std::lock_guard lock(abort_mu);
      if (aborted) {
        ::close(fd);
        fd = -1;
        return Status::Unavailable("the connection was aborted");
      }
      live_fd = fd;
    }
    if (url.scheme == "https") {
      Status st = StartTls();
      if (!st.ok()) {
        Close();
        return st;
      }
    }
    return Status::Ok();
  }

  Status MakeContext() {
    if (ssl_ctx) return Status::Ok();
    ERR_clear_error();
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return Status::Internal("cannot create a TLS context: " + OpenSslErrors());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    // HTTP frames its messages itself: a peer that closes without close_notify is plain EOF.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_AUTO_RETRY);
    if (pin.empty() && !skip_verify) {
      int ok = options.ca_file.empty()
                   ? SSL_CTX_set_default_verify_paths(ctx)
                   : SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr);
      if (ok != 1) {
        std::string why = OpenSslErrors();
        SSL_CTX_free(ctx);
        return options.ca_file.empty()
                   ? Status::Internal("cannot load the system's CA certificates: " + why)
                   : Status::Invalid("cannot load CA file " + options.ca_file + ": " + why);
      }
    }
    ssl_ctx = ctx;
    return Status::Ok();
  }

  // The TLS handshake on the connected fd, then the certificate checks (see the header).
  Status StartTls() {
    BERTH_RETURN_IF_ERROR(MakeContext());
    ERR_clear_error();
    tls_error.clear();
    ssl = SSL_new(ssl_ctx);
    BIO* bio = ssl ? BIO_new(SocketBioMethod()) : nullptr;
    if (!bio) return Status::Internal("cannot set up TLS: " + OpenSslErrors());
    BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
    SSL_set_bio(ssl, bio, bio);
    bool ip = IsIpLiteral(url.host);
    if (!ip) SSL_set_tlsext_host_name(ssl, url.host.c_str());  // SNI never carries addresses
    bool verify = pin.empty() && !skip_verify;
    if (verify) {
      SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
      int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), url.host.c_str())
                  : SSL_set1_host(ssl, url.host.c_str());
      if (ok != 1) return Status::Internal("cannot set the TLS host check: " + OpenSslErrors());
    } else {
      SSL_set_verify(ssl, SSL_VERIFY_NONE, nullptr);
    }
    while (true) {
      errno = 0;
      int r = SSL_connect(ssl);
      if (r == 1) break;
      beast::error_code ec;
      if (SslRetry(r, ec)) continue;
      if (verify && SSL_get_verify_result(ssl) != X509_V_OK) {
        return Status::Unauthorized(
            "the TLS certificate of " + Where() +
            " is not trusted: " + X509_verify_cert_error_string(SSL_get_verify_result(ssl)) +
            (options.ca_file.empty() ? " (give the CA file, or pin the certificate's fingerprint)"
                                     : " (checked against " + options.ca_file + ")"));
      }
      if (ec == asio::error::timed_out) {
        return Status::Unavailable("the TLS handshake with " + Where() + " took longer than " +
                                   FormatDuration(timeout_ms));
      }
      return Status::Unavailable("the TLS handshake with " + Where() +
                                 " failed: " + (tls_error.empty() ? ec.message() : tls_error) +
                                 " (is it a berth server speaking TLS?)");
    }
    X509* cert = SSL_get_peer_certificate(ssl);
    if (!cert) return Status::Unauthorized(Where() + " presented no TLS certificate");
    unsigned char* der = nullptr;
    int n = i2d_X509(cert, &der);
    X509_free(cert);
    if (n <= 0) return Status::Internal("cannot encode the server's certificate");
    peer_fingerprint = FingerprintOfDer(std::string_view(reinterpret_cast<char*>(der), n));
    OPENSSL_free(der);
    if (!pin.empty() && peer_fingerprint != pin) {
      return Status::Unauthorized(
          "TLS certificate fingerprint mismatch for " + Where() + ": expected " + pin + ", got " +
          peer_fingerprint +
          " (the server's certificate changed, or another machine answers at this address; "
          "check with the server's admin before trusting the new fingerprint)");
    }
    return Status::Ok();
  }

  void Close() {
    {
      std::lock_guard lock(abort_mu);
      live_fd = -1;
    }
    if (ssl) {
      // One try, no waiting: a courtesy close_notify, only after a completed handshake.
      if (fd >= 0 && SSL_is_init_finished(ssl)) SSL_shutdown(ssl);
      SSL_free(ssl);
      ssl = nullptr;
      ERR_clear_error();
    }
    if (fd >= 0) {
      ::shutdown(fd, SHUT_RDWR);
      ::close(fd);
      fd = -1;
    }
    buffer.clear();
  }

  http::request<http::string_body> MakeRequest(const std::string& method, const std::string& target,
                                               const std::string& body,
                                               const HttpHeaders& extra = {}) {
    http::request<http::string_body> req;
    req.method_string(method);
    req.target(url.base_path + target);
    req.version(11);
    if (url.scheme == "unix") {
      req.set(http::field::host, "localhost");
    } else {
      std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
      req.set(http::field::host, host + ":" + std::to_string(url.port));
    }
    req.set(http::field::user_agent, "berth");
    if (!options.token.empty()) req.set(http::field::authorization, "Bearer " + options.token);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : extra) req.set(name, value);
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    return req;
  }
};

// Beast's SyncReadStream/SyncWriteStream over the client's connection (plain or TLS); every wait
// is bounded by the call's timeout.
class TimedStream {
 public:
  explicit TimedStream(Connection& impl) : impl_(impl) {}

  template <class Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    ec = {};
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::mutable_buffer b(*it);
      if (b.size() > 0) return impl_.ReadSome(b.data(), b.size(), ec);
    }
    return 0;
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
    ec = {};
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::const_buffer b(*it);
      if (b.size() > 0) return impl_.WriteSome(b.data(), b.size(), ec);
    }
    return 0;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    size_t n = write_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  Connection& impl_;
};

}  // namespace

struct HttpClient::Impl : Connection {};

HttpClient::HttpClient(std::string base_url, std::string token)
    : HttpClient(std::move(base_url), HttpClientOptions{.token = std::move(token)}) {}

HttpClient::HttpClient(std::string base_url, HttpClientOptions options)
    : base_url_(std::move(base_url)), impl_(std::make_unique<Impl>()) {
  auto url = ParseUrl(base_url_);
  if (url.ok()) {
    impl_->url = *url;
  } else {
    impl_->url_status = url.status();
  }
  if (!options.tls_fingerprint.empty()) {
    impl_->pin = NormalizeFingerprint(options.tls_fingerprint);
    if (impl_->pin.empty() && impl_->url_status.ok()) {
      impl_->url_status = Status::Invalid("bad TLS fingerprint '" + options.tls_fingerprint +
                                          "' (expected sha256: and 64 hex digits)");
    }
  }
  impl_->options = std::move(options);
}

HttpClient::~HttpClient() = default;

namespace {

std::string Wire(const http::request<http::string_body>& req) {
  std::ostringstream out;
  out << req;
  return std::move(out).str();
}

// A parsed response as the callers see it; the body moves out of `msg`.
HttpResponse ToResponse(http::response<http::string_body>& msg) {
  HttpResponse out;
  out.status = static_cast<int>(msg.result_int());
  out.content_type = std::string(msg[http::field::content_type]);
  for (const auto& f : msg)
    out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  out.body = std::move(msg.body());
  return out;
}

}  // namespace

Result<HttpResponse> HttpClient::Request(const std::string& method, const std::string& target,
                                         const std::string& body, DurationMs timeout_ms,
                                         const HttpHeaders& headers) {
  if (!impl_->url_status.ok()) return impl_->url_status;
  impl_->timeout_ms = timeout_ms;
  // Serialized once, and sent with one write: Beast's serializer writes a message in pieces (a
  // system call for each header and the body), and each piece costs the server a wake-up.
  const std::string wire = Wire(impl_->MakeRequest(method, target, body, headers));
  // A kept-alive connection may have been closed by the server meanwhile: retry once on a fresh
  // one, but only if nothing of the response arrived (so a request is never applied twice by our
  // retry... the server may still have applied it; callers that must be exactly-once use idempotent
  // requests). A GET changes nothing, so it is sent again whatever connection broke (a server
  // handing its port over closes connections it has accepted).
  for (int tries = 0; tries < 2; ++tries) {
    const bool resend = impl_->fd >= 0 || method == "GET";
    BERTH_RETURN_IF_ERROR(impl_->Connect());
    TimedStream stream(*impl_);
    beast::error_code ec;
    asio::write(stream, asio::buffer(wire), ec);
    if (ec) {
      impl_->Close();
      if (resend) continue;
      return Status::Unavailable("sending to berth server: " + ec.message());
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ULL << 30);
    http::read(stream, impl_->buffer, parser, ec);
    if (ec) {
      impl_->Close();
      if (resend && (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
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
    HttpResponse out = ToResponse(msg);
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
  TimedStream stream(*impl_);
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

Result<HttpResponse> HttpClient::OpenWebSocket(const std::string& target,
                                               const std::string& subprotocol,
                                               DurationMs timeout_ms,
                                               std::unique_ptr<WebSocketClient>* socket,
                                               size_t max_message_bytes) {
  socket->reset();
  if (!impl_->url_status.ok()) return impl_->url_status;
  impl_->Close();  // a WebSocket gets its own connection
  impl_->timeout_ms = timeout_ms;
  BERTH_RETURN_IF_ERROR(impl_->Connect());
  const std::string key = NewWsKey();
  HttpHeaders headers = {{"Upgrade", "websocket"},
                         {"Connection", "Upgrade"},
                         {"Sec-WebSocket-Key", key},
                         {"Sec-WebSocket-Version", "13"}};
  if (!subprotocol.empty()) headers.emplace_back("Sec-WebSocket-Protocol", subprotocol);
  auto req = impl_->MakeRequest("GET", target, "", headers);
  req.keep_alive(true);
  req.set(http::field::connection, "Upgrade");
  TimedStream stream(*impl_);
  beast::error_code ec;
  asio::write(stream, asio::buffer(Wire(req)), ec);
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  if (!ec) http::read(stream, impl_->buffer, parser, ec);
  if (ec) {
    impl_->Close();
    return Status::Unavailable("opening a WebSocket to berth server: " + ec.message());
  }
  auto msg = parser.release();
  HttpResponse out = ToResponse(msg);
  if (out.status != 101) {
    impl_->Close();
    return out;
  }
  std::string why;
  if (!beast::iequals(msg[http::field::upgrade], "websocket")) {
    why = "it does not upgrade to websocket";
  } else if (msg[http::field::sec_websocket_accept] != WsAcceptKey(key)) {
    why = "its Sec-WebSocket-Accept does not match the key sent";
  } else if (msg[http::field::sec_websocket_protocol] != subprotocol) {
    why = "it speaks subprotocol '" + std::string(msg[http::field::sec_websocket_protocol]) +
          "', not '" + subprotocol + "'";
  }
  if (!why.empty()) {
    impl_->Close();
    return Status::Unavailable("berth server's WebSocket answer is not valid: " + why);
  }
  // The connection leaves the client: forget it without closing it.
  auto received = impl_->buffer.data();
  std::string rest(static_cast<const char*>(received.data()), received.size());
  {
    std::lock_guard lock(impl_->abort_mu);
    impl_->live_fd = -1;
  }
  *socket =
      std::make_unique<WebSocketClient>(impl_->fd, impl_->ssl, std::move(rest), max_message_bytes);
  impl_->fd = -1;
  impl_->ssl = nullptr;
  impl_->buffer.clear();
  return out;
}

void HttpClient::Abort() {
  std::lock_guard lock(impl_->abort_mu);
  impl_->aborted = true;
  if (impl_->live_fd >= 0) ::shutdown(impl_->live_fd, SHUT_RDWR);
}

Result<std::string> FetchServerFingerprint(const std::string& https_url, DurationMs timeout_ms) {
  auto url = ParseUrl(https_url);
  if (!url.ok()) return url.status();
  if (url->scheme != "https")
    return Status::Invalid("'" + https_url + "' is not an https:// URL: no certificate to show");
  Connection impl;
  impl.url = *url;
  impl.skip_verify = true;
  impl.timeout_ms = timeout_ms;
  BERTH_RETURN_IF_ERROR(impl.Connect());
  std::string fingerprint = impl.peer_fingerprint;
  impl.Close();
  return fingerprint;
}

}  // namespace berth::net
