// Helpers for the net tests: a temp directory, raw sockets that misbehave on purpose (half a
// header, one byte a second), and a server whose handler describes each request's sender.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "net/http.h"
#include "net/http_server.h"

namespace berth::net::testing {

// A fresh directory under /tmp, removed with everything in it on destruction. Short, so that a
// unix socket path inside it fits in sun_path.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/berth-net-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A connected blocking socket, closed on destruction.
class RawSocket {
 public:
  RawSocket() = default;
  explicit RawSocket(int fd) : fd_(fd) {}
  ~RawSocket() { Close(); }
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawSocket& operator=(RawSocket&& o) noexcept {
    Close();
    fd_ = o.fd_;
    o.fd_ = -1;
    return *this;
  }
  int fd() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  static RawSocket Tcp(const std::string& host, int port) {
    sockaddr_storage ss{};
    socklen_t len;
    int family;
    if (host.find(':') != std::string::npos) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = family = AF_INET6;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET6, host.c_str(), &a->sin6_addr);
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = family = AF_INET;
      a->sin_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET, host.c_str(), &a->sin_addr);
      len = sizeof(*a);
    }
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return RawSocket();
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      ::close(fd);
      return RawSocket();
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return RawSocket(fd);
  }

  static RawSocket Unix(const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      if (fd >= 0) ::close(fd);
      return RawSocket();
    }
    return RawSocket(fd);
  }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  struct ReadResult {
    std::string data;
    bool closed = false;     // the server closed (EOF or reset) within the timeout
    int64_t elapsed_ms = 0;  // until it closed, or the timeout
  };
  // Reads everything until the server closes the connection or `timeout_ms` passes.
  ReadResult ReadUntilClosed(DurationMs timeout_ms) {
    ReadResult r;
    int64_t start = MonotonicMs();
    while (true) {
      int64_t left = start + timeout_ms - MonotonicMs();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        r.closed = true;
        break;
      }
      r.data.append(buf, static_cast<size_t>(n));
    }
    r.elapsed_ms = MonotonicMs() - start;
    return r;
  }

  // Reads until `needle` has arrived (or the timeout): for one response on a kept-alive
  // connection.
  std::string ReadUntil(std::string_view needle, DurationMs timeout_ms) {
    std::string data;
    int64_t deadline = MonotonicMs() + timeout_ms;
    while (data.find(needle) == std::string::npos) {
      int64_t left = deadline - MonotonicMs();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      data.append(buf, static_cast<size_t>(n));
    }
    return data;
  }

 private:
  int fd_ = -1;
};

// The status code of the first response in `data` ("HTTP/1.1 431 ..."), or 0.
inline int StatusOf(const std::string& data) {
  if (data.rfind("HTTP/1.1 ", 0) != 0 || data.size() < 12) return 0;
  return std::atoi(data.substr(9, 3).c_str());
}

// Describes a request's sender as "transport=unix uid=0 gid=0 pid=12 remote=:0 local=:0".
inline std::string DescribePeer(const PeerInfo& p) {
  const char* t = p.transport == PeerInfo::Transport::kUnix  ? "unix"
                  : p.transport == PeerInfo::Transport::kTls ? "tls"
                                                             : "tcp";
  return std::string("transport=") + t + " uid=" + (p.uid ? std::to_string(*p.uid) : "-") +
         " gid=" + (p.gid ? std::to_string(*p.gid) : "-") + " pid=" + std::to_string(p.pid) +
         " remote=" + p.remote_address + ":" + std::to_string(p.remote_port) +
         " local=" + p.local_address + ":" + std::to_string(p.local_port);
}

// A handler that answers every request with 200 and DescribePeer of its sender, and "/echo" with
// the request body.
inline Handler DescribingHandler() {
  return [](HttpRequest&& req, std::shared_ptr<Responder> res) {
    HttpResponse r;
    r.content_type = "text/plain";
    r.body = req.path == "/echo" ? req.body : DescribePeer(req.peer);
    res->Send(std::move(r));
  };
}

}  // namespace berth::net::testing
