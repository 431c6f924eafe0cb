// Accounts and Identity: who a request is, from the kernel's word or a token, and what admins may
// change — against a real SQLite store (wrapped to inject commit failures), a fake clock and a
// fake passwd database.
#include "server/http/identity.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "fakes/fake_clock.h"
#include "fakes/fake_system_users.h"
#include "fakes/faulty_store.h"
#include "fakes/temp_dir.h"
#include "server/accounts.h"
#include "server/http/body_admission.h"

namespace berth::testing {
namespace {

class IdentityTest : public ::testing::Test {
 public:  // for the helpers below
  void SetUp() override {
    auto sqlite = OpenSqliteStore(dir_.File("berth.db"));
    ASSERT_TRUE(sqlite.ok()) << sqlite.status().message();
    store_ = std::make_unique<FaultyStore>(std::move(*sqlite));
    sys_.AddUser(1001, "alice");
    sys_.AddUser(1002, "bob");
    Reload();
  }

  // A fresh Accounts and Identity over the same store: what a restarted server would know.
  void Reload() {
    identity_.reset();
    accounts_ = std::make_unique<Accounts>(*store_, clock_, Identity::BuiltinAdmins(sys_));
    ASSERT_TRUE(accounts_->Load().ok());
    identity_ = std::make_unique<Identity>(
        IdentityOptions{.cluster_token = "cluster-secret", .tokens_on_tcp = false}, *accounts_,
        sys_);
  }

  static net::HttpRequest Socket(uint32_t uid) {
    net::HttpRequest r;
    r.peer.transport = net::PeerInfo::Transport::kUnix;
    r.peer.uid = uid;
    return r;
  }
  static net::HttpRequest Bearer(const std::string& secret,
                                 net::PeerInfo::Transport t = net::PeerInfo::Transport::kTls) {
    net::HttpRequest r;
    r.peer.transport = t;
    r.headers["authorization"] = "Bearer " + secret;
    return r;
  }
  Principal Admin() { return accounts_->ForUser("root", "socket"); }

  TempDir dir_;
  FakeClock clock_;
  FakeSystemUsers sys_;
  std::unique_ptr<FaultyStore> store_;
  std::unique_ptr<Accounts> accounts_;
  std::unique_ptr<Identity> identity_;
};

TEST_F(IdentityTest, TheSocketsUidIsTheUser) {
  auto alice = identity_->Identify(Socket(1001));
  ASSERT_TRUE(alice.ok()) << alice.status().message();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->via, "socket");
  EXPECT_EQ(alice->role, Role::kUser);
  EXPECT_EQ(alice->max_priority, 0);
  EXPECT_TRUE(alice->is_user);
  EXPECT_FALSE(alice->is_node);
  // A body claiming another user changes nothing here: Identify never reads the body.
  net::HttpRequest claims = Socket(1001);
  claims.body = R"({"user": "bob"})";
  EXPECT_EQ(identity_->Identify(claims)->user, "alice");
}

TEST_F(IdentityTest, RootAndTheServersOwnUserAreAdminsAndNodes) {
  for (uint32_t uid : {0u, 999u}) {
    auto p = identity_->Identify(Socket(uid));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->role, Role::kAdmin) << uid;
    EXPECT_FALSE(p->max_priority.has_value()) << "built-in admins have no priority limit";
    EXPECT_TRUE(p->is_node);
  }
}

TEST_F(IdentityTest, AnUnknownUidIsRefused) {
  auto p = identity_->Identify(Socket(4242));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kUnauthorized);
  EXPECT_NE(p.status().message().find("4242"), std::string::npos);
}

TEST_F(IdentityTest, LoopbackTcpIsIdentifiedByTheKernelUnlessTokensAreRequired) {
  sys_.SetLoopbackPeer(40000, 1002);
  net::HttpRequest r;
  r.peer.transport = net::PeerInfo::Transport::kTcp;
  r.peer.remote_port = 40000;
  auto bob = identity_->Identify(r);
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(bob->user, "bob");
  EXPECT_EQ(bob->via, "loopback");
  r.peer.remote_port = 40001;  // not a local peer
  EXPECT_EQ(identity_->Identify(r).status().code(), Code::kUnauthorized);

  Identity strict(IdentityOptions{.cluster_token = "cluster-secret", .tokens_on_tcp = true},
                  *accounts_, sys_);
  r.peer.remote_port = 40000;
  EXPECT_EQ(strict.Identify(r).status().code(), Code::kUnauthorized);
}

