// Which listener a port-forward may reach (agent/port_owner.h): the kernel's TCP tables read from
// a fake /proc tree (listening lines only, IPv4 and IPv6, the any-address turned into loopback),
// the rank's user and processes required, and one real socket of this process found in /proc.
#include "agent/port_owner.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/files.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using testing::TempDir;

constexpr char kHeader[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n";

// A table line: `local` as the kernel prints it, state, uid, inode.
std::string Line(const std::string& local, const char* state, int uid, int inode) {
  return fmt::format(
      "   0: {} 00000000:0000 {} 00000000:00000000 00:00000000 00000000 {:5} "
      "       0 {} 1 0000000000000000 100 0 0 10 0\n",
      local, state, uid, inode);
}

std::string Text(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
    return fmt::format("{}:{}", buf, ntohs(sin->sin_port));
  }
  const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&a);
  ::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf));
  return fmt::format("[{}]:{}", buf, ntohs(sin6->sin6_port));
}

// The kernel prints each 32-bit word of an address as this host reads it.
std::string Hex(const void* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; i += 4) {
    uint32_t word = 0;
    std::memcpy(&word, static_cast<const char*>(bytes) + i, 4);
    out += fmt::format("{:08X}", word);
  }
  return out;
}
std::string V4(const char* ip, int port) {
  in_addr a{};
  ::inet_pton(AF_INET, ip, &a);
  return fmt::format("{}:{:04X}", Hex(&a, 4), port);
}
std::string V6(const char* ip, int port) {
  in6_addr a{};
  ::inet_pton(AF_INET6, ip, &a);
  return fmt::format("{}:{:04X}", Hex(&a, 16), port);
}

TEST(PortOwnerTest, OnlyListenersOnThePortAreRead) {
  std::string table = kHeader;
  table += Line(V4("127.0.0.1", 8888), "0A", 1000, 111);
  table += Line(V4("0.0.0.0", 8888), "01", 1000, 112);  // an established connection
  table += Line(V4("0.0.0.0", 9999), "0A", 1000, 113);  // another port
  table += Line(V4("10.1.2.3", 8888), "0A", 1001, 114);
  table += "garbage line\n   1: zz:zz 00000000:0000 0A x x x 1000 0 5\n";
  auto found = ParseTcpListeners(table, false, 8888);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].inode, 111u);
  EXPECT_EQ(found[0].uid, 1000u);
  EXPECT_EQ(Text(found[0].address), "127.0.0.1:8888");
  EXPECT_EQ(Text(ConnectAddressOf(found[1])), "10.1.2.3:8888");

  std::string table6 = kHeader;
  table6 += Line(V6("::", 8888), "0A", 1000, 211);
  table6 += Line(V6("::1", 8888), "0A", 1000, 212);
  auto found6 = ParseTcpListeners(table6, true, 8888);
  ASSERT_EQ(found6.size(), 2u);
  EXPECT_EQ(Text(found6[1].address), "[::1]:8888");
  // The any-address is reached through loopback.
  EXPECT_EQ(Text(ConnectAddressOf(found6[0])), "[::1]:8888");
  TcpListener any4 = ParseTcpListeners(kHeader + Line(V4("0.0.0.0", 80), "0A", 0, 1), false, 80)[0];
  EXPECT_EQ(Text(ConnectAddressOf(any4)), "127.0.0.1:80");
}

class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(proc_.File("net"));
    ASSERT_TRUE(WriteFileAtomic(proc_.File("net/tcp"),
                                kHeader + Line(V4("0.0.0.0", 8888), "0A", 1000, 500) +
                                    Line(V4("127.0.0.1", 7777), "0A", 0, 600)));
    // No tcp6: a kernel without IPv6.
    Holds(41, 500);  // the rank's process holds 8888's socket
    Holds(42, 9);
  }
  void Holds(pid_t pid, int inode) {
    const std::string fd = proc_.File(std::to_string(pid) + "/fd");
    std::filesystem::create_directories(fd);
    std::filesystem::create_symlink(fmt::format("socket:[{}]", inode), fd + "/3");
    std::filesystem::create_symlink("/dev/null", fd + "/0");
  }
  TempDir proc_;
};

TEST_F(FakeProc, TheRanksOwnListenerIsReached) {
  const std::set<pid_t> rank{41, 42};
  auto address = FindRankListener(proc_.path(), 8888, 1000, &rank);
  ASSERT_TRUE(address.ok()) << address.status().message();
  EXPECT_EQ(Text(*address), "127.0.0.1:8888");
  // Without cgroups, the user's own listener is enough.
  EXPECT_TRUE(FindRankListener(proc_.path(), 8888, 1000, nullptr).ok());
}

TEST_F(FakeProc, AnotherUsersOrProcesssOrNoListenerIsRefusedSayingWhich) {
  const std::set<pid_t> rank{41};
  const std::set<pid_t> other{42};
  auto root_port = FindRankListener(proc_.path(), 7777, 1000, &rank);
  ASSERT_EQ(root_port.status().code(), Code::kConflict);
  EXPECT_NE(root_port.status().message().find("another user"), std::string::npos);
  EXPECT_EQ(FindRankListener(proc_.path(), 7777, 1000, nullptr).status().code(), Code::kConflict);
  auto not_the_rank = FindRankListener(proc_.path(), 8888, 1000, &other);
  ASSERT_EQ(not_the_rank.status().code(), Code::kConflict);
  EXPECT_NE(not_the_rank.status().message().find("no process of this rank"), std::string::npos);
  auto nothing = FindRankListener(proc_.path(), 1234, 1000, &rank);
  ASSERT_EQ(nothing.status().code(), Code::kConflict);
  EXPECT_NE(nothing.status().message().find("nothing listens on port 1234"), std::string::npos);
}

TEST(PortOwnerTest, ARealListenerOfThisProcessIsFoundInProc) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::set<pid_t> me{::getpid()};
  auto found = FindRankListener("/proc", port, ::geteuid(), &me);
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(Text(*found), fmt::format("127.0.0.1:{}", port));
  const std::set<pid_t> init{1};
  if (::getpid() != 1) {
    EXPECT_FALSE(FindRankListener("/proc", port, ::geteuid(), &init).ok());
  }
  ::close(fd);
}

}  // namespace
}  // namespace berth
