// Cgroups of job ranks (supervise/cgroup.h): the layout read from /proc/self/cgroup and mountinfo
// text; the v2 code against a fake cgroupfs tree (a temporary directory: the machines berth is
// built on have v1 controllers); and, as root on a v1 or hybrid host, the real thing.
#include "supervise/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "agent/launcher.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/strings.h"
#include "fakes/temp_dir.h"
#include "supervise/cpu_set.h"
#include "supervise/device_filter.h"
#include "supervise/supervisor.h"
#include "support/cgroup2.h"

namespace berth {
namespace {

using testing::TempDir;

constexpr char kHybridCgroup[] =
    "8:pids:/\n6:freezer:/\n5:devices:/\n4:memory:/outer/inner\n2:cpuacct:/\n1:cpu:/\n0::/\n";
constexpr char kHybridMounts[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
constexpr char kV2Cgroup[] = "0::/system.slice/berth-agent.service\n";
constexpr char kV2Mounts[] =
    "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

void MakeDir(const std::string& path) { std::filesystem::create_directories(path); }

// A fake v2 host under `root`: the agent's cgroup (its path in *own) offers `controllers`.
CgroupHost FakeV2Host(const TempDir& root, const std::string& controllers, std::string* own) {
  *own = root.path() + "/sys/fs/cgroup/system.slice/berth-agent.service";
  MakeDir(*own);
  WriteFileAtomic(*own + "/cgroup.controllers", controllers + "\n", false);
  return DetectCgroupsFrom(kV2Cgroup, kV2Mounts, root.path());
}

// The hybrid layout (v1 controllers, an empty cgroup2 hierarchy beside them) is v1.
TEST(CgroupTest, TheHybridLayoutIsV1) {
  TempDir root;
  MakeDir(root.path() + "/sys/fs/cgroup/memory/outer/inner");
  for (const char* c : {"cpu", "cpuacct", "devices", "pids", "unified"}) {
    MakeDir(root.path() + "/sys/fs/cgroup/" + c);
  }
  CgroupHost host = DetectCgroupsFrom(kHybridCgroup, kHybridMounts, root.path());
  ASSERT_EQ(host.layout, CgroupLayout::kV1) << host.reason;
  EXPECT_EQ(host.v1_dirs.at("memory"), root.path() + "/sys/fs/cgroup/memory/outer/inner");
  EXPECT_EQ(host.v1_dirs.at("cpu"), root.path() + "/sys/fs/cgroup/cpu");
  EXPECT_EQ(host.Describe(), "v1");
}

// CPU weights follow the CPUs asked for, within what each kernel interface takes.
TEST(CgroupTest, CpuWeightsFollowTheCpusAskedFor) {
  EXPECT_EQ(CpuSharesOf(1000), 1024);  // v1's default, one CPU
  EXPECT_EQ(CpuSharesOf(250), 256);
  EXPECT_EQ(CpuSharesOf(1), 2);                 // the least cpu.shares takes
  EXPECT_EQ(CpuSharesOf(1024 * 1000), 262144);  // the most
  EXPECT_EQ(CpuWeightOf(1000), 100);            // v2's default, one CPU
  EXPECT_EQ(CpuWeightOf(500), 50);
  EXPECT_EQ(CpuWeightOf(1), 1);
  EXPECT_EQ(CpuWeightOf(1024 * 1000), 10000);
}

TEST(CgroupTest, NoneSaysWhy) {
  TempDir root;
  std::string ro = kV2Mounts;
  ro.replace(ro.find("rw,nosuid"), 9, "ro,nosuid");
  CgroupHost host = DetectCgroupsFrom(kV2Cgroup, ro, root.path());
  EXPECT_EQ(host.layout, CgroupLayout::kNone);
  EXPECT_EQ(host.Describe(), "none: " + root.path() + "/sys/fs/cgroup is read-only");
  host = DetectCgroupsFrom(kV2Cgroup, "", root.path());
  EXPECT_EQ(host.Describe(), "none: no cgroup hierarchy is mounted");
  // A v2 cgroup without the memory controller delegated to it.
  const std::string own = root.path() + "/sys/fs/cgroup/system.slice/berth-agent.service";
  MakeDir(own);
  WriteFileAtomic(own + "/cgroup.controllers", "cpu pids\n", false);
  host = DetectCgroupsFrom(kV2Cgroup, kV2Mounts, root.path());
  EXPECT_EQ(host.layout, CgroupLayout::kNone);
  EXPECT_NE(host.reason.find("Delegate=yes"), std::string::npos) << host.reason;
}

// A later supervisor finds itself in the leaf an earlier one moved the agent's processes into (or
// systemd's DelegateSubgroup put it in): it divides the agent's cgroup, not the leaf. Mount points
// with spaces are unescaped. Only the controllers the cgroup offers are enabled.
TEST(CgroupTest, V2DividesTheAgentsCgroupFromItsSupervisorLeaf) {
  TempDir root;
  const std::string own = root.path() + "/sys/fs/cgroup/my svc";
  MakeDir(own + "/supervisor");
  WriteFileAtomic(own + "/cgroup.controllers", "memory pids\n", false);
  CgroupHost host = DetectCgroupsFrom("0::/my svc/supervisor\n",
                                      "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
                                      "31 23 0:27 / /sys/fs/cgroup/my\\040svc rw - tmpfs x rw\n",
                                      root.path());
  ASSERT_EQ(host.layout, CgroupLayout::kV2) << host.reason;
  EXPECT_EQ(host.unified_dir, own);
  EXPECT_EQ(host.undelegated, (std::vector<std::string>{"cpu", "cpuset"}));
  auto cg = RankCgroup::Create(host, "berth-2/1-1-0", RankLimits{.memory_bytes = 1 << 30});
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  EXPECT_EQ(ReadFileOr(own + "/cgroup.subtree_control"), "+memory +pids");
  EXPECT_EQ(cg->dirs(), std::vector<std::string>{own + "/berth-2/1-1-0"});
}

// v2 against a fake tree: the limits land in memory.max, memory.swap.max, memory.oom.group,
// cpu.max and pids.max; the rank weighs its CPUs in cpu.weight, the agent's level the node's;
// controllers are enabled at every level above the rank; usage and OOM kills are read from
// memory.peak, cpu.stat and memory.events; a kill writes cgroup.kill.
TEST(CgroupTest, V2WritesTheLimitsAndReadsUsageInAFakeTree) {
  TempDir root;
  std::string own;
  CgroupHost host = FakeV2Host(root, "cpuset cpu io memory pids", &own);
  ASSERT_EQ(host.layout, CgroupLayout::kV2) << host.reason;
  EXPECT_EQ(host.unified_dir, own);

  RankLimits limits{
      .memory_bytes = 256 << 20, .cpu_milli = 500, .pids_max = 100, .node_cpu_milli = 64000};
  // The cpu controller's files, as the kernel makes them once the controller is enabled above.
  for (const char* file : {"/berth-1/7-1-0/cpu.max", "/berth-1/7-1-0/cpu.weight",
                           "/berth-1/7-1-0/pids.max", "/berth-1/cpu.weight"}) {
    MakeDir(std::filesystem::path(own + file).parent_path());
    WriteFileAtomic(own + file, "", false);
  }
  auto cg = RankCgroup::Create(host, "berth-1/7-1-0", limits);
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  const std::string dir = own + "/berth-1/7-1-0";
  ASSERT_EQ(cg->dirs(), std::vector<std::string>{dir});
  // A cgroup2 cgroup has no `tasks`: a process joins it through cgroup.procs (when it could not be
  // born in it).
  EXPECT_EQ(cg->JoinFiles(), std::vector<std::string>{dir + "/cgroup.procs"});
  EXPECT_EQ(ReadFileOr(own + "/cgroup.subtree_control"), "+memory +cpu +pids +cpuset");
  EXPECT_EQ(ReadFileOr(own + "/berth-1/cgroup.subtree_control"), "+memory +cpu +pids +cpuset");
  EXPECT_EQ(ReadFileOr(dir + "/memory.max"), std::to_string(256 << 20));
  // This fake host accounts no swap (no memory.swap.max): there is none to limit.
  EXPECT_FALSE(std::filesystem::exists(dir + "/memory.swap.max"));
  EXPECT_EQ(ReadFileOr(dir + "/memory.oom.group"), "1");
  EXPECT_EQ(ReadFileOr(dir + "/cpu.max"), "50000 100000");
  EXPECT_EQ(ReadFileOr(dir + "/cpu.weight"), "50");
  EXPECT_EQ(ReadFileOr(own + "/berth-1/cpu.weight"), "6400");
  EXPECT_EQ(ReadFileOr(dir + "/pids.max"), "100");

  // Its processes: none listed is not the same as none readable.
  EXPECT_EQ(cg->ReadPids(), std::nullopt);
  WriteFileAtomic(dir + "/cgroup.procs", "", false);
  EXPECT_EQ(cg->ReadPids(), std::set<pid_t>{});
  WriteFileAtomic(dir + "/cgroup.procs", "12\n34\n", false);
  EXPECT_EQ(cg->ReadPids(), (std::set<pid_t>{12, 34}));
  WriteFileAtomic(dir + "/cgroup.procs", "", false);  // (no kill below may reach real pids)

  WriteFileAtomic(dir + "/memory.peak", "123456\n", false);
  WriteFileAtomic(dir + "/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n", false);
  WriteFileAtomic(dir + "/memory.events", "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n", false);
  RankUsage usage = cg->TakeUsage();
  EXPECT_EQ(usage.peak_memory_bytes, 123456);
  EXPECT_EQ(usage.oom_kills, 1);
  EXPECT_EQ(usage.limit_hits, 2);
  cg->Kill();
  EXPECT_EQ(ReadFileOr(dir + "/cgroup.kill"), "1");

  // A pinned rank's CPUs go to cpuset.cpus (the fake tree has the file once the kernel would).
  MakeDir(own + "/berth-1/8-1-0");
  WriteFileAtomic(own + "/berth-1/8-1-0/cpuset.cpus", "", false);
  auto pinned = RankCgroup::Create(host, "berth-1/8-1-0", RankLimits{.cpus = {1, 2, 3, 6}});
  ASSERT_TRUE(pinned.ok()) << pinned.status().message();
  EXPECT_EQ(ReadFileOr(own + "/berth-1/8-1-0/cpuset.cpus"), "1-3,6");
  // Without the cpuset controller there (not delegated), a pinned rank is refused, saying so.
  auto unheld = RankCgroup::Create(host, "berth-1/10-1-0", RankLimits{.cpus = {0}});
  ASSERT_FALSE(unheld.ok());
  EXPECT_NE(unheld.status().message().find("cpuset controller is not delegated"), std::string::npos)
      << unheld.status().message();

  // GPUs are fenced by a BPF program attached to the cgroup, which a fake tree cannot take: the
  // rank is refused, saying so. (Its directory stays in the fake tree, which unlike cgroupfs keeps
  // the limit files written into it.)
  if (::geteuid() == 0) {
    limits.denied_devices = {{195, 0}};
    auto fenced = RankCgroup::Create(host, "berth-1/9-1-0", limits);
    ASSERT_FALSE(fenced.ok());
    EXPECT_NE(fenced.status().message().find("device filter"), std::string::npos)
        << fenced.status().message();
  }
}

// An agent given only some controllers (a sandbox's cgroup that delegates memory alone), or a
// kernel without CFS bandwidth control, has no cpu.max, cpu.weight or pids.max: the rank is made
// all the same, its memory held, its CPUs and processes not.
TEST(CgroupTest, V2WithoutTheCpuOrPidsFilesStillMakesTheRank) {
  TempDir root;
  std::string own;
  CgroupHost host = FakeV2Host(root, "cpu memory pids", &own);
  ASSERT_EQ(host.layout, CgroupLayout::kV2) << host.reason;
  EXPECT_EQ(host.undelegated, std::vector<std::string>{"cpuset"});
  auto cg = RankCgroup::Create(
      host, "berth-1/7-1-0",
      RankLimits{
          .memory_bytes = 1 << 30, .cpu_milli = 500, .pids_max = 100, .node_cpu_milli = 64000});
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  EXPECT_EQ(ReadFileOr(own + "/cgroup.subtree_control"), "+memory +cpu +pids");
  EXPECT_EQ(ReadFileOr(own + "/berth-1/7-1-0/memory.max"), std::to_string(1 << 30));
  EXPECT_FALSE(std::filesystem::exists(own + "/berth-1/7-1-0/cpu.max"));
  EXPECT_FALSE(std::filesystem::exists(own + "/berth-1/7-1-0/cpu.weight"));
  EXPECT_FALSE(std::filesystem::exists(own + "/berth-1/cpu.weight"));
  EXPECT_FALSE(std::filesystem::exists(own + "/berth-1/7-1-0/pids.max"));
}

// The real cgroup2 part of the v2 layout, on this machine's cgroup2 hierarchy (which has no
// controllers here, but takes BPF device programs): a process in a cgroup whose filter denies
// 195:0 cannot open that device (EPERM) and can open 195:1 (ENXIO: no driver behind it).
TEST(CgroupTest, ABpfDeviceFilterFencesACgroup2Cgroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "BPF device programs need root";
  const std::string base = testing::OwnCgroup2Dir();
  if (base.empty()) GTEST_SKIP() << "no writable cgroup2";
  TempDir devices;
  for (int minor : {0, 1}) {
    const std::string node = devices.path() + "/nvidia" + std::to_string(minor);
    ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, makedev(195, minor)), 0) << strerror(errno);
  }
  const std::string dir = base + "/berth-test-bpf-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << strerror(errno);
  Status st = DenyDevices(dir, {{195, 0}, {195, 7}});
  ASSERT_TRUE(st.ok()) << st.message();
  int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  pid_t child = ::fork();
  if (child == 0) {
    if (::write(fd, "0", 1) != 1) _exit(10);
    int denied = ::open((devices.path() + "/nvidia0").c_str(), O_RDWR);
    int denied_errno = errno;
    int allowed = ::open((devices.path() + "/nvidia1").c_str(), O_RDWR);
    int allowed_errno = errno;
    _exit(denied < 0 && denied_errno == EPERM && allowed < 0 && allowed_errno == ENXIO ? 0 : 20);
  }
  ::close(fd);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not join; 20: the filter did not act as asked";
  // Outside the cgroup nothing is fenced.
  int outside = ::open((devices.path() + "/nvidia0").c_str(), O_RDWR);
  EXPECT_EQ(outside < 0 ? errno : 0, ENXIO);
  EXPECT_EQ(::rmdir(dir.c_str()), 0) << strerror(errno);
}

// As root on this machine's kind of host (v1 or hybrid): a rank's cgroup holds the limits, a
// process that writes "0" to the join files is in it, a kill empties it, and it is removed.
TEST(CgroupTest, RealV1CgroupHoldsLimitsAndProcesses) {
  if (::geteuid() != 0) GTEST_SKIP() << "making cgroups needs root";
  CgroupHost host = DetectCgroups();
  if (host.layout != CgroupLayout::kV1) GTEST_SKIP() << "not a v1 host: " << host.Describe();
  const std::string agent = "berth-test-" + std::to_string(::getpid());
  const std::string name = agent + "/1-1-0";
  RankLimits limits{
      .memory_bytes = 64 << 20, .cpu_milli = 250, .pids_max = 32, .node_cpu_milli = 16000};
  auto cg = RankCgroup::Create(host, name, limits);
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  const std::string memory = host.v1_dirs.at("memory") + "/" + name;
  EXPECT_EQ(std::stoll(ReadFileOr(memory + "/memory.limit_in_bytes")), 64 << 20);
  if (host.v1_dirs.count("pids")) {
    EXPECT_EQ(ReadFileOr(host.v1_dirs.at("pids") + "/" + name + "/pids.max"), "32\n");
  }
  if (host.v1_dirs.count("cpu")) {
    // A quarter of a CPU's time, and weight; the agent's level weighs the node's 16 CPUs.
    const std::string cpu = host.v1_dirs.at("cpu");
    EXPECT_EQ(ReadFileOr(cpu + "/" + name + "/cpu.cfs_quota_us"), "25000\n");
    EXPECT_EQ(ReadFileOr(cpu + "/" + name + "/cpu.shares"), "256\n");
    EXPECT_EQ(ReadFileOr(cpu + "/" + agent + "/cpu.shares"), "16384\n");
  }
  std::vector<int> fds;
  for (const std::string& file : cg->JoinFiles()) {
    // A v1 cgroup is joined through `tasks`: the writer alone moves (RankCgroup::JoinFiles).
    EXPECT_TRUE(file.ends_with("/tasks")) << file;
    fds.push_back(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_GE(fds.back(), 0) << file << ": " << std::strerror(errno);
  }
  pid_t child = ::fork();
  if (child == 0) {
    for (int fd : fds) {
      if (::write(fd, "0", 1) != 1) _exit(1);
    }
    // Pages are charged to the cgroup a process is in when it first touches them: touch some
    // after joining, so the peak below cannot depend on how far the child got before the kill.
    const size_t touched = 1 << 20;
    void* pages =
        ::mmap(nullptr, touched, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) _exit(3);
    ::memset(pages, 1, touched);
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    _exit(2);
  }
  for (int fd : fds) ::close(fd);
  for (int i = 0; i < 200 && cg->Pids().empty(); ++i) ::usleep(10'000);
  EXPECT_EQ(cg->Pids(), std::set<pid_t>{child});
  const std::string comm = "/proc/" + std::to_string(child) + "/comm";
  for (int i = 0; i < 200 && ReadFileOr(comm) != "sleep\n"; ++i) ::usleep(10'000);
  cg->Kill();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (int i = 0; i < 200 && !cg->Pids().empty(); ++i) ::usleep(10'000);
  EXPECT_GT(cg->TakeUsage().peak_memory_bytes, 0);
  EXPECT_TRUE(cg->Remove());
  EXPECT_FALSE(std::filesystem::exists(memory));
  RemoveIdleRankCgroups(host, "berth-test-" + std::to_string(::getpid()));
  EXPECT_FALSE(std::filesystem::exists(host.v1_dirs.at("memory") + "/berth-test-" +
                                       std::to_string(::getpid())));
}

// As root on a v1 host: a pinned rank's cpuset cgroup gets its CPUs (and the agent's level its
// parent's CPUs and memory nodes, without which nothing could join), and a process that joins runs
// only on those CPUs.
TEST(CgroupTest, RealV1CpusetPinsARank) {
  if (::geteuid() != 0) GTEST_SKIP() << "making cgroups needs root";
  CgroupHost host = DetectCgroups();
  if (host.layout != CgroupLayout::kV1 || !host.v1_dirs.count("cpuset")) {
    GTEST_SKIP() << "no v1 cpuset hierarchy here: " << host.Describe();
  }
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  const int cpu = allowed.back();
  const std::string agent = "berth-test-cpuset-" + std::to_string(::getpid());
  auto cg = RankCgroup::Create(host, agent + "/1-1-0", RankLimits{.cpus = {cpu}});
  ASSERT_TRUE(cg.ok()) << cg.status().message();
  const std::string dir = host.v1_dirs.at("cpuset") + "/" + agent + "/1-1-0";
  EXPECT_EQ(Trim(ReadFileOr(dir + "/cpuset.cpus")), std::to_string(cpu));
  EXPECT_FALSE(Trim(ReadFileOr(dir + "/cpuset.mems")).empty());
  std::vector<int> fds;
  for (const std::string& file : cg->JoinFiles()) {
    fds.push_back(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_GE(fds.back(), 0) << file << ": " << std::strerror(errno);
  }
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t child = ::fork();
  if (child == 0) {
    for (int fd : fds) {
      if (::write(fd, "0", 1) != 1) _exit(1);
    }
    const std::string cpus = FormatCpuList(AllowedCpus());
    _exit(::write(pipe_fds[1], cpus.data(), cpus.size()) > 0 ? 0 : 2);
  }
  for (int fd : fds) ::close(fd);
  ::close(pipe_fds[1]);
  char buf[64] = {};
  const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf - 1);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: could not join";
  EXPECT_EQ(std::string(buf, std::max<ssize_t>(0, n)), std::to_string(cpu));
  EXPECT_TRUE(cg->Remove());
  RemoveIdleRankCgroups(host, agent);
  EXPECT_FALSE(std::filesystem::exists(host.v1_dirs.at("cpuset") + "/" + agent));
}

// Both supervisors (the node supervisor, and the per-rank one the agent falls back to) run a rank
// in its cgroup with its limits: a rank that outgrows its memory ends with exit code 137 and the
// reason naming the limit, and its cgroup is gone afterwards.
class SupervisorCgroupTest : public ::testing::TestWithParam<bool> {};

TEST_P(SupervisorCgroupTest, ARankOverItsMemoryEndsOutOfMemory) {
  if (::geteuid() != 0) GTEST_SKIP() << "making cgroups needs root";
  CgroupHost host = DetectCgroups();
  if (host.layout == CgroupLayout::kNone) GTEST_SKIP() << host.Describe();
  TempDir root;
  const std::string dir = root.path() + "/jobs/5-1-0";
  std::filesystem::create_directories(dir);
  RunPlan plan;
  plan.workdir = dir;
  plan.run = "python3 -c \"s = 'x' * (300 << 20)\" && echo survived";
  plan.run_env = {{"PATH", "/usr/bin:/bin"}, {"BERTH_JOB_ID", "5"}};
  plan.cgroup = RankCgroupName(root.path(), "5-1-0");
  plan.limits = RankLimits{.memory_bytes = 64 << 20, .pids_max = 64};
  ASSERT_TRUE(WriteRunPlan(dir, plan).ok());
  SupervisorLauncher launcher(BERTH_BIN, root.path());
  Result<pid_t> pid = GetParam() ? launcher.Start(dir) : SpawnSupervisor(BERTH_BIN, dir);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  std::vector<SupervisorEvent> events;
  const int64_t deadline = MonotonicMs() + 30'000;
  while (MonotonicMs() < deadline) {
    ::waitpid(-1, nullptr, WNOHANG);
    events = ParseEvents(ReadFileOr(dir + "/events"));
    if (!events.empty() && events.back().kind == "exited") break;
    ::usleep(20'000);
  }
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, "exited");
  EXPECT_EQ(events.back().exit_code, 137);
  EXPECT_EQ(events.back().reason, OutOfMemoryReason(64 << 20));
  EXPECT_EQ(ReadFileOr(dir + "/output.log").find("survived"), std::string::npos);
  // Its cgroup is gone (the memory hierarchy holds every rank's) — the node supervisor's once it
  // exits: on v1 it keeps an ended rank's empty cgroup for the next (supervise/cgroup_pool.h).
  const std::string cgroup = host.v1_dirs.count("memory")
                                 ? host.v1_dirs.at("memory") + "/" + plan.cgroup
                                 : host.unified_dir + "/" + plan.cgroup;
  if (GetParam()) {
    EXPECT_EQ(ReadFileOr(cgroup + "/cgroup.procs"), "");  // if kept: empty
    ::kill(*pid, SIGTERM);  // the node supervisor, with nothing left to run
    for (int i = 0; i < 500 && ::kill(*pid, 0) == 0; ++i) {
      ::waitpid(*pid, nullptr, WNOHANG);
      ::usleep(10'000);
    }
  }
  EXPECT_FALSE(std::filesystem::exists(cgroup));
}

INSTANTIATE_TEST_SUITE_P(NodeAndPerRank, SupervisorCgroupTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Node" : "PerRank"; });

}  // namespace
}  // namespace berth
