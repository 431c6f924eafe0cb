// The server's relay of interactive sessions (server/http/terminal_bridges.h) with in-memory
// WebSockets (tests/fakes/fake_websocket.h): the node's side joins the user's by session id and
// node, both ways are relayed, either side's end ends the other, a node that never comes times the
// user out, and the caps hold.
#include "server/http/terminal_bridges.h"

#include <gtest/gtest.h>

#include "fakes/fake_channel.h"
#include "fakes/fake_websocket.h"

namespace berth {
namespace {

using testing::FakeWebSocket;

TerminalBridges::Target Target(const std::string& user = "ada", const std::string& node = "n1") {
  return {.job = 7, .attempt = 1, .rank = 0, .node = node, .user = user};
}

proto::WatchMessage Invite(const std::string& sid) {
  return proto::SessionMessage{sid, 7, 1, 0, 0};
}

// The session ids of the invitations sent to `node`, in order.
std::vector<std::string> Invited(const testing::FakeChannel& nodes, const std::string& node) {
  std::vector<std::string> sids;
  for (const auto& sent : nodes.sent()) {
    const auto* invitation = std::get_if<proto::SessionMessage>(&sent.message);
    if (sent.node == node && invitation) sids.push_back(invitation->sid);
  }
  return sids;
}

TEST(TerminalBridges, TheNodeJoinsTheUserAndBothWaysAreRelayed) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes);
  auto user = std::make_shared<FakeWebSocket>();
  auto sid = bridges.Open(user, Target(), 0, Invite);
  ASSERT_TRUE(sid.ok());
  EXPECT_EQ(sid->size(), 32u);
  EXPECT_EQ(bridges.CheckWaiting(*sid, "n2").code(), Code::kForbidden) << "another node's";
  EXPECT_EQ(bridges.CheckWaiting("0123456789abcdef", "n1").code(), Code::kNotFound);
  ASSERT_TRUE(bridges.CheckWaiting(*sid, "n1").ok());
  user->Push("typed before the node came");
  auto node = std::make_shared<FakeWebSocket>();
  bridges.Join(*sid, node);
  EXPECT_EQ(bridges.CheckWaiting(*sid, "n1").code(), Code::kNotFound) << "joined: not twice";
  user->Push("ls\n");
  node->Push("output");
  EXPECT_EQ(node->sent(), (std::vector<std::string>{"typed before the node came", "ls\n"}));
  EXPECT_EQ(user->sent(), (std::vector<std::string>{"output"}));
  EXPECT_EQ(bridges.size(), 1u);
  // The job ended: the node closes normally, and so is the user's side.
  node->PeerCloses(1000);
  EXPECT_TRUE(user->closed());
  EXPECT_EQ(user->close_code(), 1000);
  EXPECT_EQ(bridges.size(), 0u);
}

// The node is invited when the user comes; a node that registers again (its new session's queue
// starts empty, as after a server restart) is invited again to what still waits for it, and only
// to that: not to sessions it joined, nor to other nodes'.
TEST(TerminalBridges, TheNodeIsInvitedAgainWhenItRegistersAgain) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes);
  auto joined_user = std::make_shared<FakeWebSocket>();
  auto joined = bridges.Open(joined_user, Target(), 0, Invite);
  auto waiting = bridges.Open(std::make_shared<FakeWebSocket>(), Target(), 0, Invite);
  auto elsewhere = bridges.Open(std::make_shared<FakeWebSocket>(), Target("ada", "n2"), 0, Invite);
  ASSERT_TRUE(joined.ok() && waiting.ok() && elsewhere.ok());
  EXPECT_EQ(Invited(nodes, "n1"), (std::vector<std::string>{*joined, *waiting}));
  EXPECT_EQ(Invited(nodes, "n2"), (std::vector<std::string>{*elsewhere}));
  auto joined_node = std::make_shared<FakeWebSocket>();
  bridges.Join(*joined, joined_node);
  bridges.InviteAgain("n1");
  EXPECT_EQ(Invited(nodes, "n1"), (std::vector<std::string>{*joined, *waiting, *waiting}));
  EXPECT_EQ(Invited(nodes, "n2"), (std::vector<std::string>{*elsewhere}));
  // Invited again, it joins: the session is relayed, and not invited a third time.
  ASSERT_TRUE(bridges.CheckWaiting(*waiting, "n1").ok());
  auto waiting_node = std::make_shared<FakeWebSocket>();
  bridges.Join(*waiting, waiting_node);
  bridges.InviteAgain("n1");
  EXPECT_EQ(Invited(nodes, "n1").size(), 3u);
  // The jobs end: the relayed sessions close (and their relays let go of the sockets).
  joined_node->PeerCloses(1000);
  waiting_node->PeerCloses(1000);
  EXPECT_EQ(bridges.size(), 1u) << "n2's, still waiting";
}

