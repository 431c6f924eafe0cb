// WebSessions and the dashboard's way in through Identity: one-time login codes, session cookies,
// the CSRF header on changes, and browsers refused the loopback identity — against a real SQLite
// store, a fake clock and a fake passwd database.
#include "server/http/web_sessions.h"

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/fake_system_users.h"
#include "fakes/temp_dir.h"
#include "server/accounts.h"
#include "server/http/identity.h"
#include "store/store.h"

namespace berth::testing {
namespace {

TEST(WebSessionsTest, ALoginCodeWorksOnceAndOnlyForAFewMinutes) {
  FakeClock clock;
  WebSessions sessions(clock);
  std::string code = sessions.NewLoginCode("alice", "");
  EXPECT_EQ(code.size(), 48u);
  auto first = sessions.Redeem(code);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->session.user, "alice");
  EXPECT_EQ(first->id.size(), 64u);
  EXPECT_FALSE(first->session.csrf.empty());
  EXPECT_NE(first->session.csrf, first->id);
  auto again = sessions.Redeem(code);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kUnauthorized);
  EXPECT_NE(again.status().message().find("berth dashboard"), std::string::npos);

  std::string late = sessions.NewLoginCode("alice", "");
  clock.Advance(WebSessions::kCodeTtl);
  EXPECT_EQ(sessions.Redeem(late).status().code(), Code::kUnauthorized);
  EXPECT_EQ(sessions.Redeem("").status().code(), Code::kUnauthorized);
}

TEST(WebSessionsTest, SessionsEndAtTheirTtlOrOnLogout) {
  FakeClock clock;
  WebSessions sessions(clock);
  auto s = sessions.Redeem(sessions.NewLoginCode("bob", ""));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(sessions.Find(s->id));
  EXPECT_EQ(sessions.Find(s->id)->user, "bob");
  EXPECT_FALSE(sessions.Find(s->id + "0"));
  EXPECT_FALSE(sessions.Find(""));
  clock.Advance(WebSessions::kSessionTtl - 1);
  EXPECT_TRUE(sessions.Find(s->id));
  clock.Advance(1);
  EXPECT_FALSE(sessions.Find(s->id));

  // A token's session ends with the token's remaining life when that is shorter.
  StartedSession short_lived = sessions.Start("bob", "berth_x", 60'000);
  StartedSession capped = sessions.Start("bob", "berth_x", 100LL * 24 * 3600 * 1000);
  clock.Advance(60'000);
  EXPECT_FALSE(sessions.Find(short_lived.id));
  EXPECT_TRUE(sessions.Find(capped.id));
  sessions.End(capped.id);
  EXPECT_FALSE(sessions.Find(capped.id));
  EXPECT_EQ(sessions.sessions(), 0u);
}

TEST(WebSessionsTest, AFloodOfUnusedCodesKeepsTheNewest) {
  FakeClock clock;
  WebSessions sessions(clock);
  std::string oldest = sessions.NewLoginCode("alice", "");
  clock.Advance(1);
  std::string newest;
  for (size_t i = 0; i < WebSessions::kMaxCodes; ++i) newest = sessions.NewLoginCode("alice", "");
  EXPECT_FALSE(sessions.Redeem(oldest).ok());
  EXPECT_TRUE(sessions.Redeem(newest).ok());
}

// Any token could open any number of 12-hour sessions, each kept in memory: a user now holds at
// most kMaxSessionsPerUser, a new one ending the oldest, and other users' sessions are untouched.
TEST(WebSessionsTest, AUsersLiveSessionsAreCapped) {
  FakeClock clock;
  WebSessions sessions(clock);
  StartedSession bob = sessions.Start("bob", "", std::nullopt);
  StartedSession first = sessions.Start("alice", "", std::nullopt);
  clock.Advance(1);
  std::vector<StartedSession> later;
  for (size_t i = 0; i < 3 * WebSessions::kMaxSessionsPerUser; ++i) {
    later.push_back(sessions.Start("alice", "", std::nullopt));
    clock.Advance(1);
  }
  EXPECT_EQ(sessions.sessions(), WebSessions::kMaxSessionsPerUser + 1);
  EXPECT_FALSE(sessions.Find(first.id));
  EXPECT_TRUE(sessions.Find(later.back().id));
  EXPECT_TRUE(sessions.Find(bob.id));
}

TEST(WebSessionsTest, SessionCookiesAreFoundByTheirPrefix) {
  using V = std::vector<std::string>;
  EXPECT_EQ(CookieValues("a=1; berth_session_8765=abc; b=2", "berth_session"), V{"abc"});
  EXPECT_EQ(CookieValues("berth_session=\"q\"; berth_session_9=r", "berth_session"), (V{"q", "r"}));
  EXPECT_EQ(CookieValues("xberth_session=1; berth_sessionx=2; other=3", "berth_session"), V{});
  EXPECT_EQ(CookieValues("", "berth_session"), V{});
  EXPECT_EQ(CookieValues("berth_session; berth_session_1=", "berth_session"), V{});

  // A browser sends the session cookies of every berth server of its host: ours is the live one.
  FakeClock clock;
  WebSessions sessions(clock);
  auto ours = sessions.Redeem(sessions.NewLoginCode("alice", ""));
  ASSERT_TRUE(ours.ok());
  auto found =
      sessions.FindInCookies("berth_session_1111=deadbeef; berth_session_2222=" + ours->id);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, ours->id);
  EXPECT_EQ(found->session.user, "alice");
  EXPECT_FALSE(sessions.FindInCookies("berth_session_1111=deadbeef"));
}

class DashboardIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sqlite = OpenSqliteStore(dir_.File("berth.db"));
    ASSERT_TRUE(sqlite.ok()) << sqlite.status().message();
    store_ = std::move(*sqlite);
    sys_.AddUser(1001, "alice");
    sys_.SetLoopbackPeer(40000, 1001);
    accounts_ = std::make_unique<Accounts>(*store_, clock_, Identity::BuiltinAdmins(sys_));
    ASSERT_TRUE(accounts_->Load().ok());
    identity_ = std::make_unique<Identity>(IdentityOptions{.cluster_token = "cluster-secret"},
                                           *accounts_, sys_, &sessions_);
  }
  static net::HttpRequest Browser(const std::string& method, const std::string& cookie) {
    net::HttpRequest r;
    r.method = method;
    r.peer.transport = net::PeerInfo::Transport::kTcp;
    r.peer.remote_port = 40000;  // alice's loopback connection
    r.headers["sec-fetch-site"] = "same-origin";
    if (!cookie.empty())
      r.headers["cookie"] = std::string(WebSessions::kCookie) + "_8765=" + cookie;
    return r;
  }

  TempDir dir_;
  FakeClock clock_;
  FakeSystemUsers sys_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Accounts> accounts_;
  WebSessions sessions_{clock_};
  std::unique_ptr<Identity> identity_;
};

