// WebSockets: the framing the client writes and reads (net/ws_frames.h), and the server's upgrade
// (Responder::AcceptWebSocket) with berth's client (HttpClient::OpenWebSocket, WebSocketClient)
// over plain TCP, TLS and a unix socket: echoes, big messages both ways at once, the limits,
// closing from either side, pings, and Stop().
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "net/http_client.h"
#include "net/http_server.h"
#include "net/tls.h"
#include "net/ws_client.h"
#include "net/ws_frames.h"
#include "net/ws_stream.h"
#include "net_testing.h"

namespace berth::net {
namespace {

using testing::TempDir;

TEST(WsFrames, RoundTripAtEachLengthEncoding) {
  const std::array<uint8_t, 4> key{0x12, 0x34, 0x56, 0x78};
  for (size_t n : {size_t{0}, size_t{1}, size_t{125}, size_t{126}, size_t{65535}, size_t{65536},
                   size_t{200000}}) {
    for (bool masked : {false, true}) {
      std::string payload(n, '\0');
      for (size_t i = 0; i < n; ++i) payload[i] = static_cast<char>(i * 7);
      std::string wire;
      AppendWsFrame(&wire, WsOpcode::kBinary, payload, true,
                    masked ? std::optional(key) : std::nullopt);
      wire += "next";
      size_t used = 0;
      // Every proper prefix is "not yet".
      for (size_t cut : {size_t{0}, size_t{1}, wire.size() - 5}) {
        auto partial = TakeWsFrame(std::string_view(wire).substr(0, cut), 1 << 20, &used);
        ASSERT_TRUE(partial.ok());
        EXPECT_FALSE(partial->has_value()) << n << " bytes, cut at " << cut;
      }
      auto frame = TakeWsFrame(wire, 1 << 20, &used);
      ASSERT_TRUE(frame.ok() && frame->has_value()) << n;
      EXPECT_EQ(used, wire.size() - 4) << n;
      EXPECT_TRUE((*frame)->fin);
      EXPECT_EQ((*frame)->opcode, WsOpcode::kBinary);
      EXPECT_EQ((*frame)->payload, payload) << n << (masked ? " masked" : "");
    }
  }
}

TEST(WsFrames, RejectsWhatTheProtocolForbids) {
  size_t used = 0;
  std::string reserved_bits("\xC2\x00", 2);  // RSV1 set
  EXPECT_FALSE(TakeWsFrame(reserved_bits, 100, &used).ok());
  std::string reserved_op("\x83\x00", 2);
  EXPECT_FALSE(TakeWsFrame(reserved_op, 100, &used).ok());
  std::string long_ping;
  AppendWsFrame(&long_ping, WsOpcode::kPing, std::string(126, 'x'), true, std::nullopt);
  EXPECT_FALSE(TakeWsFrame(long_ping, 1000, &used).ok());
  std::string fragmented_close;
  AppendWsFrame(&fragmented_close, WsOpcode::kClose, "", false, std::nullopt);
  EXPECT_FALSE(TakeWsFrame(fragmented_close, 1000, &used).ok());
  std::string big;
  AppendWsFrame(&big, WsOpcode::kBinary, std::string(101, 'x'), true, std::nullopt);
  auto too_big = TakeWsFrame(big, 100, &used);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), Code::kTooLarge);
  // Only the header is needed to refuse a length: a 2^62-byte claim is refused at once.
  std::string huge = "\x82\x7F";
  huge += std::string("\x40\x00\x00\x00\x00\x00\x00\x00", 8);
  EXPECT_FALSE(TakeWsFrame(huge, 100, &used).ok());
}