TEST(TerminalBridges, AUserWhoLeavesClosesTheNodesSide) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes);
  auto user = std::make_shared<FakeWebSocket>();
  auto sid = bridges.Open(user, Target(), 0, Invite);
  ASSERT_TRUE(sid.ok());
  auto node = std::make_shared<FakeWebSocket>();
  bridges.Join(*sid, node);
  user->PeerCloses(1006);
  EXPECT_TRUE(node->closed());
  EXPECT_EQ(node->close_code(), 4001);
  EXPECT_EQ(bridges.size(), 0u);
}

// A node's refusal (an application's close code, 4000-4999) reaches the user as it came, reason
// and all: it says why (a port the job does not listen on).
TEST(TerminalBridges, ANodesRefusalReachesTheUserWithItsReason) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes);
  auto user = std::make_shared<FakeWebSocket>();
  auto sid = bridges.Open(user, Target(), 0, Invite);
  ASSERT_TRUE(sid.ok());
  auto node = std::make_shared<FakeWebSocket>();
  bridges.Join(*sid, node);
  node->PeerCloses(4009, "nothing listens on port 8888 of the node");
  EXPECT_EQ(user->close_code(), 4009);
  EXPECT_EQ(user->close_reason(), "nothing listens on port 8888 of the node");
}

TEST(TerminalBridges, ANodeThatNeverComesTimesTheUserOut) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes, 16, 4, 10'000);
  auto user = std::make_shared<FakeWebSocket>();
  auto sid = bridges.Open(user, Target(), 1'000, Invite);
  ASSERT_TRUE(sid.ok());
  bridges.ExpireWaiting(10'999);
  EXPECT_FALSE(user->closed());
  EXPECT_EQ(bridges.unanswered(), 0u);
  bridges.ExpireWaiting(11'000);
  EXPECT_TRUE(user->closed());
  EXPECT_EQ(user->close_code(), 4004);
  EXPECT_EQ(bridges.size(), 0u);
  EXPECT_EQ(bridges.unanswered(), 1u);
  auto late = std::make_shared<FakeWebSocket>();
  bridges.Join(*sid, late);
  EXPECT_EQ(late->close_code(), 4004) << "a node that comes too late is closed";
}

TEST(TerminalBridges, CapsPerUserAndInAll) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes, 3, 2, 10'000);
  std::vector<std::shared_ptr<FakeWebSocket>> kept;
  auto open = [&](const std::string& user) {
    kept.push_back(std::make_shared<FakeWebSocket>());
    return bridges.Open(kept.back(), Target(user), 0, Invite);
  };
  ASSERT_TRUE(open("ada").ok());
  ASSERT_TRUE(open("ada").ok());
  auto third = open("ada");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), Code::kTooLarge);
  EXPECT_NE(third.status().message().find("limit per user"), std::string::npos);
  EXPECT_EQ(kept.back()->close_code(), 1013);
  EXPECT_EQ(bridges.CheckRoom("ada").code(), Code::kTooLarge);
  ASSERT_TRUE(open("bob").ok());
  auto full = open("carol");
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("its limit"), std::string::npos);
  // One ends (its node never came): room again.
  bridges.ExpireWaiting(10'000);
  EXPECT_EQ(bridges.size(), 0u);
  EXPECT_TRUE(bridges.CheckRoom("ada").ok());
}

// When each job last had a session (for --interactive-idle-limit): a job with a session open or
// waiting is seen at each call; one whose session ended keeps its last sighting until it is older
// than the limit.
TEST(TerminalBridges, SeenAtRemembersEachJobsLastSession) {
  testing::FakeChannel nodes;
  TerminalBridges bridges(nodes);
  auto user = std::make_shared<FakeWebSocket>();
  TerminalBridges::Target other = Target();
  other.job = 8;
  ASSERT_TRUE(bridges.Open(user, Target(), 0, Invite).ok());
  auto waiting = std::make_shared<FakeWebSocket>();
  auto sid = bridges.Open(waiting, other, 0, Invite);
  ASSERT_TRUE(sid.ok());
  EXPECT_EQ(bridges.SeenAt(1'000, 60'000), (std::map<int64_t, int64_t>{{7, 1'000}, {8, 1'000}}));
  auto node = std::make_shared<FakeWebSocket>();
  bridges.Join(*sid, node);
  node->PeerCloses(1000);  // job 8's session ended
  EXPECT_EQ(bridges.SeenAt(5'000, 60'000), (std::map<int64_t, int64_t>{{7, 5'000}, {8, 1'000}}));
  EXPECT_EQ(bridges.SeenAt(61'001, 60'000), (std::map<int64_t, int64_t>{{7, 61'001}}));
}

}  // namespace
}  // namespace berth