TEST_F(IdentityTest, TheClusterTokenIsANodeNeverAUser) {
  auto node = identity_->Identify(Bearer("cluster-secret"));
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->is_node);
  EXPECT_FALSE(node->is_user);
  EXPECT_FALSE(node->Has(Role::kUser));
  EXPECT_EQ(identity_->Identify(Bearer("cluster-secreT")).status().code(), Code::kUnauthorized);
  net::HttpRequest no_bearer;
  no_bearer.headers["authorization"] = "cluster-secret";
  EXPECT_EQ(identity_->Identify(no_bearer).status().code(), Code::kUnauthorized);
}

TEST_F(IdentityTest, AUsersTokenIdentifiesThemUntilRevokedOrExpired) {
  auto created = accounts_->CreateToken(
      Admin(), NewToken{.name = "alice-laptop",
                        .user = "alice",
                        .role = std::nullopt,
                        .expires_at = clock_.Now() + 90LL * 24 * 3600 * 1000});
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_EQ(created->row.hash, HashToken(created->secret));
  EXPECT_NE(created->row.hash.find("sha256:"), std::string::npos);

  auto alice = identity_->Identify(Bearer(created->secret));
  ASSERT_TRUE(alice.ok()) << alice.status().message();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->via, "token alice-laptop");
  EXPECT_EQ(alice->token_expires, created->row.expires_at);

  // Only the hash is stored: a restarted server still knows the token by it.
  auto stored = store_->LoadTokens();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(stored->front().hash, created->row.hash);
  EXPECT_EQ(stored->front().hash.find(created->secret), std::string::npos);
  Reload();
  EXPECT_EQ(identity_->Identify(Bearer(created->secret))->user, "alice");

  // Expired: refused, naming the token.
  clock_.Advance(91LL * 24 * 3600 * 1000);
  auto expired = identity_->Identify(Bearer(created->secret));
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.status().code(), Code::kUnauthorized);
  EXPECT_NE(expired.status().message().find("alice-laptop"), std::string::npos);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos);
}

TEST_F(IdentityTest, RevokedTokensAreRefusedAtOnceAndAfterARestart) {
  auto created = accounts_->CreateToken(Admin(), NewToken{.name = "", .user = "bob"});
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(created->row.name.rfind("bob-", 0), 0u) << created->row.name;
  ASSERT_TRUE(accounts_->RevokeToken(Admin(), created->row.name).ok());
  auto refused = identity_->Identify(Bearer(created->secret));
  EXPECT_EQ(refused.status().code(), Code::kUnauthorized);
  EXPECT_NE(refused.status().message().find("revoked"), std::string::npos);
  Reload();
  EXPECT_EQ(identity_->Identify(Bearer(created->secret)).status().code(), Code::kUnauthorized);
  EXPECT_EQ(accounts_->RevokeToken(Admin(), "no-such").status().code(), Code::kNotFound);
}

TEST_F(IdentityTest, OnlyAdminsManageTokensAndRights) {
  Principal alice = accounts_->ForUser("alice", "socket");
  auto refused = accounts_->CreateToken(alice, NewToken{.name = "x", .user = "alice"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kForbidden);
  EXPECT_NE(refused.status().message().find("admin"), std::string::npos);
  EXPECT_EQ(
      accounts_->SetUser(alice, UserChange{.name = "alice", .max_priority = 100}).status().code(),
      Code::kForbidden);

  ASSERT_TRUE(accounts_
                  ->SetUser(Admin(), UserChange{.name = "alice",
                                                .role = Role::kOperator,
                                                .max_priority = 10,
                                                .team = "vision"})
                  .ok());
  Principal now = accounts_->ForUser("alice", "socket");
  EXPECT_EQ(now.role, Role::kOperator);
  EXPECT_EQ(now.max_priority, 10);
  EXPECT_EQ(now.team, "vision");
  EXPECT_TRUE(now.Has(Role::kOperator));
  EXPECT_FALSE(now.Has(Role::kAdmin));
  Reload();
  EXPECT_EQ(accounts_->ForUser("alice", "socket").team, "vision");

  // Every change is in the audit log, with who made it.
  auto audit = store_->ListAudit(10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ(audit->front().by, "root");
  EXPECT_EQ(audit->front().action, "user set");
  EXPECT_EQ(audit->front().target, "alice");
}

TEST_F(IdentityTest, AFailedCommitChangesNothing) {
  store_->FailWrites(1);
  auto created = accounts_->CreateToken(Admin(), NewToken{.name = "t1", .user = "alice"});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), Code::kUnavailable);
  EXPECT_TRUE(accounts_->Tokens().empty());
  store_->FailWrites(1);
  EXPECT_FALSE(accounts_->SetUser(Admin(), UserChange{.name = "bob", .role = Role::kAdmin}).ok());
  EXPECT_EQ(accounts_->ForUser("bob", "socket").role, Role::kUser);
  // And the name is free: the failed attempt left no half-made token behind.
  EXPECT_TRUE(accounts_->CreateToken(Admin(), NewToken{.name = "t1", .user = "alice"}).ok());
}

