// Idle rank cgroups kept for reuse (supervise/cgroup_pool.h): the pool's rules against a fake v1
// cgroupfs tree (a temporary directory; any user), and, as root on a v1 or hybrid host, the real
// kernel — a reused memory cgroup holds the next rank's limits and reports only its usage.
#include "supervise/cgroup_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/strings.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using testing::TempDir;

constexpr char kPoolHybridCgroup[] = "8:pids:/\n4:memory:/outer\n1:cpu:/\n0::/\n";
constexpr char kPoolHybridMounts[] =
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
constexpr char kPoolV2Cgroup[] = "0::/agent\n";
constexpr char kPoolV2Mounts[] = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

// A fake v1 host: the memory, cpu and pids hierarchies, this process in /outer of memory's.
class FakeV1Host {
 public:
  FakeV1Host() {
    for (const char* dir : {"memory/outer", "cpu", "pids"}) {
      std::filesystem::create_directories(root_.path() + "/sys/fs/cgroup/" + dir);
    }
    host_ = DetectCgroupsFrom(kPoolHybridCgroup, kPoolHybridMounts, root_.path());
  }
  const CgroupHost& host() const { return host_; }
  std::string Memory(const std::string& name) const {
    return host_.v1_dirs.at("memory") + "/" + name;
  }
  std::string Cpu(const std::string& name) const { return host_.v1_dirs.at("cpu") + "/" + name; }
  std::string Pids(const std::string& name) const { return host_.v1_dirs.at("pids") + "/" + name; }
  // What the kernel would show of a rank that ended: no process, `charged` bytes still charged.
  void Ended(const std::string& name, int64_t charged) const {
    WriteFileAtomic(Memory(name) + "/cgroup.procs", "", false);
    WriteFileAtomic(Memory(name) + "/memory.usage_in_bytes", std::to_string(charged) + "\n", false);
    WriteFileAtomic(Memory(name) + "/memory.max_usage_in_bytes", "5000000\n", false);
    WriteFileAtomic(Memory(name) + "/memory.failcnt", "7\n", false);
    WriteFileAtomic(Memory(name) + "/memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", false);
  }

 private:
  TempDir root_;
  CgroupHost host_;
};

const RankLimits kLimits{.memory_bytes = 256 << 20, .cpu_milli = 1000, .pids_max = 100};

// Taking a cgroup at its end (TakeUsage) and keeping it: the next rank with the same hierarchies
// gets it under its own name — one rename per hierarchy, nothing made — and reads none of the
// previous rank's OOM kills.
TEST(RankCgroupPoolTest, AnIdleCgroupIsRenamedToTheNextRank) {
  FakeV1Host fake;
  ASSERT_EQ(fake.host().layout, CgroupLayout::kV1) << fake.host().reason;
  RankCgroupPool pool(fake.host(), 4);
  auto first = pool.Take("berth-1/1-1-0", kLimits);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(pool.reused(), 0u);
  fake.Ended("berth-1/1-1-0", 300 << 10);
  RankUsage used = first->TakeUsage();
  EXPECT_EQ(used.peak_memory_bytes, 5000000);
  EXPECT_EQ(used.oom_kills, 3);
  // Read and reset in one open (the kernel takes "0" as a reset; the fake file shows the write).
  EXPECT_EQ(ReadFileOr(fake.Memory("berth-1/1-1-0") + "/memory.failcnt").substr(0, 1), "0");
  EXPECT_FALSE(pool.Keep(std::move(*first)).has_value());
  EXPECT_EQ(pool.idle(), 1u);

  auto second = pool.Take("berth-1/2-1-0", kLimits);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(pool.reused(), 1u);
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_EQ(second->dirs(),
            (std::vector<std::string>{fake.Memory("berth-1/2-1-0"), fake.Cpu("berth-1/2-1-0"),
                                      fake.Pids("berth-1/2-1-0")}));
  for (const std::string& gone :
       {fake.Memory("berth-1/1-1-0"), fake.Cpu("berth-1/1-1-0"), fake.Pids("berth-1/1-1-0")}) {
    EXPECT_FALSE(std::filesystem::exists(gone)) << gone;
  }
  EXPECT_EQ(second->JoinFiles().front(), fake.Memory("berth-1/2-1-0") + "/tasks");
  // Its OOM-kill count starts from the previous rank's 3.
  EXPECT_EQ(second->TakeUsage().oom_kills, 0);
}

