// GPU fractions under MPS (agent/mps.h): a rank's share as MPS environment, one control daemon per
// device started for the first rank and quit after the last, a daemon that dies, one that will not
// start, and daemons taken back by a restarted agent. The control program is a stand-in shell
// script that behaves as nvidia-cuda-mps-control does for these calls: `-f` runs the daemon in the
// foreground (it opens its control pipe, then waits), and a client reads "quit" on its stdin.
#include "agent/mps.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "agent/discovery.h"
#include "agent/node_gpus.h"
#include "common/files.h"
#include "common/strings.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

constexpr char kStandIn[] = R"sh(#!/bin/sh
if [ "$1" = "-f" ]; then
  env > "$CUDA_MPS_LOG_DIRECTORY/daemon-env"
  if [ -e "$CUDA_MPS_LOG_DIRECTORY/../../../fail" ]; then echo "cannot find a GPU to serve"; exit 1; fi
  echo $$ > "$CUDA_MPS_PIPE_DIRECTORY/pid"
  : > "$CUDA_MPS_PIPE_DIRECTORY/control"
  exec sleep 120
fi
read cmd
echo "$cmd" >> "$CUDA_MPS_LOG_DIRECTORY/commands"
[ "$cmd" = quit ] && kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/pid")"
exit 0
)sh";

bool Alive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  const std::string stat = ReadFileOr("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

bool WaitGone(pid_t pid) {
  for (int i = 0; i < 500 && Alive(pid); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return !Alive(pid);
}

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    control_ = tmp_.File(kMpsControl);
    { std::ofstream(control_) << kStandIn; }
    ::chmod(control_.c_str(), 0755);
    mps_.Configure(control_, tmp_.File("mps"));
  }
  void TearDown() override {
    for (int device : {0, 1, 100}) {
      if (pid_t pid = mps_.DaemonOf(device)) ::kill(pid, SIGKILL);
    }
  }
  std::string DeviceFile(int device, const std::string& name) {
    return tmp_.File("mps/" + std::to_string(device) + "/" + name);
  }

  testing::TempDir tmp_;
  std::string control_;
  MpsDaemons mps_;
};

TEST(MpsEnvironment, ARanksShareIsItsThreadPercentageAndItsShareOfTheDevicesMemory) {
  auto env =
      MpsClientEnvironment({.device = 0, .cuda_id = "0", .milli = 500, .device_memory = 15360},
                           "/s/mps/0/pipe", "/s/mps/0/log");
  EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], "/s/mps/0/pipe");
  EXPECT_EQ(env["CUDA_MPS_LOG_DIRECTORY"], "/s/mps/0/log");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=7680M");
  env = MpsClientEnvironment({.device = 1, .cuda_id = "1", .milli = 250, .device_memory = 40960},
                             "p", "l");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
  // A device whose memory is not known gets no memory limit; a tiny share still gets 1%.
  env = MpsClientEnvironment({.device = 1, .cuda_id = "1", .milli = 5}, "p", "l");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "1");
  EXPECT_EQ(env.count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u);
}

TEST_F(MpsTest, TheFirstRankOnADeviceStartsItsDaemonTheLastQuitsIt) {
  EXPECT_EQ(mps_.Sharing(), "mps");
  auto a =
      mps_.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500, .device_memory = 15360});
  ASSERT_TRUE(a.ok()) << a.status().message();
  const pid_t daemon = mps_.DaemonOf(0);
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(Alive(daemon));
  EXPECT_EQ((*a)["CUDA_MPS_PIPE_DIRECTORY"], DeviceFile(0, "pipe"));
  // The daemon sees its device only, numbered as nvidia-smi numbers it.
  const std::string env = ReadFileOr(DeviceFile(0, "log/daemon-env"));
  EXPECT_NE(env.find("CUDA_VISIBLE_DEVICES=0\n"), std::string::npos) << env;
  EXPECT_NE(env.find("CUDA_DEVICE_ORDER=PCI_BUS_ID\n"), std::string::npos) << env;
  EXPECT_NE(env.find("CUDA_MPS_PIPE_DIRECTORY=" + DeviceFile(0, "pipe") + "\n"), std::string::npos);

  // A second rank on the device shares the daemon; one on another device gets its own.
  ASSERT_TRUE(mps_.Acquire("2-1-0", {.device = 0, .cuda_id = "0", .milli = 250}).ok());
  EXPECT_EQ(mps_.DaemonOf(0), daemon);
  ASSERT_TRUE(mps_.Acquire("3-1-0", {.device = 100, .cuda_id = "MIG-x", .milli = 500}).ok());
  EXPECT_NE(mps_.DaemonOf(100), 0);
  EXPECT_NE(ReadFileOr(DeviceFile(100, "log/daemon-env")).find("CUDA_VISIBLE_DEVICES=MIG-x\n"),
            std::string::npos);

  mps_.Release("1-1-0");
  EXPECT_TRUE(Alive(daemon));
  mps_.Release("2-1-0");
  EXPECT_TRUE(WaitGone(daemon));
  EXPECT_EQ(mps_.DaemonOf(0), 0);
  EXPECT_EQ(ReadFileOr(DeviceFile(0, "log/commands")), "quit\n");
  mps_.Release("2-1-0");  // again, and for a rank it never had: nothing
  mps_.Release("9-1-0");
  EXPECT_NE(mps_.DaemonOf(100), 0);
}

