// A command with no server configured starts a local cluster, except on a node of a real
// cluster: FindNodeAgent reads /proc's command lines to tell one (cli/connection.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/connection.h"
#include "fakes/temp_dir.h"

namespace berth::cli {
namespace {

using berth::testing::TempDir;

class NodeAgentTest : public ::testing::Test {
 protected:
  // A process `pid` whose command line is `argv`, in the fake /proc.
  void Process(int pid, const std::vector<std::string>& argv) {
    const std::string dir = proc_.File(std::to_string(pid));
    std::filesystem::create_directories(dir);
    std::ofstream out(dir + "/cmdline", std::ios::binary);
    for (const std::string& a : argv) out << a << '\0';
  }
  TempDir proc_;
};

TEST_F(NodeAgentTest, FindsARealAgentAndItsUsersSocket) {
  Process(10, {"/usr/bin/python3", "agent"});
  Process(11, {"/home/u/berth/build/src/berth", "agent", "--server", "http://127.0.0.1:4000",
               "--name", "local-0", "--state-dir", "/home/u/.berth/agents/local-0"});
  EXPECT_FALSE(FindNodeAgent(proc_.path()).has_value());  // a local cluster's own agent
  Process(12, {"/usr/lib/berth/berth-daemon", "agent", "--server=https://ctl:8765", "--state-dir",
               "/var/lib/berth-agent"});
  auto agent = FindNodeAgent(proc_.path());
  ASSERT_TRUE(agent.has_value());
  EXPECT_EQ(agent->pid, 12);
  EXPECT_EQ(agent->server, "https://ctl:8765");
  EXPECT_EQ(agent->user_socket, "/var/lib/berth-agent/berth.sock");
}

TEST_F(NodeAgentTest, SaysItsServerWhenItHasNoUsersSocket) {
  Process(12, {"berth", "agent", "--server", "https://ctl:8765", "--state-dir", "/var/lib/a",
               "--user-socket", "-"});
  auto agent = FindNodeAgent(proc_.path());
  ASSERT_TRUE(agent.has_value());
  EXPECT_EQ(agent->user_socket, "");
  Process(13, {"berth", "server"});
  EXPECT_EQ(FindNodeAgent(proc_.path())->pid, 12);
}

}  // namespace
}  // namespace berth::cli