TEST_F(IdentityTest, NamesAreChecked) {
  EXPECT_EQ(
      accounts_->CreateToken(Admin(), NewToken{.name = "a b", .user = "alice"}).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(accounts_->CreateToken(Admin(), NewToken{.name = "", .user = std::string(65, 'a')})
                .status()
                .code(),
            Code::kInvalidArgument);
  ASSERT_TRUE(accounts_->CreateToken(Admin(), NewToken{.name = "dup", .user = "alice"}).ok());
  EXPECT_EQ(accounts_->CreateToken(Admin(), NewToken{.name = "dup", .user = "bob"}).status().code(),
            Code::kConflict);
}

// A node (the cluster token) speaks for the users of its machine — whom its agent's socket
// identified — but never for a built-in admin and never with the admin role; nobody else may
// speak for anyone.
// A node (credential `node_secret`) speaks for alice as `via`; never above operator (carol is an
// admin), never for root or the server's own user.
void ExpectSpeaksForUsersWithinLimits(IdentityTest& t, const std::string& node_secret,
                                      const std::string& via) {
  net::HttpRequest r = IdentityTest::Bearer(node_secret);
  r.headers["x-berth-on-behalf-of"] = "alice";
  auto alice = t.identity_->Identify(r);
  ASSERT_TRUE(alice.ok()) << alice.status().message();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->via, via);
  EXPECT_TRUE(alice->is_user);
  EXPECT_FALSE(alice->is_node);
  ASSERT_TRUE(
      t.accounts_->SetUser(t.Admin(), UserChange{.name = "carol", .role = Role::kAdmin}).ok());
  r.headers["x-berth-on-behalf-of"] = "carol";
  EXPECT_EQ(t.identity_->Identify(r)->role, Role::kOperator);
  for (const char* admin : {"root", "berthd"}) {  // berthd: the server's own user
    r.headers["x-berth-on-behalf-of"] = admin;
    EXPECT_EQ(t.identity_->Identify(r).status().code(), Code::kForbidden) << admin;
  }
}

TEST_F(IdentityTest, ANodeSpeaksForItsUsersWithinLimits) {
  ExpectSpeaksForUsersWithinLimits(*this, "cluster-secret", "a node's socket");

  auto token = accounts_->CreateToken(Admin(), NewToken{.name = "b", .user = "bob"});
  ASSERT_TRUE(token.ok());
  net::HttpRequest by_user = Bearer(token->secret);
  by_user.headers["x-berth-on-behalf-of"] = "alice";
  EXPECT_EQ(identity_->Identify(by_user).status().code(), Code::kForbidden);
  net::HttpRequest by_socket = Socket(1002);
  by_socket.headers["x-berth-on-behalf-of"] = "alice";
  EXPECT_EQ(identity_->Identify(by_socket).status().code(), Code::kForbidden);
}

// Accounts held its lock across a change's store commit, and identifying a request (on the HTTP
// I/O threads) takes the same lock: an admin's change on a slow store stalled every connection.
// With the commit held up, requests are still identified; the change lands once it commits.
TEST_F(IdentityTest, IdentifyingNeverWaitsForAnAdminsCommit) {
  auto token = accounts_->CreateToken(Admin(), NewToken{.name = "b", .user = "bob"});
  ASSERT_TRUE(token.ok());
  store_->HoldWrites(true);
  std::thread change([&] {
    EXPECT_TRUE(
        accounts_->SetUser(Admin(), UserChange{.name = "bob", .role = Role::kOperator}).ok());
  });
  while (store_->held_writes() < 1) std::this_thread::yield();
  auto who =
      std::async(std::launch::async, [&] { return identity_->Identify(Bearer(token->secret)); });
  const bool answered = who.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  store_->HoldWrites(false);
  change.join();
  ASSERT_TRUE(answered) << "identification waited for the commit";
  EXPECT_EQ(who.get()->role, Role::kUser);  // not yet committed, not yet applied
  EXPECT_EQ(identity_->Identify(Bearer(token->secret))->role, Role::kOperator);
}

