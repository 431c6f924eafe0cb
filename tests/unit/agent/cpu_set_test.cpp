// CPU sets for resources.cpu_binding (supervise/cpu_set.h): the kernel's list format both ways,
// physical cores read from a fake sysfs tree, and which CPUs a pinned rank gets.
#include "supervise/cpu_set.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using Cpus = std::vector<int>;

TEST(CpuSetTest, ListsAreTheKernelsFormat) {
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({3}), "3");
  EXPECT_EQ(FormatCpuList({6, 0, 1, 2, 4}), "0-2,4,6");
  EXPECT_EQ(ParseCpuList("0-2,4,6\n"), Cpus({0, 1, 2, 4, 6}));
  EXPECT_EQ(ParseCpuList(""), Cpus{});
  EXPECT_EQ(ParseCpuList("5"), Cpus{5});
  for (const char* bad : {"a", "1-", "3-1", "1,,2", "-1", "0-99999999"}) {
    EXPECT_FALSE(ParseCpuList(bad).has_value()) << bad;
  }
}

TEST(CpuSetTest, CoresAreReadFromTopologyAndAMissingOneIsACoreOfItsOwn) {
  testing::TempDir sys;
  // cpu0 and cpu2 are one core's two threads; cpu1 another core; cpu3 has no topology.
  for (auto [cpu, core] : {std::pair{0, 0}, std::pair{1, 1}, std::pair{2, 0}}) {
    const std::string dir = sys.path() + "/cpu" + std::to_string(cpu) + "/topology";
    std::filesystem::create_directories(dir);
    WriteFileAtomic(dir + "/physical_package_id", "0\n", false);
    WriteFileAtomic(dir + "/core_id", std::to_string(core) + "\n", false);
  }
  auto core_of = ReadCoreIds(sys.path(), {0, 1, 2, 3});
  EXPECT_EQ(core_of.at(0), "0:0");
  EXPECT_EQ(core_of.at(2), "0:0");
  EXPECT_EQ(core_of.at(1), "0:1");
  EXPECT_EQ(core_of.at(3), "cpu3");
}

// Four cores of two threads each: CPUs n and n+4 share core n (Linux numbers the second threads
// after the first ones).
std::map<int, std::string> TwoThreadCores() {
  std::map<int, std::string> core_of;
  for (int cpu = 0; cpu < 8; ++cpu) core_of[cpu] = "0:" + std::to_string(cpu % 4);
  return core_of;
}

TEST(CpuSetTest, APinnedRankGetsWholeCoresFirst) {
  const Cpus all = {0, 1, 2, 3, 4, 5, 6, 7};
  auto core_of = TwoThreadCores();
  // Two CPUs: one whole core, both of its threads.
  EXPECT_EQ(PickCpus(all, {}, 2, core_of), Cpus({0, 4}));
  // Core 0 half taken: two CPUs take the next whole core rather than split another.
  EXPECT_EQ(PickCpus(all, {0}, 2, core_of), Cpus({1, 5}));
  // One CPU goes into the core already split, keeping whole cores whole.
  EXPECT_EQ(PickCpus(all, {0}, 1, core_of), Cpus({4}));
  // Three: a whole core, then the split core's free thread.
  EXPECT_EQ(PickCpus(all, {0}, 3, core_of), Cpus({1, 4, 5}));
  // Not enough free: none.
  EXPECT_FALSE(PickCpus(all, {0, 1, 2, 3, 4, 5}, 3, core_of).has_value());
  EXPECT_EQ(PickCpus(all, {0, 1, 2, 3, 4, 5}, 2, core_of), Cpus({6, 7}));
  // Without topology every CPU is a core: lowest free first.
  EXPECT_EQ(PickCpus({0, 1, 2}, {1}, 2, {}), Cpus({0, 2}));
}

}  // namespace
}  // namespace berth