TEST_F(DashboardIdentityTest, ABrowserIsNeverLetInForBeingOnTheServersMachine) {
  // The CLI on the same loopback connection is alice.
  net::HttpRequest cli = Browser("GET", "");
  cli.headers.erase("sec-fetch-site");
  ASSERT_TRUE(identity_->Identify(cli).ok());
  EXPECT_EQ(identity_->Identify(cli)->user, "alice");
  // A browser (any page it opened) is not, with Sec-Fetch-Site or with Origin.
  auto refused = identity_->Identify(Browser("POST", ""));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kUnauthorized);
  EXPECT_NE(refused.status().message().find("berth dashboard"), std::string::npos);
  cli.headers["origin"] = "http://evil.example";
  EXPECT_EQ(identity_->Identify(cli).status().code(), Code::kUnauthorized);

  // A page on a rebound DNS name reaches 127.0.0.1 with neither header on a simple GET: its Host
  // names it, and it is not identified by the loopback either.
  net::HttpRequest rebound = Browser("GET", "");
  rebound.headers.erase("sec-fetch-site");
  rebound.headers["host"] = "evil.example:8765";
  auto by_name = identity_->Identify(rebound);
  ASSERT_FALSE(by_name.ok());
  EXPECT_EQ(by_name.status().code(), Code::kUnauthorized);
  EXPECT_NE(by_name.status().message().find("Host: evil.example:8765"), std::string::npos);
  for (const char* host : {"127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1"}) {
    rebound.headers["host"] = host;
    EXPECT_EQ(identity_->Identify(rebound)->user, "alice") << host;
  }
}

// A Host that only starts like a loopback address is a DNS name anyone may point at 127.0.0.1: it
// passed the check because it starts with "127.".
TEST_F(DashboardIdentityTest, AHostThatOnlyStartsWith127IsNotLoopback) {
  net::HttpRequest rebound = Browser("GET", "");
  rebound.headers.erase("sec-fetch-site");
  for (const char* host : {"127.0.0.1.attacker.example:8765", "127.0.0.1.attacker.example",
                           "127.evil.example", "127.0.0.1.:8765"}) {
    rebound.headers["host"] = host;
    auto who = identity_->Identify(rebound);
    ASSERT_FALSE(who.ok()) << host;
    EXPECT_EQ(who.status().code(), Code::kUnauthorized) << host;
  }
  rebound.headers["host"] = "127.1.2.3:8765";
  EXPECT_EQ(identity_->Identify(rebound)->user, "alice");
}