TEST_F(MpsTest, ADaemonThatDiesEndsOnlyTheRanksOnItsDeviceAndTheNextLaunchStartsAnother) {
  ASSERT_TRUE(mps_.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500}).ok());
  ASSERT_TRUE(mps_.Acquire("2-1-0", {.device = 0, .cuda_id = "0", .milli = 500}).ok());
  ASSERT_TRUE(mps_.Acquire("3-1-0", {.device = 1, .cuda_id = "1", .milli = 500}).ok());
  EXPECT_TRUE(mps_.Check().empty());
  const pid_t dead = mps_.DaemonOf(0);
  ::kill(dead, SIGKILL);
  ASSERT_TRUE(WaitGone(dead));
  auto lost = mps_.Check();
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0].first, "1-1-0");
  EXPECT_EQ(lost[1].first, "2-1-0");
  EXPECT_NE(lost[0].second.find("MPS daemon"), std::string::npos) << lost[0].second;
  EXPECT_NE(lost[0].second.find("died"), std::string::npos) << lost[0].second;
  EXPECT_TRUE(mps_.Check().empty());  // said once
  EXPECT_NE(mps_.DaemonOf(1), 0);     // the other device's is untouched

  ASSERT_TRUE(mps_.Acquire("4-1-0", {.device = 0, .cuda_id = "0", .milli = 500}).ok());
  EXPECT_NE(mps_.DaemonOf(0), 0);
  EXPECT_NE(mps_.DaemonOf(0), dead);
  mps_.Release("1-1-0");  // the lost ranks' ends later: the new daemon is not theirs
  EXPECT_NE(mps_.DaemonOf(0), 0);
}

TEST_F(MpsTest, ADaemonThatWillNotStartFailsTheLaunchSayingWhy) {
  std::ofstream(tmp_.File("fail")) << "";
  auto a = mps_.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("exited at start: cannot find a GPU to serve"),
            std::string::npos)
      << a.status().message();
  EXPECT_EQ(mps_.DaemonOf(0), 0);
  ::unlink(tmp_.File("fail").c_str());
  EXPECT_TRUE(mps_.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500}).ok());
}

TEST_F(MpsTest, ADaemonThatNeverOpensItsPipeIsKilledAtTheTimeout) {
  { std::ofstream(control_) << "#!/bin/sh\necho starting\nexec sleep 120\n"; }
  auto a = mps_.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500}, 300);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("did not open its control pipe in time: starting"),
            std::string::npos)
      << a.status().message();
}

TEST_F(MpsTest, ARestartedAgentTakesItsDaemonsBackWithTheRanksOnThem) {
  auto a = mps_.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500});
  ASSERT_TRUE(a.ok());
  const pid_t daemon = mps_.DaemonOf(0);
  MpsDaemons again(control_, tmp_.File("mps"));
  EXPECT_TRUE(again.Adopt("1-1-0", *a));
  EXPECT_EQ(again.DaemonOf(0), daemon);
  EXPECT_TRUE(again.Adopt("5-1-0", {{"PATH", "/bin"}}));  // a rank without a share
  EXPECT_TRUE(again.Adopt("6-1-0", {{"CUDA_MPS_PIPE_DIRECTORY", "/elsewhere/pipe"}}));
  again.Release("1-1-0");
  EXPECT_TRUE(WaitGone(daemon));
  // A rank whose daemon died while no agent ran has lost its share.
  MpsDaemons third(control_, tmp_.File("mps"));
  EXPECT_FALSE(third.Adopt("1-1-0", *a));
}

TEST(MpsSharing, ANodeWithoutTheControlProgramEnforcesNoFractions) {
  MpsDaemons mps("", "/nowhere");
  EXPECT_EQ(mps.Sharing(), "none");
  auto a = mps.Acquire("1-1-0", {.device = 0, .cuda_id = "0", .milli = 500});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(kMpsControl), std::string::npos);
}

TEST(MpsShare, ADevicesMemoryComesFromItsProfileNvidiaSmiOrItsDeclaredType) {
  auto slices = ParseMigDeclaration("0=3g.40gb,1g.10gb+me", 2, "n");
  ASSERT_TRUE(slices.ok());
  NodeGpus gpus({{0, "A100"}, {1, "T4"}}, *slices, {}, {}, "/dev");
  MpsShare slice = gpus.MpsShareOf(100, 500);
  EXPECT_EQ(slice.cuda_id, (*slices)[0].uuid);
  EXPECT_EQ(slice.device_memory, 40960);
  EXPECT_EQ(gpus.MpsShareOf(101, 500).device_memory, 10240);
  MpsShare whole = gpus.MpsShareOf(1, 250);
  EXPECT_EQ(whole.cuda_id, "1");
  EXPECT_EQ(whole.milli, 250);
  EXPECT_EQ(whole.device_memory, 15360);  // a T4's
  gpus.set_memory({{1, 15109}});
  EXPECT_EQ(gpus.MpsShareOf(1, 250).device_memory, 15109);  // what nvidia-smi said
  NodeGpus odd({{0, "MYSTERY"}}, {}, {}, {}, "/dev");
  EXPECT_FALSE(odd.MpsShareOf(0, 500).device_memory.has_value());
}

TEST(MpsShare, NvidiaSmisMemoryTotals) {
  EXPECT_EQ(ParseGpuMemory("0, 81559 MiB\n1, 81559 MiB\n"),
            (std::map<int, Mib>{{0, 81559}, {1, 81559}}));
  EXPECT_EQ(ParseGpuMemory("0, [N/A]\nx, 5 MiB\n2, 15360 MiB\n\n"),
            (std::map<int, Mib>{{2, 15360}}));
  EXPECT_EQ(DeclaredGpuMemory("H100"), 81559);
  EXPECT_FALSE(DeclaredGpuMemory("TPU").has_value());
}

}  // namespace
}  // namespace berth
