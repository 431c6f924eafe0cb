// GPU discovery and declaration, and the supervisor's event records.
#include "agent/discovery.h"

#include <gtest/gtest.h>

#include <map>

#include "supervise/supervisor.h"

namespace berth {
namespace {

TEST(Discovery, NormalizesNvidiaNamesToTaskFileNames) {
  EXPECT_EQ(NormalizeGpuName("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(NormalizeGpuName("Tesla V100-SXM2-16GB"), "V100");
  EXPECT_EQ(NormalizeGpuName("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(NormalizeGpuName("NVIDIA GeForce RTX 4090"), "RTX4090");
  EXPECT_EQ(NormalizeGpuName("NVIDIA L4"), "L4");
  EXPECT_EQ(NormalizeGpuName("Tesla T4"), "T4");
}

TEST(Discovery, ParsesNvidiaSmiCsv) {
  auto gpus = ParseNvidiaSmi("0, NVIDIA H100 80GB HBM3\n1, NVIDIA H100 80GB HBM3\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[1].type, "H100");
  EXPECT_TRUE(ParseNvidiaSmi("NVIDIA-SMI has failed\n").empty());
}

TEST(Discovery, DeclaredGpusBecomeDevicesZeroToN) {
  auto gpus = ParseGpuDeclaration("V100:4");
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 4u);
  EXPECT_EQ((*gpus)[3].index, 3);
  auto mixed = ParseGpuDeclaration("V100:2,T4:1");
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ((*mixed)[2].type, "T4");
  EXPECT_EQ((*mixed)[2].index, 2);
  EXPECT_FALSE(ParseGpuDeclaration("V100:x").ok());
  EXPECT_FALSE(ParseGpuDeclaration(":4").ok());
}

TEST(Discovery, DeclaredGpusWinOverNvidiaSmi) {
  NodeResources r = DiscoverNode("T4:2");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].type, "T4");
  EXPECT_GT(r.cpus, 0);
  EXPECT_GT(r.memory, 0);
}

TEST(SupervisorEvents, ParseWhatTheSupervisorWrites) {
  auto events = ParseEvents("setting_up\nrunning\nexited 3 run stopped by user\n");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, "setting_up");
  EXPECT_EQ(events[2].kind, "exited");
  EXPECT_EQ(events[2].exit_code, 3);
  EXPECT_EQ(events[2].phase, "run");
  EXPECT_EQ(events[2].reason, "stopped by user");
}

}  // namespace
// /dev/nvidiaN is named by the driver's minor number, which need not be nvidia-smi's index: the
// two are matched through the PCI bus id (nvidia-smi writes an 8-digit domain in upper case, the
// driver's /proc a 4-digit one in lower case). A GPU the driver does not list is left out.
TEST(GpuMinors, AreMatchedToIndicesByBusId) {
  const std::string smi = "0, 00000000:3B:00.0\n1, 00000000:18:00.0\n2, 00000000:AF:00.0\n";
  const std::map<std::string, std::string> information = {
      {"0000:18:00.0",
       "Model: NVIDIA H100\nIRQ: 42\nDevice Minor: 0\nBus Location: 0000:18:00.0\n"},
      {"0000:3b:00.0", "Model: NVIDIA H100\nDevice Minor: \t 1\n"},
  };
  EXPECT_EQ(ParseGpuMinors(smi, information), (std::map<int, int>{{0, 1}, {1, 0}}));
  EXPECT_TRUE(ParseGpuMinors("", information).empty());
}

}  // namespace berth
