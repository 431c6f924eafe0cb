// LoopbackPeerUid: the kernel names the owner of the client end of a loopback TCP connection.
// Each test connects to a real server on loopback and asks, from inside the handler (while the
// connection is open), who is on the other end.
#include "net/peer_identity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <future>
#include <mutex>
#include <thread>

#include "net/http_client.h"
#include "net/http_server.h"
#include "net_testing.h"

namespace berth::net {
namespace {

using testing::RawSocket;

// A server whose handler answers with LoopbackPeerUid of the request's sender ("uid=N" or
// "error=...") and keeps the last PeerInfo it saw.
class PeerUidServer {
 public:
  explicit PeerUidServer(const std::string& host) {
    HttpServerOptions o;
    o.host = host;
    server_ =
        std::make_unique<HttpServer>(o, [this](HttpRequest&& req, std::shared_ptr<Responder> res) {
          {
            std::lock_guard lock(mu_);
            last_peer_ = req.peer;
          }
          auto uid = LoopbackPeerUid(req.peer);
          HttpResponse r;
          r.body = uid.ok() ? "uid=" + std::to_string(*uid) : "error=" + uid.status().message();
          res->Send(std::move(r));
        });
  }
  Status Start() { return server_->Start(); }
  int port() const { return server_->port(); }
  PeerInfo last_peer() {
    std::lock_guard lock(mu_);
    return last_peer_;
  }

 private:
  std::unique_ptr<HttpServer> server_;
  std::mutex mu_;
  PeerInfo last_peer_;
};

TEST(LoopbackPeerUid, Ipv4ClientIsThisProcessesUser) {
  PeerUidServer server("127.0.0.1");
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  auto res = client.Request("GET", "/who");
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(res->body, "uid=" + std::to_string(::getuid()));
}

TEST(LoopbackPeerUid, Ipv6ClientIsThisProcessesUser) {
  PeerUidServer server("::1");
  Status st = server.Start();
  if (!st.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << st.message();
  HttpClient client("http://[::1]:" + std::to_string(server.port()), "");
  auto res = client.Request("GET", "/who");
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(res->body, "uid=" + std::to_string(::getuid()));
}

// A dual-stack server ("::") sees an IPv4 client as ::ffff:127.0.0.1.
TEST(LoopbackPeerUid, Ipv4MappedClientOfADualStackServer) {
  PeerUidServer server("::");
  Status st = server.Start();
  if (!st.ok()) GTEST_SKIP() << "cannot listen on [::]: " << st.message();
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  auto res = client.Request("GET", "/who");
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(server.last_peer().remote_address, "::ffff:127.0.0.1");
  EXPECT_EQ(res->body, "uid=" + std::to_string(::getuid()));
}

// As root: a child that drops to uid 65534 connects over TCP, and the server sees 65534.
TEST(LoopbackPeerUid, AnotherUsersClientIsSeenAsThatUser) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  PeerUidServer server("127.0.0.1");
  ASSERT_TRUE(server.Start().ok());
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(pipefd[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    RawSocket s = RawSocket::Tcp("127.0.0.1", server.port());
    if (!s.ok() || !s.Send("GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) ::_exit(3);
    auto r = s.ReadUntilClosed(5'000);
    (void)!::write(pipefd[1], r.data.data(), r.data.size());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << status;
  EXPECT_NE(out.find("\r\n\r\nuid=65534"), std::string::npos) << out;
}

// A client that closed first leaves its socket in TIME_WAIT, which the kernel reports with uid 0:
// the lookup must fail then instead of naming root.
TEST(LoopbackPeerUid, ClosedClientIsNotFoundRatherThanRoot) {
  PeerUidServer server("127.0.0.1");
  ASSERT_TRUE(server.Start().ok());
  {
    RawSocket s = RawSocket::Tcp("127.0.0.1", server.port());
    ASSERT_TRUE(s.Send("GET /who HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_NE(s.ReadUntil("uid=", 5'000).find("uid="), std::string::npos);
  }  // the client closes first; the server closes on EOF; the client's end goes to TIME_WAIT
  PeerInfo peer = server.last_peer();
  Result<uint32_t> uid = Status::Unavailable("not asked yet");
  for (int i = 0; i < 40; ++i) {  // FIN_WAIT2 still has its owner; wait for TIME_WAIT
    uid = LoopbackPeerUid(peer);
    if (!uid.ok()) break;
    EXPECT_EQ(*uid, ::getuid());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(uid.ok()) << "a closed connection was attributed to uid " << *uid;
  EXPECT_EQ(uid.status().code(), Code::kNotFound) << uid.status().message();
  std::printf("closed client: %s\n", uid.status().message().c_str());
}

TEST(LoopbackPeerUid, RefusesNonLoopbackAndUnixPeers) {
  PeerInfo remote;
  remote.remote_address = "10.1.2.3";
  remote.remote_port = 40000;
  remote.local_address = "10.1.2.4";
  remote.local_port = 8080;
  auto r = LoopbackPeerUid(remote);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not come from a loopback address"), std::string::npos)
      << r.status().message();

  PeerInfo unix_peer;
  unix_peer.transport = PeerInfo::Transport::kUnix;
  EXPECT_EQ(LoopbackPeerUid(unix_peer).status().code(), Code::kInvalidArgument);

  PeerInfo garbage;
  garbage.remote_address = "not-an-address";
  EXPECT_EQ(LoopbackPeerUid(garbage).status().code(), Code::kInvalidArgument);
}

TEST(LoopbackPeerUid, UnknownConnectionIsNotFound) {
  PeerInfo peer;
  peer.remote_address = "127.0.0.1";
  peer.remote_port = 1;  // nobody connects from port 1
  peer.local_address = "127.0.0.1";
  peer.local_port = 2;
  auto r = LoopbackPeerUid(peer);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().message();
}

}  // namespace
}  // namespace berth::net