// Limits that differ are written again, a raise of memory with swap accounted memsw first.
TEST(RankCgroupPoolTest, TheNextRanksLimitsAreWrittenWhereTheyDiffer) {
  FakeV1Host fake;
  RankCgroupPool pool(fake.host(), 4);
  auto first = pool.Take("berth-1/1-1-0", kLimits);
  ASSERT_TRUE(first.ok());
  fake.Ended("berth-1/1-1-0", 0);
  first->TakeUsage();
  ASSERT_FALSE(pool.Keep(std::move(*first)).has_value());
  WriteFileAtomic(fake.Pids("berth-1/1-1-0") + "/pids.max", "untouched", false);
  // (And the agent restarted with 8 CPUs: its level's weight follows.)
  const RankLimits more{
      .memory_bytes = 512 << 20, .cpu_milli = 2500, .pids_max = 100, .node_cpu_milli = 8000};
  auto second = pool.Take("berth-1/2-1-0", more);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(pool.reused(), 1u);
  EXPECT_EQ(ReadFileOr(fake.Memory("berth-1/2-1-0") + "/memory.limit_in_bytes"),
            std::to_string(512 << 20));
  EXPECT_EQ(ReadFileOr(fake.Cpu("berth-1/2-1-0") + "/cpu.cfs_quota_us"), "250000");
  EXPECT_EQ(ReadFileOr(fake.Cpu("berth-1/2-1-0") + "/cpu.shares"), "2560");
  EXPECT_EQ(ReadFileOr(fake.Cpu("berth-1") + "/cpu.shares"), "8192");
  EXPECT_EQ(ReadFileOr(fake.Pids("berth-1/2-1-0") + "/pids.max"), "untouched");  // the same
  EXPECT_EQ(second->limits().memory_bytes, 512 << 20);
}

// What is not kept: a cgroup with a process left in it, one with more than kMaxChargedToReuse
// still charged, any beyond the capacity; and a rank that needs other hierarchies (or devices, or
// CPUs) gets a new cgroup rather than an idle one.
TEST(RankCgroupPoolTest, OnlyEmptyUnchargedCgroupsAreKeptUpToTheCapacity) {
  FakeV1Host fake;
  RankCgroupPool pool(fake.host(), 2);
  std::vector<RankCgroup> ended;
  for (int i = 1; i <= 5; ++i) {
    const std::string name = "berth-1/" + std::to_string(i) + "-1-0";
    auto cg = pool.Take(name, kLimits);
    ASSERT_TRUE(cg.ok()) << cg.status().message();
    fake.Ended(name, 0);
    cg->TakeUsage();
    ended.push_back(std::move(*cg));
  }
  WriteFileAtomic(fake.Memory("berth-1/1-1-0") + "/cgroup.procs", "4242\n", false);
  WriteFileAtomic(fake.Memory("berth-1/2-1-0") + "/memory.usage_in_bytes",
                  std::to_string(kMaxChargedToReuse + 4096), false);
  EXPECT_TRUE(pool.Keep(std::move(ended[0])).has_value());  // a process is left
  EXPECT_TRUE(pool.Keep(std::move(ended[1])).has_value());  // too much still charged
  EXPECT_FALSE(pool.Keep(std::move(ended[2])).has_value());
  EXPECT_FALSE(pool.Keep(std::move(ended[3])).has_value());
  EXPECT_TRUE(pool.Keep(std::move(ended[4])).has_value());  // beyond the capacity
  EXPECT_EQ(pool.idle(), 2u);

  // No CPU limit: no cpu hierarchy, so neither idle one fits.
  auto other = pool.Take("berth-1/6-1-0", RankLimits{.memory_bytes = 1 << 30, .pids_max = 100});
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(pool.reused(), 0u);
  EXPECT_EQ(other->dirs().size(), 2u);
  EXPECT_EQ(pool.idle(), 2u);
  auto pinned = pool.Take("berth-1/7-1-0", RankLimits{.memory_bytes = 256 << 20,
                                                      .cpu_milli = 1000,
                                                      .pids_max = 100,
                                                      .denied_devices = {{195, 0}}});
  EXPECT_FALSE(pinned.ok());  // (this fake host has no devices hierarchy to make it in)
  EXPECT_EQ(pool.reused(), 0u);
  EXPECT_EQ(pool.idle(), 2u);
}

// A rank whose name an idle cgroup still has (its start sent again) gets that very cgroup, never
// another rank.
TEST(RankCgroupPoolTest, AnIdleCgroupUnderTheRanksOwnNameIsTakenAsItIs) {
  FakeV1Host fake;
  RankCgroupPool pool(fake.host(), 4);
  std::vector<RankCgroup> ended;
  for (const char* name : {"berth-1/1-1-0", "berth-1/2-1-0"}) {
    auto cg = pool.Take(name, kLimits);
    ASSERT_TRUE(cg.ok());
    fake.Ended(name, 0);
    cg->TakeUsage();
    ended.push_back(std::move(*cg));
  }
  for (RankCgroup& cg : ended) ASSERT_FALSE(pool.Keep(std::move(cg)).has_value());
  auto again = pool.Take("berth-1/1-1-0", kLimits);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dirs().front(), fake.Memory("berth-1/1-1-0"));
  EXPECT_TRUE(std::filesystem::exists(fake.Memory("berth-1/2-1-0")));  // still idle, untouched
  EXPECT_EQ(pool.idle(), 1u);
}

