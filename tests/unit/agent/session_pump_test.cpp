// The agent's relay of an interactive session (agent/session_pump.h), between a real WebSocket
// (berth's HTTP server on loopback, standing in for the server's side) and a socketpair standing in
// for the node supervisor's terminal leg.
#include "agent/session_pump.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "supervise/terminal.h"

namespace berth {
namespace {

std::string Message(TermChannel channel, std::string_view payload) {
  return std::string(1, static_cast<char>(channel)) + std::string(payload);
}

// The server's side of one session: sends `first` as soon as the session opens, then records
// every message until the agent closes.
struct UserSide {
  std::string first;
  std::mutex mu;
  std::vector<std::string> received;
  std::promise<void> sent, closed;

  void ReadAll(const std::shared_ptr<net::WebSocket>& ws) {
    ws->Read([this, ws](std::optional<std::string> m) {
      if (!m) {
        closed.set_value();
        return;
      }
      {
        std::lock_guard lock(mu);
        received.push_back(std::move(*m));
      }
      ReadAll(ws);
    });
  }
};

// A rank that ends while the user is still typing: the leg has sent its last output and its exit
// and closed, and what the user typed last (a piped stdin's end of file, Ctrl-D) finds the leg
// gone. The output and the exit still reach the user, in order, before the close.
TEST(SessionPumpTest, ALegThatEndedWhileTheUserTypedStillDeliversItsOutputAndExit) {
  UserSide user;
  user.first = Message(TermChannel::kStdin, "\x04");
  net::HttpServerOptions o;
  o.threads = 2;
  net::HttpServer server(o, [&user](net::HttpRequest&&, std::shared_ptr<net::Responder> r) {
    r->AcceptWebSocket(kSessionSubprotocol, [&user](std::shared_ptr<net::WebSocket> ws) {
      ws->Write(user.first, [&user, ws](bool) {
        user.sent.set_value();
        user.ReadAll(ws);
      });
    });
  });
  ASSERT_TRUE(server.Start().ok());
  net::HttpClient client("http://127.0.0.1:" + std::to_string(server.port()), "");
  std::unique_ptr<net::WebSocketClient> ws;
  auto opened = client.OpenWebSocket("/session", kSessionSubprotocol, 5'000, &ws, 1 << 20);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  ASSERT_EQ(opened->status, 101);

  int leg[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, leg), 0);
  std::string ended;
  AppendTermFrame(&ended, TermChannel::kOutput, "got:the last line\r\n");
  AppendTermFrame(&ended, TermChannel::kControl, R"({"exit":3,"reason":""})");
  ASSERT_EQ(::write(leg[1], ended.data(), ended.size()), static_cast<ssize_t>(ended.size()));
  ::close(leg[1]);

  // The user's Ctrl-D is in hand before the relay starts, so it tries to write it to the leg
  // before it reads what the leg sent.
  ASSERT_EQ(user.sent.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  // (It may have come with the upgrade's answer, already read: then the socket has nothing.)
  pollfd p{ws->fd(), POLLIN, 0};
  ::poll(&p, 1, 200);
  ASSERT_TRUE(ws->Pump().ok());

  std::atomic<bool> stop{false};
  Status relayed = RelaySession(*ws, leg[0], stop);
  EXPECT_TRUE(relayed.ok()) << relayed.message();
  ::close(leg[0]);
  EXPECT_TRUE(ws->closed());
  EXPECT_EQ(ws->close_code(), 1000);
  ws.reset();  // the server's side reads the end once the connection is gone
  ASSERT_EQ(user.closed.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  std::lock_guard lock(user.mu);
  EXPECT_EQ(user.received, (std::vector<std::string>{
                               Message(TermChannel::kOutput, "got:the last line\r\n"),
                               Message(TermChannel::kControl, R"({"exit":3,"reason":""})")}));
}

}  // namespace
}  // namespace berth