TEST(WsFrames, AcceptKeyIsRfc6455s) {
  // RFC 6455, section 1.3.
  EXPECT_EQ(WsAcceptKey("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  EXPECT_EQ(NewWsKey().size(), 24u);
  EXPECT_NE(NewWsKey(), NewWsKey());
}

// What the server side of the tests saw.
struct ServerSide {
  std::mutex mu;
  std::vector<std::shared_ptr<WebSocket>> sockets;
  std::atomic<int> ended{0};  // echo loops whose Read got nullopt
  std::promise<void> first_end;
  std::atomic<bool> first_end_set{false};
};

// Echoes each message back, reading the next only once the echo is written (a relay's flow).
void Echo(const std::shared_ptr<WebSocket>& ws, ServerSide* side) {
  ws->Read([ws, side](std::optional<std::string> m) {
    if (!m) {
      if (!side->first_end_set.exchange(true)) side->first_end.set_value();
      ++side->ended;
      return;
    }
    if (*m == "close-4001") {
      ws->Close(4001, "bye");
      Echo(ws, side);
      return;
    }
    ws->Write(std::move(*m), [ws, side](bool ok) {
      if (ok) Echo(ws, side);
    });
  });
}

// /echo: a WebSocket speaking "berth.v1" that echoes; /plain: an ordinary JSON answer.
Handler EchoHandler(ServerSide* side) {
  return [side](HttpRequest&& req, std::shared_ptr<Responder> responder) {
    if (req.path == "/echo") {
      responder->AcceptWebSocket("berth.v1", [side](std::shared_ptr<WebSocket> ws) {
        {
          std::lock_guard lock(side->mu);
          side->sockets.push_back(ws);
        }
        Echo(ws, side);
      });
      return;
    }
    HttpResponse r;
    r.status = 404;
    r.body = R"({"error":"no such thing"})";
    responder->Send(std::move(r));
  };
}

std::unique_ptr<WebSocketClient> Open(HttpClient& client, const std::string& target = "/echo",
                                      const std::string& protocol = "berth.v1",
                                      size_t max = 16 << 20) {
  std::unique_ptr<WebSocketClient> ws;
  auto res = client.OpenWebSocket(target, protocol, 5'000, &ws, max);
  EXPECT_TRUE(res.ok()) << res.status().message();
  if (res.ok()) {
    EXPECT_EQ(res->status, 101) << res->body;
  }
  return ws;
}

// Sends `count` messages of `size` bytes and reads their echoes, both at once from one poll loop
// (as a terminal relay does); true when every echo came back whole and in order.
bool Duplex(WebSocketClient& ws, int count, size_t size) {
  int sent = 0, received = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (received < count && std::chrono::steady_clock::now() < deadline) {
    while (sent < count && ws.unsent() < (256 << 10)) {
      ws.Send(std::string(size, static_cast<char>('a' + sent % 26)));
      ++sent;
    }
    pollfd p{ws.fd(), ws.events(), 0};
    ::poll(&p, 1, 1000);
    Status st = ws.Pump();
    if (!st.ok()) {
      ADD_FAILURE() << st.message();
      return false;
    }
    while (auto m = ws.TakeMessage()) {
      if (*m != std::string(size, static_cast<char>('a' + received % 26))) {
        ADD_FAILURE() << "echo " << received << " differs";
        return false;
      }
      ++received;
    }
  }
  return received == count;
}

void EchoesAndCloses(HttpClient& client) {
  auto ws = Open(client);
  ASSERT_TRUE(ws);
  ws->Send("hello");
  auto m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ(**m, "hello");
  ws->Send("");
  m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok() && m->has_value());
  EXPECT_EQ(**m, "");
  EXPECT_TRUE(Duplex(*ws, 200, 64 << 10)) << "12.5 MiB echoed both ways at once";
  ws->Close(1000, "done");
  m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_FALSE(m->has_value());
  EXPECT_TRUE(ws->closed());
  EXPECT_EQ(ws->close_code(), 1000);
}

TEST(WebSocket, EchoesAndClosesOverTcp) {
  ServerSide side;
  HttpServerOptions o;
  o.threads = 2;
  HttpServer server(o, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  EchoesAndCloses(client);
  // The server's loop saw the close.
  ASSERT_EQ(side.first_end.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  // The client goes on with plain requests on a connection of its own.
  auto plain = client.Request("GET", "/plain");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->status, 404);
}

TEST(WebSocket, EchoesAndClosesOverAUnixSocket) {
  ServerSide side;
  TempDir dir;
  HttpServerOptions o;
  o.listen_tcp = false;
  o.unix_socket_path = dir.File("s.sock");
  HttpServer server(o, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("unix:" + o.unix_socket_path, "");
  EchoesAndCloses(client);
}

TEST(WebSocket, EchoesAndClosesOverTls) {
  ServerSide side;
  TempDir dir;
  const std::string cert = dir.File("cert.pem"), key = dir.File("key.pem");
  ASSERT_TRUE(EnsureSelfSignedCertificate(cert, key, {"127.0.0.1"}).ok());
  auto fingerprint = CertificateFingerprint(cert);
  ASSERT_TRUE(fingerprint.ok());
  HttpServerOptions o;
  o.threads = 2;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  HttpServer server(o, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClientOptions co;
  co.tls_fingerprint = *fingerprint;
  HttpClient client("https://127.0.0.1:" + std::to_string(server.port()), co);
  EchoesAndCloses(client);
}

TEST(WebSocket, RefusalsAreAnswersTheClientCanRead) {
  ServerSide side;
  HttpServer server(HttpServerOptions{}, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  std::unique_ptr<WebSocketClient> ws;
  // A route that does not upgrade answers as ever.
  auto res = client.OpenWebSocket("/plain", "berth.v1", 5'000, &ws);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 404);
  EXPECT_FALSE(ws);
  // Another subprotocol: 400, naming the one spoken.
  res = client.OpenWebSocket("/echo", "other.v9", 5'000, &ws);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("berth.v1"), std::string::npos) << res->body;
  EXPECT_FALSE(ws);
  // A plain GET of a WebSocket route: 400, saying an upgrade is needed.
  auto plain = client.Request("GET", "/echo");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->status, 400);
  EXPECT_NE(plain->body.find("Upgrade: websocket"), std::string::npos) << plain->body;
  // Without a subprotocol offered, the server names none and the client accepts that.
  ws = Open(client, "/echo", "");
  ASSERT_TRUE(ws);
  ws->Send("x");
  auto m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok() && m->has_value());
  EXPECT_EQ(**m, "x");
}

TEST(WebSocket, AMessageOverTheServersLimitClosesWith1009) {
  ServerSide side;
  HttpServerOptions o;
  o.max_websocket_message_bytes = 1000;
  HttpServer server(o, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  auto ws = Open(client);
  ASSERT_TRUE(ws);
  ws->Send(std::string(1000, 'x'));
  auto m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok() && m->has_value());
  EXPECT_EQ((*m)->size(), 1000u);
  ws->Send(std::string(1001, 'x'));
  m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_FALSE(m->has_value());
  EXPECT_EQ(ws->close_code(), 1009);
}

TEST(WebSocket, TheServerClosesWithItsCodeAndReason) {
  ServerSide side;
  HttpServer server(HttpServerOptions{}, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  auto ws = Open(client);
  ASSERT_TRUE(ws);
  ws->Send("close-4001");
  auto m = ws->Receive(5'000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_FALSE(m->has_value());
  EXPECT_EQ(ws->close_code(), 4001);
  EXPECT_EQ(ws->close_reason(), "bye");
}

// The server pings a quiet client, which answers by itself while it pumps: the connection stays
// open well past the idle time. A client that stops pumping (a dead peer) is closed.
TEST(WebSocket, PingsKeepAQuietPeerAndADeadOneIsClosed) {
  ServerSide side;
  HttpServerOptions o;
  o.websocket_idle_ms = 400;
  HttpServer server(o, EchoHandler(&side));
  ASSERT_TRUE(server.Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  auto quiet = Open(client);
  ASSERT_TRUE(quiet);
  auto m = quiet->Receive(1'500);
  EXPECT_FALSE(m.ok()) << "nothing to receive: the wait times out";
  EXPECT_FALSE(quiet->closed());
  quiet->Send("still here");
  m = quiet->Receive(5'000);
  ASSERT_TRUE(m.ok() && m->has_value()) << (m.ok() ? "closed" : m.status().message());
  EXPECT_EQ(**m, "still here");

  HttpClient other("http://127.0.0.1:" + std::to_string(server.port()), "");
  auto dead = Open(other);
  ASSERT_TRUE(dead);
  // Never pumped again: it answers no ping, and the server ends it.
  ASSERT_EQ(side.first_end.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  EXPECT_FALSE(quiet->closed());
}

// Stop closes open WebSockets at once, and tells the waiting Read.
TEST(WebSocket, StopClosesThemAtOnce) {
  ServerSide side;
  auto server = std::make_unique<HttpServer>(HttpServerOptions{}, EchoHandler(&side));
  ASSERT_TRUE(server->Start().ok());
  HttpClient client("http://127.0.0.1:" + std::to_string(server->port()), "");
  auto ws = Open(client);
  ASSERT_TRUE(ws);
  ws->Send("x");
  ASSERT_TRUE(ws->Receive(5'000).ok());
  // Let the echo loop, whose write completed, wait in its next Read.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  server->Stop();
  EXPECT_EQ(side.ended, 1) << "the echo loop's Read was told";
  auto m = ws->Receive(5'000);
  EXPECT_TRUE(!m.ok() || !m->has_value());
  EXPECT_TRUE(ws->closed());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace berth::net

namespace berth::net {
namespace {

// Relays `from`'s messages to `to`, one at a time (as the server's bridges do); closes `to` when
// `from` closes.
void Cross(const std::shared_ptr<WebSocket>& from, const std::shared_ptr<WebSocket>& to) {
  from->Read([from, to](std::optional<std::string> m) {
    if (!m) {
      to->Close(1000, "");
      return;
    }
    to->Write(std::move(*m), [from, to](bool ok) {
      if (ok) Cross(from, to);
    });
  });
}

// /pair: each two WebSockets in turn are relayed to each other.
Handler PairHandler(std::mutex* mu, std::shared_ptr<WebSocket>* waiting) {
  return [mu, waiting](HttpRequest&&, std::shared_ptr<Responder> responder) {
    responder->AcceptWebSocket(kStreamSubprotocol, [mu, waiting](std::shared_ptr<WebSocket> ws) {
      std::lock_guard lock(*mu);
      if (!*waiting) {
        *waiting = ws;
        return;
      }
      Cross(*waiting, ws);
      Cross(ws, *waiting);
      waiting->reset();
    });
  };
}

std::string ReadToEof(int fd) {
  std::string got;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

// Two WebSockets (a CLI's and an agent's) paired by the server, each relaying a socket pair's end
// (RelayStream): the test holds the other ends, pa[1] (the "user") and pb[1] (the "job").
class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions o;
    o.threads = 2;
    server_ = std::make_unique<HttpServer>(o, PairHandler(&mu_, &waiting_));
    ASSERT_TRUE(server_->Start().ok());
    client_ =
        std::make_unique<HttpClient>("http://127.0.0.1:" + std::to_string(server_->port()), "");
    ASSERT_TRUE(client_->OpenWebSocket("/pair", kStreamSubprotocol, 5'000, &a, 1 << 20).ok());
    ASSERT_TRUE(client_->OpenWebSocket("/pair", kStreamSubprotocol, 5'000, &b, 1 << 20).ok());
    ASSERT_TRUE(a && b);
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pa), 0);
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pb), 0);
    relay_a = std::async(std::launch::async, [this] { return RelayStream(*a, pa[0], stop_); });
    relay_b = std::async(std::launch::async, [this] { return RelayStream(*b, pb[0], stop_); });
  }
  void TearDown() override {
    stop_ = true;
    if (relay_a.valid()) relay_a.wait();
    if (relay_b.valid()) relay_b.wait();
    for (int fd : {pa[0], pa[1], pb[0], pb[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  std::mutex mu_;
  std::shared_ptr<WebSocket> waiting_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HttpClient> client_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<WebSocketClient> a, b;
  int pa[2] = {-1, -1}, pb[2] = {-1, -1};
  std::future<Status> relay_a, relay_b;
};

// 8 MiB one way, the half-close passed on, then the answer the other way after it, and both
// relays end Ok.
TEST_F(StreamTest, ItCarriesBytesAndHalfClosesBothWays) {
  std::string request(8 << 20, '\0');
  for (size_t i = 0; i < request.size(); ++i) request[i] = static_cast<char>(i * 31 + i / 4096);
  auto writer = std::async(std::launch::async, [&] {
    std::string_view left = request;
    while (!left.empty()) {
      ssize_t n = ::write(pa[1], left.data(), left.size());
      if (n <= 0) return false;
      left.remove_prefix(static_cast<size_t>(n));
    }
    return ::shutdown(pa[1], SHUT_WR) == 0;
  });
  // The job reads the whole request and its end, and only then answers.
  EXPECT_EQ(ReadToEof(pb[1]), request);
  ASSERT_TRUE(writer.get());
  const std::string answer = "HTTP/1.0 200 OK\r\n\r\nall of it";
  ASSERT_EQ(::write(pb[1], answer.data(), answer.size()), static_cast<ssize_t>(answer.size()));
  ::shutdown(pb[1], SHUT_WR);
  EXPECT_EQ(ReadToEof(pa[1]), answer);
  ASSERT_EQ(relay_a.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_EQ(relay_b.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status ended_a = relay_a.get(), ended_b = relay_b.get();
  EXPECT_TRUE(ended_a.ok()) << ended_a.message();
  EXPECT_TRUE(ended_b.ok()) << ended_b.message();
}

// A reset on one side ends its relay with the failure, and the other relay ends too.
TEST_F(StreamTest, AResetSocketEndsBothRelays) {
  ASSERT_EQ(::write(pa[1], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pb[1], &c, 1), 1);
  ASSERT_EQ(::write(pa[1], "yz", 2), 2);
  for (int i = 0, unread = 0; i < 500 && unread < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::ioctl(pb[1], FIONREAD, &unread);
  }
  // The job's side goes away with bytes unread: a reset, which its relay reads as a failure.
  ::close(pb[1]);
  pb[1] = -1;
  ASSERT_EQ(relay_b.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status failed = relay_b.get();
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("the connection failed"), std::string::npos) << failed.message();
  // ...and the other relay ends with it, once the closed one's owner lets its socket go (the
  // server's side of a closing handshake waits for the TCP connection's end).
  b.reset();
  ASSERT_EQ(relay_a.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  (void)relay_a.get();
}

}  // namespace
}  // namespace berth::net
