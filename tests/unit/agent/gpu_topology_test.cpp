// GPU topology from nvidia-smi topo -m (agent/gpu_topology.h), the devices it marks, the CPUs near
// a grant (agent/node_gpus.h) and the pins taken from them first (agent/cpu_pins.h).
#include "agent/gpu_topology.h"

#include <gtest/gtest.h>

#include <fstream>

#include "agent/cpu_pins.h"
#include "agent/node_gpus.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

// An 8-GPU node as nvidia-smi prints it (tab-separated, a NIC column and row, the legend): two
// NVLink islands of four whose GPUs interleave (0,2,4,6 and 1,3,5,7), PCIe switches 0-3 and 4-7,
// NUMA nodes 0 and 1.
constexpr char kEightGpus[] =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA "
    "ID\n"
    "GPU0\t X \tPXB\tNV12\tPXB\tNV12\tSYS\tNV12\tSYS\tPXB\t0-15,64-79\t0\t\tN/A\n"
    "GPU1\tPXB\t X \tPXB\tNV12\tSYS\tNV12\tSYS\tNV12\tPXB\t0-15,64-79\t0\t\tN/A\n"
    "GPU2\tNV12\tPXB\t X \tPXB\tNV12\tSYS\tNV12\tSYS\tPXB\t0-15,64-79\t0\t\tN/A\n"
    "GPU3\tPXB\tNV12\tPXB\t X \tSYS\tNV12\tSYS\tNV12\tPXB\t0-15,64-79\t0\t\tN/A\n"
    "GPU4\tNV12\tSYS\tNV12\tSYS\t X \tPIX\tNV12\tPIX\tSYS\t32-47,96-111\t1\t\tN/A\n"
    "GPU5\tSYS\tNV12\tSYS\tNV12\tPIX\t X \tPIX\tNV12\tSYS\t32-47,96-111\t1\t\tN/A\n"
    "GPU6\tNV12\tSYS\tNV12\tSYS\tNV12\tPIX\t X \tPIX\tSYS\t32-47,96-111\t1\t\tN/A\n"
    "GPU7\tSYS\tNV12\tSYS\tNV12\tPIX\tNV12\tPIX\t X \tSYS\t32-47,96-111\t1\t\tN/A\n"
    "NIC0\tPXB\tPXB\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n";

TEST(GpuTopology, IslandsSwitchesAndNumaNodesFromTheMatrix) {
  Result<GpuTopology> t = ParseTopoMatrix(kEightGpus);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 8u);
  for (int gpu : {0, 2, 4, 6}) EXPECT_EQ(t->at(gpu).nvlink, 1) << gpu;
  for (int gpu : {1, 3, 5, 7}) EXPECT_EQ(t->at(gpu).nvlink, 2) << gpu;
  for (int gpu = 0; gpu < 8; ++gpu) {
    EXPECT_EQ(t->at(gpu).pcie, gpu < 4 ? 1 : 2) << gpu;
    EXPECT_EQ(t->at(gpu).numa, gpu < 4 ? 0 : 1) << gpu;
  }
  EXPECT_EQ(t->at(5).cpus.front(), 32);
  EXPECT_EQ(t->at(5).cpus.size(), 32u);
}

