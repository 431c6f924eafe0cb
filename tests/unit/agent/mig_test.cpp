// MIG slices: profile names, the declared layout (`--mig`), nvidia-smi's listing, the driver's
// capability table, the devices a node offers, and which device files a grant may open
// (agent/mig.h, agent/node_gpus.h).
#include "agent/mig.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>

#include "agent/node_gpus.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

TEST(Mig, ProfileNamesAreNvidiaSmis) {
  for (const char* ok : {"3g.40gb", "1g.10gb", "7g.80gb", "1g.10gb+me", "1c.3g.40gb", "1g.5gb"}) {
    EXPECT_TRUE(IsMigProfile(ok)) << ok;
  }
  for (const char* bad : {"", "3g", "3g.40", "8g.80gb", "0g.10gb", "3g.40gb+", "3g.40gb+ME",
                          "g.40gb", "3g.gb", "A100", "3g.40gb*2"}) {
    EXPECT_FALSE(IsMigProfile(bad)) << bad;
  }
}

TEST(Mig, ASlicesTypeIsItsGpusTypeAndProfile) {
  EXPECT_EQ(MigTypeName("A100", "3g.40gb"), "A100-3g.40gb");
  EXPECT_EQ(MigTypeName("H100", "1g.10gb+me"), "H100-1g.10gb-me");
}

TEST(Mig, ADeclaredLayoutNamesEachGpusSlices) {
  auto slices = ParseMigDeclaration("0=3g.40gb,3g.40gb;1=1g.10gb*7", 3, "n1");
  ASSERT_TRUE(slices.ok()) << slices.status().message();
  ASSERT_EQ(slices->size(), 9u);
  EXPECT_EQ((*slices)[0].index, 100);
  EXPECT_EQ((*slices)[0].gpu, 0);
  EXPECT_EQ((*slices)[0].profile, "3g.40gb");
  EXPECT_EQ((*slices)[0].gi, 1);
  EXPECT_EQ((*slices)[0].ci, 0);
  EXPECT_EQ((*slices)[1].index, 101);
  EXPECT_EQ((*slices)[1].gi, 2);
  EXPECT_EQ((*slices)[2].index, 200);
  EXPECT_EQ((*slices)[8].index, 206);
  EXPECT_EQ((*slices)[8].profile, "1g.10gb");
  // UUIDs are shaped as NVIDIA's, differ per slice and stay the same for the same node.
  EXPECT_EQ((*slices)[0].uuid.size(), 4u + 36u);
  EXPECT_TRUE((*slices)[0].uuid.starts_with("MIG-"));
  EXPECT_NE((*slices)[0].uuid, (*slices)[1].uuid);
  EXPECT_EQ(ParseMigDeclaration("0=3g.40gb,3g.40gb", 1, "n1")->at(1).uuid, (*slices)[1].uuid);
  EXPECT_NE(ParseMigDeclaration("0=3g.40gb,3g.40gb", 1, "n2")->at(1).uuid, (*slices)[1].uuid);
}

TEST(Mig, ABadLayoutSaysWhatIsWrong) {
  auto message = [](const std::string& decl) {
    auto r = ParseMigDeclaration(decl, 2, "n1");
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(message("2=1g.10gb").find("GPU 2 is not declared"), std::string::npos);
  EXPECT_NE(message("0=1g.10gb;0=1g.10gb").find("named twice"), std::string::npos);
  EXPECT_NE(message("0=9g.10gb").find("'9g.10gb' is not a MIG profile"), std::string::npos);
  EXPECT_NE(message("0=3g.40gb*3").find("take 9 compute slices; a GPU has 7"), std::string::npos);
  EXPECT_NE(message("0=1g.10gb*0").find("bad repeat"), std::string::npos);
  EXPECT_NE(message("x=1g.10gb").find("expected GPU=PROFILE"), std::string::npos);
  EXPECT_NE(message("1g.10gb").find("expected GPU=PROFILE"), std::string::npos);
  EXPECT_NE(message(";").find("no slice declared"), std::string::npos);
  EXPECT_EQ(message("0=4g.40gb,3g.40gb ; 1=7g.80gb"), "accepted");
}

TEST(Mig, NvidiaSmisListingGivesEachSliceItsGpuProfileAndUuid) {
  const std::string listing =
      "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
      "  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
      "  MIG 1g.5gb      Device  1: (UUID: MIG-1d099852-3be0-5e6c-8b16-11a7d76a4cd8)\n"
      "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)\n"
      "GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-0a1b2c3d-0000-1111-2222-333344446666)\n"
      "  MIG 7g.40gb     Device  0: (UUID: MIG-aaaabbbb-cccc-dddd-eeee-ffff00001111)\n";
  std::vector<MigSlice> slices = ParseNvidiaSmiMigList(listing);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].gpu, 0);
  EXPECT_EQ(slices[0].index, 100);
  EXPECT_EQ(slices[0].profile, "3g.20gb");
  EXPECT_EQ(slices[0].uuid, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f");
  EXPECT_EQ(slices[1].index, 101);
  EXPECT_EQ(slices[1].profile, "1g.5gb");
  EXPECT_EQ(slices[2].gpu, 2);
  EXPECT_EQ(slices[2].index, 300);
  EXPECT_TRUE(ParseNvidiaSmiMigList("No devices were found\n").empty());
}