// cgroup2 cannot rename a cgroup: on v2 nothing is kept, every rank gets a new one.
TEST(RankCgroupPoolTest, NothingIsKeptOnV2) {
  TempDir root;
  const std::string own = root.path() + "/sys/fs/cgroup/agent";
  std::filesystem::create_directories(own);
  WriteFileAtomic(own + "/cgroup.controllers", "cpu memory pids\n", false);
  CgroupHost host = DetectCgroupsFrom(kPoolV2Cgroup, kPoolV2Mounts, root.path());
  ASSERT_EQ(host.layout, CgroupLayout::kV2) << host.reason;
  RankCgroupPool pool(host, 4);
  auto cg = pool.Take("berth-1/1-1-0", kLimits);
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  EXPECT_TRUE(pool.Keep(std::move(*cg)).has_value());
  EXPECT_EQ(pool.idle(), 0u);
}

// As root on a v1 host, the real kernel: a rank killed for its memory leaves its cgroup fit for
// reuse; the next rank renamed into it runs under its own, lower limit, and reads a peak and OOM
// count of its own.
TEST(RankCgroupPoolTest, RealV1CgroupReusedAfterAnOutOfMemory) {
  if (::geteuid() != 0) GTEST_SKIP() << "making cgroups needs root";
  CgroupHost host = DetectCgroups();
  if (host.layout != CgroupLayout::kV1) GTEST_SKIP() << "not a v1 host: " << host.Describe();
  const std::string agent = "berth-test-pool-" + std::to_string(::getpid());
  // Runs a child in `cg` that touches `bytes` of memory; returns its wait status.
  auto run = [](const RankCgroup& cg, size_t bytes) {
    std::vector<int> fds;
    for (const std::string& file : cg.JoinFiles()) {
      fds.push_back(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    }
    pid_t child = ::fork();
    if (child == 0) {
      for (int fd : fds) {
        if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(1);
      }
      void* pages =
          ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (pages == MAP_FAILED) _exit(3);
      ::memset(pages, 1, bytes);
      _exit(0);
    }
    for (int fd : fds) ::close(fd);
    int status = 0;
    ::waitpid(child, &status, 0);
    return status;
  };
  RankCgroupPool pool(host, 4);
  // Limits well above what a sanitizer's runtime adds to a small child (TSan's shadow of what it
  // touches is several times its size), the second below the first.
  auto first = pool.Take(agent + "/1-1-0", RankLimits{.memory_bytes = 256 << 20, .pids_max = 16});
  ASSERT_TRUE(first.ok()) << first.status().message();
  int status = run(*first, size_t{512} << 20);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  RankUsage used = first->TakeUsage();
  EXPECT_EQ(used.oom_kills, 1);
  EXPECT_GT(used.limit_hits, 0);
  // The killed child's pages are uncharged once it is reaped; the kernel may take a moment.
  std::optional<RankCgroup> left = pool.Keep(std::move(*first));
  for (int i = 0; i < 100 && left; ++i) {
    ::usleep(10'000);
    left = pool.Keep(std::move(*left));
  }
  ASSERT_FALSE(left.has_value()) << "the ended rank's cgroup was not kept";

  auto second = pool.Take(agent + "/2-1-0", RankLimits{.memory_bytes = 128 << 20, .pids_max = 16});
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(pool.reused(), 1u);
  const std::string memory = host.v1_dirs.at("memory") + "/" + agent + "/2-1-0";
  EXPECT_EQ(std::stoll(ReadFileOr(memory + "/memory.limit_in_bytes")), 128 << 20);
  EXPECT_FALSE(std::filesystem::exists(host.v1_dirs.at("memory") + "/" + agent + "/1-1-0"));
  status = run(*second, 4 << 20);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  used = second->TakeUsage();
  EXPECT_EQ(used.oom_kills, 0);
  EXPECT_EQ(used.limit_hits, 0);
  EXPECT_GE(used.peak_memory_bytes, 4 << 20);
  EXPECT_LT(used.peak_memory_bytes, 128 << 20);  // not the first rank's 256 MiB
  EXPECT_TRUE(second->Remove());
  RemoveIdleRankCgroups(host, agent);
  EXPECT_FALSE(std::filesystem::exists(host.v1_dirs.at("memory") + "/" + agent));
}

}  // namespace
}  // namespace berth