TEST(GpuTopology, WithoutNvlinkOrNumaColumnsGroupsByWhatTheLinksSay) {
  // A 4-GPU PCIe box with its header underlined as on a terminal and no NUMA column: 0-1 under one
  // switch, 2-3 joined only through their host bridge, the two pairs on different sockets.
  const std::string text =
      "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\x1b[0m\n"
      "GPU0\t X \tPIX\tSYS\tSYS\t0-7\n"
      "GPU1\tPIX\t X \tSYS\tSYS\t0-7\n"
      "GPU2\tSYS\tSYS\t X \tPHB\t8-15\n"
      "GPU3\tSYS\tSYS\tPHB\t X \t8-15\n";
  Result<GpuTopology> t = ParseTopoMatrix(text);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->at(0).nvlink, 0);
  EXPECT_EQ(t->at(0).pcie, 1);
  EXPECT_EQ(t->at(1).pcie, 1);
  EXPECT_EQ(t->at(2).pcie, 0);  // PHB: not one switch
  EXPECT_EQ(t->at(0).numa, 0);  // joined by anything but SYS, numbered from 0
  EXPECT_EQ(t->at(3).numa, 1);
  EXPECT_EQ(t->at(3).cpus, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(GpuTopology, BadMatricesSayWhichLineAndWhy) {
  auto error = [](const std::string& text) {
    Result<GpuTopology> t = ParseTopoMatrix(text);
    return t.ok() ? std::string("accepted") : t.status().message();
  };
  EXPECT_NE(error("hello\n").find("line 1: expected nvidia-smi topo -m's header"),
            std::string::npos);
  EXPECT_NE(error("\tGPU0\tGPU1\nGPU0\t X \tWARP\nGPU1\tNV4\t X \n")
                .find("line 2: GPU0 to GPU1 is 'WARP': expected X, NV#"),
            std::string::npos);
  EXPECT_NE(error("\tGPU0\tGPU1\nGPU0 X NV4\n").find("line 2: GPU0 has 0 columns"),
            std::string::npos);
  EXPECT_NE(error("\tGPU0\nGPU0\t X \nGPU0\t X \n").find("line 3: GPU0 listed twice"),
            std::string::npos);
  EXPECT_EQ(error(""), "GPU topology: no GPU rows (is it nvidia-smi topo -m?)");
}

TEST(GpuTopology, TheNodesDevicesCarryItAndSlicesTheirGpus) {
  TempDir dir;
  const std::string file = dir.path() + "/topo";
  std::ofstream(file) << kEightGpus;
  auto gpus = LoadNodeGpus("A100:8", "6=3g.40gb,3g.40gb", "n1", {}, "/nonexistent", file);
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  for (const GpuDevice& d : gpus->offered()) {
    EXPECT_EQ(d.nvlink, d.gpu() % 2 == 0 ? 1 : 2) << d.index;
    EXPECT_EQ(d.numa, d.gpu() < 4 ? 0 : 1) << d.index;
  }
  // The CPUs near a grant are those of the GPUs it opens (a slice: its GPU's).
  EXPECT_EQ(gpus->NearCpus({0}).size(), 32u);
  EXPECT_EQ(gpus->NearCpus({0, 5}).size(), 64u);
  EXPECT_TRUE(gpus->NearCpus({}).empty());

  auto too_few = LoadNodeGpus("A100:4", "", "n1", {}, "/nonexistent", file);
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("lists GPU4, which this node does not have (4 GPUs)"),
            std::string::npos);
  auto missing = LoadNodeGpus("A100:8", "", "n1", {}, "/nonexistent", dir.path() + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--gpu-topology"), std::string::npos);
}

TEST(GpuTopology, PinnedRanksGetCpusNearTheirGpusWhileThereAreEnough) {
  CpuPins pins;
  pins.Configure({0, 1, 2, 3, 4, 5, 6, 7}, {});
  auto a = pins.Pin("a", 2, {4, 5, 6, 7});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<int>{4, 5}));
  auto b = pins.Pin("b", 3, {4, 5, 6, 7});  // two left near: anywhere instead
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<int>{0, 1, 2}));
  auto c = pins.Pin("c", 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<int>{3}));
}

// `nvidia-smi -q` as a GB200 node prints it (abridged to what matters: every GPU has a Fabric
// section, with a nested Health section), and as an H100 node without a multi-node fabric does.
std::string FabricQuery(const std::vector<std::pair<std::string, std::string>>& gpus,
                        const std::string& state = "Completed") {
  std::string out =
      "\n==============NVSMI LOG==============\n\n"
      "Timestamp                                 : Thu Dec  3 06:00:00 2026\n"
      "Driver Version                            : 570.86.15\n"
      "CUDA Version                              : 12.8\n\n"
      "Attached GPUs                             : " +
      std::to_string(gpus.size()) + "\n";
  int k = 0;
  for (const auto& [cluster, clique] : gpus) {
    out += "GPU 00000008:0" + std::to_string(k++) +
           ":00.0\n"
           "    Product Name                          : NVIDIA GB200\n"
           "    Fabric\n"
           "        State                             : " +
           state +
           "\n"
           "        Status                            : Success\n"
           "        CliqueId                          : " +
           clique +
           "\n"
           "        ClusterUUID                       : " +
           cluster +
           "\n"
           "        Health\n"
           "            Bandwidth                     : Full\n"
           "    Processes                             : None\n";
  }
  return out;
}

TEST(NvlinkDomain, ClusterUuidAndCliqueOfTheGpusFabric) {
  const std::string uuid = "8b1f9d0c-4e5a-4f0b-9b2a-6f1c2d3e4a5b";
  EXPECT_EQ(ParseNvlinkDomain(FabricQuery({{uuid, "7"}, {uuid, "7"}, {uuid, "7"}, {uuid, "7"}})),
            uuid + ".7");
}

TEST(NvlinkDomain, NoneWithoutACompletedFabricOrWhereGpusDisagree) {
  const std::string uuid = "8b1f9d0c-4e5a-4f0b-9b2a-6f1c2d3e4a5b";
  EXPECT_EQ(ParseNvlinkDomain(FabricQuery({{"N/A", "N/A"}, {"N/A", "N/A"}}, "N/A")), std::nullopt);
  EXPECT_EQ(ParseNvlinkDomain(FabricQuery({{uuid, "7"}}, "In Progress")), std::nullopt);
  EXPECT_EQ(ParseNvlinkDomain(FabricQuery({{"00000000-0000-0000-0000-000000000000", "0"}})),
            std::nullopt);
  EXPECT_EQ(ParseNvlinkDomain(FabricQuery({{uuid, "7"}, {uuid, "8"}})), std::nullopt);
  EXPECT_EQ(ParseNvlinkDomain(""), std::nullopt);
  // A key of the same name outside the Fabric section is not the fabric's.
  EXPECT_EQ(ParseNvlinkDomain("GPU 0\n    State : Completed\n    ClusterUUID : " + uuid +
                              "\n    CliqueId : 3\n"),
            std::nullopt);
}

}  // namespace
}  // namespace berth