// nvidia-smi's default output ends with a table of the MIG devices and their instance ids; with
// `-L`'s listing it gives each discovered slice the ids its capability files are named by.
TEST(Mig, NvidiaSmisTableGivesEachListedSliceItsInstanceIds) {
  const std::string table =
      "+-----------------------------------------------------------------------------+\n"
      "| MIG devices:                                                                |\n"
      "+------------------+----------------------+-----------+-----------------------+\n"
      "| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |\n"
      "|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|\n"
      "|                  |                      |        ECC|                       |\n"
      "|==================+======================+===========+=======================|\n"
      "|  0    2   0   0  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |\n"
      "|                  |      0MiB / 32767MiB |           |                       |\n"
      "+------------------+----------------------+-----------+-----------------------+\n"
      "|  0    7   0   1  |      6MiB /  4864MiB | 14      0 |  1   0    0    0    0 |\n"
      "|                  |      0MiB /  8191MiB |           |                       |\n"
      "+------------------+----------------------+-----------+-----------------------+\n"
      "|  2    0   0   0  |     13MiB / 40192MiB | 98      0 |  7   0    5    1    1 |\n"
      "+------------------+----------------------+-----------+-----------------------+\n";
  // (The GPU table above it has rows of numbers too: only rows after "MIG devices:" count.)
  const auto ids = ParseMigDevicesTable(
      "|   0  NVIDIA A100-SXM4-40GB  On | 00000000:3B:00.0 Off |   On |\n"
      "|  9    9   9   9  |\n" +
      table);
  EXPECT_EQ(ids, (std::map<std::pair<int, int>, std::pair<int, int>>{
                     {{0, 0}, {2, 0}}, {{0, 1}, {7, 0}}, {{2, 0}, {0, 0}}}));
  EXPECT_TRUE(ParseMigDevicesTable("| MIG devices: |\n|  No MIG devices found  |\n").empty());

  const std::string listing =
      "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
      "  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
      "  MIG 1g.5gb      Device  1: (UUID: MIG-1d099852-3be0-5e6c-8b16-11a7d76a4cd8)\n"
      "  MIG 1g.5gb      Device  2: (UUID: MIG-1d099852-3be0-5e6c-8b16-11a7d76a4cd9)\n";
  const std::vector<MigSlice> slices = WithInstanceIds(ParseNvidiaSmiMigList(listing), ids);
  ASSERT_EQ(slices.size(), 2u);  // device 2 is not in the table: its files are unknown
  EXPECT_EQ(slices[0].index, 100);
  EXPECT_EQ(slices[0].gi, 2);
  EXPECT_EQ(slices[1].index, 101);
  EXPECT_EQ(slices[1].gi, 7);
  EXPECT_EQ(slices[1].ci, 0);
}