// Per-node credentials. An admin's join token is good only for joining; a node that joins gets its
// own credential, which speaks for that node only and never for a user; a one-use join token is
// used up; a second join for a node that holds a live credential is refused (a join token must not
// let anyone take over a node); revocation ends it, also across a restart.
TEST_F(IdentityTest, AJoinTokenBuysOneNodeItsOwnCredential) {
  EXPECT_EQ(accounts_->CreateJoinToken(accounts_->ForUser("alice", "socket"), {}).status().code(),
            Code::kForbidden);
  auto join =
      accounts_->CreateJoinToken(Admin(), NewJoinToken{.expires_at = clock_.Now() + 60'000});
  ASSERT_TRUE(join.ok()) << join.status().message();
  auto joiner = identity_->Identify(Bearer(join->secret));
  ASSERT_TRUE(joiner.ok()) << joiner.status().message();
  EXPECT_TRUE(joiner->is_join);
  EXPECT_FALSE(joiner->is_node);
  EXPECT_FALSE(joiner->is_user);

  EXPECT_EQ(accounts_->JoinNode(*joiner, "bad name!").status().code(), Code::kInvalidArgument);
  auto n1 = accounts_->JoinNode(*joiner, "n1");
  ASSERT_TRUE(n1.ok()) << n1.status().message();
  EXPECT_EQ(n1->row.user, "node:n1");
  auto node = identity_->Identify(Bearer(n1->secret));
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->is_node);
  EXPECT_FALSE(node->is_user);
  EXPECT_EQ(node->node, "n1");

  // Used up: it cannot buy a second node.
  auto again = identity_->Identify(Bearer(join->secret));
  EXPECT_EQ(again.status().code(), Code::kUnauthorized);

  // A reusable one joins many nodes, but never takes a name that holds a live credential.
  auto reusable = accounts_->CreateJoinToken(Admin(), NewJoinToken{.reusable = true});
  ASSERT_TRUE(reusable.ok());
  auto joiner2 = identity_->Identify(Bearer(reusable->secret));
  ASSERT_TRUE(joiner2.ok());
  EXPECT_TRUE(accounts_->JoinNode(*joiner2, "n2").ok());
  auto taken = accounts_->JoinNode(*joiner2, "n1");
  EXPECT_EQ(taken.status().code(), Code::kConflict);
  EXPECT_NE(taken.status().message().find("berth admin node revoke n1"), std::string::npos);

  // Revoked: refused at once and after a restart; the name may join again.
  EXPECT_EQ(accounts_->RevokeNode(accounts_->ForUser("alice", "socket"), "n1").status().code(),
            Code::kForbidden);
  ASSERT_TRUE(accounts_->RevokeNode(Admin(), "n1").ok());
  EXPECT_EQ(accounts_->RevokeNode(Admin(), "n1").status().code(), Code::kNotFound);
  EXPECT_EQ(identity_->Identify(Bearer(n1->secret)).status().code(), Code::kUnauthorized);
  Reload();
  EXPECT_EQ(identity_->Identify(Bearer(n1->secret)).status().code(), Code::kUnauthorized);
  EXPECT_EQ(identity_->Identify(Bearer(join->secret)).status().code(), Code::kUnauthorized);
  joiner2 = identity_->Identify(Bearer(reusable->secret));
  ASSERT_TRUE(joiner2.ok());
  EXPECT_TRUE(accounts_->JoinNode(*joiner2, "n1").ok());

  // A failed commit leaves the join token unused and no credential behind.
  auto once = accounts_->CreateJoinToken(Admin(), NewJoinToken{});
  ASSERT_TRUE(once.ok());
  auto joiner3 = identity_->Identify(Bearer(once->secret));
  ASSERT_TRUE(joiner3.ok());
  store_->FailWrites(1);
  EXPECT_EQ(accounts_->JoinNode(*joiner3, "n3").status().code(), Code::kUnavailable);
  EXPECT_TRUE(identity_->Identify(Bearer(once->secret)).ok());
  EXPECT_TRUE(accounts_->JoinNode(*joiner3, "n3").ok());
}

// A join token could take the name of a node that registers with the cluster token (no credential
// of its own) once its lease lapsed: only live credentials were checked. A name the cluster knows
// (within its node retention) is refused unless it has had a credential, and an admin frees it.
TEST_F(IdentityTest, AJoinNeverTakesTheNameOfANodeOnTheClusterToken) {
  auto reusable = accounts_->CreateJoinToken(Admin(), NewJoinToken{.reusable = true});
  ASSERT_TRUE(reusable.ok());
  auto joiner = identity_->Identify(Bearer(reusable->secret));
  ASSERT_TRUE(joiner.ok());
  const TimeMs seen = clock_.Now() - 3'600'000;
  auto taken = accounts_->JoinNode(*joiner, "legacy", seen);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), Code::kConflict);
  EXPECT_NE(taken.status().message().find("registers with the cluster token"), std::string::npos);
  EXPECT_NE(taken.status().message().find("berth admin node revoke legacy"), std::string::npos);
  // The admin frees the name (there is no credential to revoke: a revoked placeholder says so),
  // also across a restart; then it may join.
  EXPECT_EQ(accounts_->RevokeNode(Admin(), "legacy").status().code(), Code::kNotFound);
  auto freed = accounts_->RevokeNode(Admin(), "legacy", /*known=*/true);
  ASSERT_TRUE(freed.ok()) << freed.status().message();
  ASSERT_EQ(freed->size(), 1u);
  EXPECT_TRUE(freed->front().revoked_at);
  Reload();
  joiner = identity_->Identify(Bearer(reusable->secret));
  ASSERT_TRUE(joiner.ok());
  auto joined = accounts_->JoinNode(*joiner, "legacy", seen);
  ASSERT_TRUE(joined.ok()) << joined.status().message();
  // A name the cluster does not know (never registered, or forgotten past the retention) joins.
  EXPECT_TRUE(accounts_->JoinNode(*joiner, "brand-new", std::nullopt).ok());
}

