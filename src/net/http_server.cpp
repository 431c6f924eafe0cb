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
#include "net/http_session.h"

namespace berth::net {

// The connection parts (http_ws_session.h, http_session.h) are this file's own, split out for
// their length: their names, and Boost's namespace aliases, are used as if declared here.
using namespace http_internal;  // NOLINT(build/namespaces)

namespace {

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