TEST(Mig, TheCapabilityTableNamesEachInstancesFile) {
  const auto minors = ParseMigMinors(
      "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
      "gpu3/gi2/access 30\ngpu3/gi2/ci0/access 31\nnonsense\nbad x\n");
  EXPECT_EQ(minors.size(), 6u);
  EXPECT_EQ(minors.at("gpu0/gi1/ci0/access"), 13);
  const MigSlice slice{.index = 100, .gpu = 0, .profile = "3g.40gb", .gi = 2, .ci = 0};
  // Keyed by the GPU's device minor (3 here), not its index.
  EXPECT_EQ(
      MigCapFiles(slice, 3, minors, "/dev/nvidia-caps"),
      (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"}));
  EXPECT_TRUE(MigCapFiles(slice, 0, minors, "/dev/nvidia-caps").empty());
}

TEST(Mig, AGpuInMigModeIsOfferedOnlyAsItsSlices) {
  const std::vector<GpuDevice> gpus{{0, "A100"}, {1, "A100"}};
  auto slices = ParseMigDeclaration("0=3g.40gb,4g.40gb", 2, "n1");
  ASSERT_TRUE(slices.ok());
  const std::vector<GpuDevice> offered = OfferedDevices(gpus, *slices);
  EXPECT_EQ(offered, (std::vector<GpuDevice>{
                         {1, "A100", -1}, {100, "A100-3g.40gb", 0}, {101, "A100-4g.40gb", 0}}));
  EXPECT_TRUE(offered[1].slice());
  EXPECT_FALSE(offered[0].slice());
}

TEST(Mig, MigNeedsDeclaredGpusAndAGoodLayout) {
  EXPECT_FALSE(LoadNodeGpus("", "0=3g.40gb", "n1", {{0, "A100"}}, "/nonexistent").ok());
  EXPECT_FALSE(LoadNodeGpus("A100:1", "1=3g.40gb", "n1", {}, "/nonexistent").ok());
  auto gpus = LoadNodeGpus("A100:2", "1=1g.10gb*7", "n1", {}, "/nonexistent");
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  EXPECT_EQ(gpus->offered().size(), 8u);
  EXPECT_EQ(gpus->gpu_indices(), (std::vector<int>{0, 1}));
}

// Device files are made with mknod, which needs root.
class NodeGpusFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mknod of device files needs root";
    ASSERT_EQ(mkdir(dir_.File("nvidia-caps").c_str(), 0755), 0);
    for (int i = 0; i < 2; ++i) Node("nvidia" + std::to_string(i), 195, i);
    for (int minor : {12, 13, 21, 22, 31})
      Node("nvidia-caps/nvidia-cap" + std::to_string(minor), 238, minor);
    std::ofstream(dir_.File("nvidia-caps/mig-minors"))
        << "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
           "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"
           "gpu0/gi3/access 31\n";  // an instance not made (yet)
  }
  void Node(const std::string& name, int major, int minor) {
    ASSERT_EQ(mknod(dir_.File(name).c_str(), S_IFCHR | 0666, makedev(major, minor)), 0) << name;
  }
  testing::TempDir dir_;
};

TEST_F(NodeGpusFilesTest, ASliceOpensItsGpuAndItsOwnCapabilitiesOnly) {
  auto gpus = LoadNodeGpus("A100:2", "0=3g.40gb,3g.40gb", "n1", {}, dir_.path());
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  using Devices = std::vector<std::pair<int, int>>;
  // Slice 100 (GPU instance 1): GPU 0 and caps 12, 13 are its own; GPU 1 and caps 21, 22 are not,
  // nor 31, of an instance a re-slice may make while the rank runs.
  EXPECT_EQ(gpus->Denied({100}), (Devices{{195, 1}, {238, 21}, {238, 22}, {238, 31}}));
  EXPECT_EQ(gpus->GpusOpened({100}), (std::vector<int>{0}));
  EXPECT_EQ(gpus->CapFiles({100}),
            (std::vector<std::string>{dir_.File("nvidia-caps/nvidia-cap12"),
                                      dir_.File("nvidia-caps/nvidia-cap13")}));
  EXPECT_EQ(gpus->SliceUuids({101}), gpus->SliceUuids({101}));
  EXPECT_NE(gpus->SliceUuids({100}), gpus->SliceUuids({101}));
  EXPECT_TRUE(gpus->SliceUuids({100})->starts_with("MIG-"));
  // The whole GPU 1: GPU 0 and every slice's capabilities are denied.
  EXPECT_EQ(gpus->Denied({1}),
            (Devices{{195, 0}, {238, 12}, {238, 13}, {238, 21}, {238, 22}, {238, 31}}));
  EXPECT_FALSE(gpus->SliceUuids({1}).has_value());
  // No GPU at all: everything is denied.
  EXPECT_EQ(gpus->Denied({}).size(), 7u);
}

}  // namespace
}  // namespace berth