// A node's credential allowed any user ("*") may speak for a user of its machine (its user socket)
// as the cluster token may — capped at operator, never for a built-in admin — and the principal
// says which node vouched.
TEST_F(IdentityTest, ANodesCredentialSpeaksForItsUsersWithinLimits) {
  auto join = accounts_->CreateJoinToken(Admin(), NewJoinToken{.speaks_for = "*"});
  ASSERT_TRUE(join.ok());
  auto n1 = accounts_->JoinNode(*identity_->Identify(Bearer(join->secret)), "n1");
  ASSERT_TRUE(n1.ok());
  EXPECT_EQ(n1->row.speaks_for, "*");
  ExpectSpeaksForUsersWithinLimits(*this, n1->secret, "node n1's socket");
}

// A stolen node credential could act as any user its socket names. It speaks only for the users an
// admin named for that node (on the join token, or later), and for no one by default.
TEST_F(IdentityTest, ANodesCredentialSpeaksOnlyForTheUsersOfThatNode) {
  auto none = accounts_->CreateJoinToken(Admin(), NewJoinToken{.reusable = true});
  ASSERT_TRUE(none.ok());
  auto n0 = accounts_->JoinNode(*identity_->Identify(Bearer(none->secret)), "n0");
  ASSERT_TRUE(n0.ok());
  net::HttpRequest r = Bearer(n0->secret);
  r.headers["x-berth-on-behalf-of"] = "alice";
  auto refused = identity_->Identify(r);
  EXPECT_EQ(refused.status().code(), Code::kForbidden);
  EXPECT_NE(refused.status().message().find("berth admin node users n0 alice"), std::string::npos)
      << refused.status().message();

  auto users = NodeUsers({"bob", "alice", "bob"});
  ASSERT_TRUE(users.ok());
  EXPECT_EQ(*users, "alice,bob");
  auto join = accounts_->CreateJoinToken(Admin(), NewJoinToken{.speaks_for = *users});
  ASSERT_TRUE(join.ok());
  auto n1 = accounts_->JoinNode(*identity_->Identify(Bearer(join->secret)), "n1");
  ASSERT_TRUE(n1.ok());
  r = Bearer(n1->secret);
  r.headers["x-berth-on-behalf-of"] = "alice";
  EXPECT_EQ(identity_->Identify(r)->user, "alice");
  r.headers["x-berth-on-behalf-of"] = "carol";
  EXPECT_EQ(identity_->Identify(r).status().code(), Code::kForbidden);

  // An admin changes the list (audited, durable); a failed commit changes nothing.
  EXPECT_EQ(
      accounts_->SetNodeUsers(accounts_->ForUser("alice", "socket"), "n1", "carol").status().code(),
      Code::kForbidden);
  EXPECT_EQ(accounts_->SetNodeUsers(Admin(), "n9", "carol").status().code(), Code::kNotFound);
  store_->FailWrites(1);
  EXPECT_EQ(accounts_->SetNodeUsers(Admin(), "n1", "carol").status().code(), Code::kUnavailable);
  EXPECT_EQ(identity_->Identify(r).status().code(), Code::kForbidden);
  ASSERT_TRUE(accounts_->SetNodeUsers(Admin(), "n1", "carol").ok());
  Reload();
  EXPECT_EQ(identity_->Identify(r)->user, "carol");
  r.headers["x-berth-on-behalf-of"] = "alice";
  EXPECT_EQ(identity_->Identify(r).status().code(), Code::kForbidden);

  EXPECT_EQ(NodeUsers({"*", "bob"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(NodeUsers({"node:n2"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*NodeUsers({}), "");
  EXPECT_EQ(*NodeUsers({"*"}), "*");
  EXPECT_TRUE(NodeSpeaksFor("alice,bob", "bob"));
  EXPECT_FALSE(NodeSpeaksFor("alice,bob", "al"));
  EXPECT_FALSE(NodeSpeaksFor("", "alice"));
}

// The server read bodies up to 64 MiB before identifying their sender. BodyAdmission decides from
// the headers: a few KiB for a stranger (and an answer at once past that), 1 MiB for an identified
// user on routes that take small bodies, the server's limit on those that take big ones, and a
// budget per sender of bodies being read at once.
TEST_F(IdentityTest, BodiesAreAdmittedByWhoSendsThemAndWhere) {
  BodyAdmission admission(*identity_, BodyAdmission::Limits{.unidentified_bytes = 8 << 10,
                                                            .small_bytes = 1 << 20,
                                                            .large_bytes = 64 << 20,
                                                            .in_flight_per_sender = 100 << 20});
  auto head = [](net::HttpRequest r, const std::string& method, const std::string& path,
                 size_t length) {
    r.method = method;
    r.path = path;
    r.headers["content-length"] = std::to_string(length);
    return r;
  };
  net::HttpRequest stranger;
  stranger.peer.transport = net::PeerInfo::Transport::kTls;
  auto big = admission.Admit(head(stranger, "POST", "/v1/jobs", 60'000'000));
  ASSERT_TRUE(big.refuse);
  EXPECT_EQ(big.refuse->status, 401);
  auto small = admission.Admit(head(stranger, "POST", "/v1/dashboard/login", 100));
  EXPECT_FALSE(small.refuse);
  EXPECT_EQ(small.max_body_bytes, 8u << 10);

  const net::HttpRequest alice = Socket(1001);
  auto submit = admission.Admit(head(alice, "POST", "/v1/jobs", 60'000'000));
  EXPECT_FALSE(submit.refuse);
  EXPECT_EQ(submit.max_body_bytes, 64u << 20);
  EXPECT_EQ(admission.Admit(head(alice, "POST", "/v1/uploads/blobs", 10)).max_body_bytes,
            64u << 20);
  EXPECT_EQ(admission.Admit(head(alice, "POST", "/v1/admin/teams/ml", 10)).max_body_bytes,
            1u << 20);
  // A second 60 MB body while the first is being read is past alice's 100 MB: 503, try again.
  auto second = admission.Admit(head(alice, "POST", "/v1/jobs", 60'000'000));
  ASSERT_TRUE(second.refuse);
  EXPECT_EQ(second.refuse->status, 503);
  EXPECT_EQ(second.refuse->Header("Retry-After"), "1");
  // Bob's budget is his own; once alice's first body is in, she may send another.
  EXPECT_FALSE(admission.Admit(head(Socket(1002), "POST", "/v1/jobs", 60'000'000)).refuse);
  submit.hold.reset();
  EXPECT_FALSE(admission.Admit(head(alice, "POST", "/v1/jobs", 60'000'000)).refuse);
}

}  // namespace
}  // namespace berth::testing
