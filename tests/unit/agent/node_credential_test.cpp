// How an agent comes by its node's own credential, against a fake join (no server): the kept one
// wins, a first start joins once and keeps it private, an unreachable server is retried, and a
// refusal ends the start saying what it was.
#include "agent/node_credential.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "fakes/temp_dir.h"

namespace berth::testing {
namespace {

TEST(NodeCredential, AFirstStartJoinsOnceAndKeepsTheCredentialPrivate) {
  TempDir dir;
  int joins = 0;
  JoinFunction join = [&](const std::string& token,
                          const std::string& node) -> Result<std::string> {
    ++joins;
    EXPECT_EQ(token, "join-secret");
    EXPECT_EQ(node, "n1");
    return std::string("node-secret");
  };
  auto first = ObtainNodeCredential(dir.File("state"), "join-secret", "n1", join);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*first, "node-secret");
  struct stat st {};
  ASSERT_EQ(::stat(dir.File("state/node-credential").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // The next start uses what it kept, join token or not, and joins no more.
  EXPECT_EQ(*ObtainNodeCredential(dir.File("state"), "join-secret", "n1", join), "node-secret");
  EXPECT_EQ(*ObtainNodeCredential(dir.File("state"), "", "n1", join), "node-secret");
  EXPECT_EQ(joins, 1);
}

TEST(NodeCredential, WithoutAJoinTokenOrAKeptCredentialTheClusterTokenIsUsed) {
  TempDir dir;
  JoinFunction join = [](const std::string&, const std::string&) -> Result<std::string> {
    ADD_FAILURE() << "joined without a join token";
    return Status::Internal("no");
  };
  auto none = ObtainNodeCredential(dir.path(), "", "n1", join);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
}

TEST(NodeCredential, AnUnreachableServerIsRetriedAndARefusalEndsTheStart) {
  TempDir dir;
  int calls = 0;
  JoinFunction flaky = [&](const std::string&, const std::string&) -> Result<std::string> {
    if (++calls < 3) return Status::Unavailable("connection refused");
    return std::string("node-secret");
  };
  EXPECT_EQ(*ObtainNodeCredential(dir.File("a"), "join", "n1", flaky), "node-secret");
  EXPECT_EQ(calls, 3);

  JoinFunction refused = [](const std::string&, const std::string&) -> Result<std::string> {
    return Status::Unauthorized("join token 'join-1' was used or revoked");
  };
  auto no = ObtainNodeCredential(dir.File("b"), "join", "n1", refused);
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.status().code(), Code::kUnauthorized);
  EXPECT_NE(no.status().message().find("joining the cluster as node n1: join token"),
            std::string::npos);
  EXPECT_FALSE(std::ifstream(dir.File("b/node-credential")).good());

  JoinFunction down = [](const std::string&, const std::string&) -> Result<std::string> {
    return Status::Unavailable("connection refused");
  };
  auto gave_up = ObtainNodeCredential(dir.File("c"), "join", "n1", down, /*give_up_ms=*/300);
  EXPECT_EQ(gave_up.status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace berth::testing