TEST_F(DashboardIdentityTest, ASessionIdentifiesItsUserAndChangesNeedItsCsrfHeader) {
  auto s = sessions_.Redeem(sessions_.NewLoginCode("alice", ""));
  ASSERT_TRUE(s.ok());
  auto read = identity_->Identify(Browser("GET", s->id));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->user, "alice");
  EXPECT_TRUE(read->is_user);
  EXPECT_FALSE(read->is_node);
  EXPECT_EQ(read->via, "dashboard (dashboard)");

  auto no_csrf = identity_->Identify(Browser("POST", s->id));
  ASSERT_FALSE(no_csrf.ok());
  EXPECT_EQ(no_csrf.status().code(), Code::kForbidden);
  EXPECT_NE(no_csrf.status().message().find("X-Berth-CSRF"), std::string::npos);
  net::HttpRequest wrong = Browser("POST", s->id);
  wrong.headers["x-berth-csrf"] = s->session.csrf + "x";
  EXPECT_EQ(identity_->Identify(wrong).status().code(), Code::kForbidden);
  net::HttpRequest right = Browser("POST", s->id);
  right.headers["x-berth-csrf"] = s->session.csrf;
  EXPECT_EQ(identity_->Identify(right)->user, "alice");

  // An unknown or ended session is refused, never taken for the loopback's user.
  sessions_.End(s->id);
  auto ended = identity_->Identify(Browser("GET", s->id));
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.status().code(), Code::kUnauthorized);
  EXPECT_NE(ended.status().message().find("session has ended"), std::string::npos);
}

// Cross-site WebSocket hijacking: exec, attach and port-forward are upgrades, which are GETs, and a
// page on another port of the server's host (a job's notebook reached through port-forward) is
// same-site, so the browser sends the session cookie with its upgrade. The upgrade ran a command as
// the session's user; now it needs the server's own Origin and the session's CSRF secret.
TEST_F(DashboardIdentityTest, AWebSocketWithASessionNeedsTheServersOriginAndTheCsrfSecret) {
  auto s = sessions_.Redeem(sessions_.NewLoginCode("alice", ""));
  ASSERT_TRUE(s.ok());
  auto upgrade = [&](const std::string& origin, const std::string& csrf) {
    net::HttpRequest r = Browser("GET", s->id);
    r.path = "/v1/jobs/1/exec";
    r.websocket_upgrade = true;
    r.headers["host"] = "localhost:8765";
    if (!origin.empty()) r.headers["origin"] = origin;
    if (!csrf.empty()) r.query["csrf"] = csrf;
    return identity_->Identify(r);
  };
  // A page on another port of the same host, with or without the secret.
  for (const std::string& csrf : {std::string(), s->session.csrf}) {
    auto other_port = upgrade("http://localhost:8888", csrf);
    ASSERT_FALSE(other_port.ok());
    EXPECT_EQ(other_port.status().code(), Code::kForbidden);
    EXPECT_NE(other_port.status().message().find("Origin http://localhost:8888"),
              std::string::npos);
  }
  EXPECT_EQ(upgrade("", s->session.csrf).status().code(), Code::kForbidden);
  EXPECT_EQ(upgrade("http://evil.localhost:8765", s->session.csrf).status().code(),
            Code::kForbidden);
  // The server's own page, without the secret or with a wrong one.
  auto no_secret = upgrade("http://localhost:8765", "");
  ASSERT_FALSE(no_secret.ok());
  EXPECT_EQ(no_secret.status().code(), Code::kForbidden);
  EXPECT_NE(no_secret.status().message().find("csrf="), std::string::npos);
  EXPECT_EQ(upgrade("http://localhost:8765", s->session.csrf + "x").status().code(),
            Code::kForbidden);
  // Both: let in, as alice.
  auto ok = upgrade("http://localhost:8765", s->session.csrf);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->user, "alice");
  EXPECT_EQ(upgrade("https://localhost:8765", s->session.csrf)->user, "alice");

  // A token-authenticated client (the CLI) needs neither.
  Principal root = accounts_->ForUser("root", "socket");
  auto token = accounts_->CreateToken(root, NewToken{.name = "alice-cli", .user = "alice"});
  ASSERT_TRUE(token.ok());
  net::HttpRequest cli;
  cli.method = "GET";
  cli.websocket_upgrade = true;
  cli.peer.transport = net::PeerInfo::Transport::kTls;
  cli.headers["authorization"] = "Bearer " + token->secret;
  EXPECT_EQ(identity_->Identify(cli)->user, "alice");
}

TEST_F(DashboardIdentityTest, ASessionOnATokenEndsWhenTheTokenIsRevoked) {
  Principal root = accounts_->ForUser("root", "socket");
  auto token = accounts_->CreateToken(root, NewToken{.name = "alice-web", .user = "alice"});
  ASSERT_TRUE(token.ok());
  StartedSession s = sessions_.Start("alice", token->secret, std::nullopt);
  auto p = identity_->Identify(Browser("GET", s.id));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->via, "dashboard (token alice-web)");
  ASSERT_TRUE(accounts_->RevokeToken(root, "alice-web").ok());
  auto revoked = identity_->Identify(Browser("GET", s.id));
  ASSERT_FALSE(revoked.ok());
  EXPECT_NE(revoked.status().message().find("revoked"), std::string::npos);
}

TEST_F(DashboardIdentityTest, ABearerTokenWinsOverACookie) {
  net::HttpRequest r = Browser("POST", "no-such-session");
  r.headers["authorization"] = "Bearer cluster-secret";
  auto node = identity_->Identify(r);
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->is_node);
}

}  // namespace
}  // namespace berth::testing
