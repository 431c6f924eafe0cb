// clone3 with CLONE_INTO_CGROUP for real, on this machine's cgroup2 hierarchy (the hybrid layout's
// /sys/fs/cgroup/unified takes processes though it has no controllers): a child is born in the
// cgroup and runs its function on its own stack; a directory that is not a cgroup is refused, and
// a step then falls back to joining by cgroup.procs (as on the fake v2 tree the other tests use).
// Where this kernel or a seccomp filter has no clone3 with CLONE_INTO_CGROUP, the tests that need
// it skip, saying so.
#include "supervise/clone_into_cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/files.h"
#include "common/sanitizers.h"
#include "fakes/temp_dir.h"
#include "supervise/step.h"
#include "support/cgroup2.h"

namespace berth {
namespace {

using testing::Cgroup2Of;
using testing::TempDir;

constexpr size_t kStack = 64 * 1024;

// A cgroup2 cgroup of this test's own, removed at its end (once its last process is reaped).
class OwnCgroup {
 public:
  explicit OwnCgroup(const std::string& leaf) {
    const std::string base = testing::OwnCgroup2Dir();
    if (base.empty()) return;
    dir_ = base + "/" + leaf + "-" + std::to_string(::getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) dir_.clear();
    const std::string own = Cgroup2Of(::getpid());
    name_ = (own == "/" ? "" : own) + "/" + leaf + "-" + std::to_string(::getpid());
  }
  ~OwnCgroup() {
    if (dir_.empty()) return;
    int tries = 0;
    while (::rmdir(dir_.c_str()) != 0 && errno == EBUSY && ++tries < 100) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(std::filesystem::exists(dir_)) << dir_ << " is left: " << strerror(errno);
  }
  const std::string& dir() const { return dir_; }
  // As /proc/PID/cgroup names it.
  const std::string& name() const { return name_; }

 private:
  std::string dir_, name_;
};

// Waits until the parent closes its end of the pipe `arg` (the child has its own copy of the
// write end: it closes that first), then returns 7.
int WaitForAPipe(void* arg) {
  const int* gate = static_cast<const int*>(arg);
  ::close(gate[1]);
  char c;
  (void)::read(gate[0], &c, 1);
  return 7;
}

int ExitAtOnce(void*) { return 0; }

// Why this machine cannot start a child in a cgroup2 cgroup ("" when it can): tried once, into
// `cgroup`.
std::string WhyNoCloneInto(const OwnCgroup& cgroup) {
#if defined(BERTH_SANITIZED)
  return "a child sharing the memory of a sanitized process would share its runtime's thread "
         "state (sanitized builds start steps with fork() and join)";
#else
  auto stack = std::make_unique<char[]>(kStack);
  const int dir = ::open(cgroup.dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const pid_t pid = CloneIntoCgroup(ExitAtOnce, nullptr, stack.get(), kStack, dir, SIGCHLD);
  const int err = errno;
  ::close(dir);
  if (pid < 0) return std::string("clone3 with CLONE_INTO_CGROUP: ") + strerror(err);
  ::waitpid(pid, nullptr, 0);
  return "";
#endif
}

TEST(CloneIntoCgroup, AChildIsBornInACgroup2CgroupAndExitsWithItsFunctionsValue) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a cgroup needs root";
  OwnCgroup cgroup("berth-test-clone");
  if (cgroup.dir().empty()) GTEST_SKIP() << "no writable cgroup2 hierarchy";
  if (std::string why = WhyNoCloneInto(cgroup); !why.empty()) GTEST_SKIP() << why;
  int gate[2];
  ASSERT_EQ(::pipe2(gate, O_CLOEXEC), 0);
  auto stack = std::make_unique<char[]>(kStack);
  const int dir = ::open(cgroup.dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0) << strerror(errno);
  // An odd stack size: the child aligns its stack itself.
  const pid_t pid = CloneIntoCgroup(WaitForAPipe, gate, stack.get(), kStack - 8, dir, SIGCHLD);
  const int clone_errno = errno;
  ::close(dir);
  ASSERT_GT(pid, 0) << strerror(clone_errno);
  // In it from the start: the parent never wrote its cgroup.procs.
  EXPECT_EQ(Cgroup2Of(pid), cgroup.name());
  EXPECT_EQ(ReadFileOr(cgroup.dir() + "/cgroup.procs"), std::to_string(pid) + "\n");
  ::close(gate[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  ::close(gate[0]);
}

TEST(CloneIntoCgroup, ADirectoryThatIsNotACgroupIsRefused) {
  TempDir tmp;
  auto stack = std::make_unique<char[]>(kStack);
  const int dir = ::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  const pid_t pid = CloneIntoCgroup(ExitAtOnce, nullptr, stack.get(), kStack, dir, SIGCHLD);
  const int clone_errno = errno;
  ::close(dir);
  ASSERT_EQ(pid, -1);
  if (clone_errno == ENOSYS || clone_errno == E2BIG || clone_errno == EINVAL) {
    GTEST_SKIP() << "no clone3 with CLONE_INTO_CGROUP here: " << strerror(clone_errno);
  }
  EXPECT_EQ(clone_errno, EBADF) << strerror(clone_errno);
}

// A step whose entry names a real cgroup2 directory is born in it, and joins only the other
// hierarchies' cgroups. Shown with a fifo standing for another hierarchy's cgroup.procs: the
// child blocks opening it, and while it does, /proc says where it is — born in the cgroup, not in
// this test's own (where a child that joins instead would still be: it joins clone_into's own
// last). Its script then prints the same cgroup.
TEST(CloneIntoCgroup, AStepIsBornInItsRanksCgroup2CgroupAndJoinsOnlyTheOthers) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a cgroup needs root";
  OwnCgroup born("berth-test-born");
  if (born.dir().empty()) GTEST_SKIP() << "no writable cgroup2 hierarchy";
  if (std::string why = WhyNoCloneInto(born); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp;
  const std::string fifo = tmp.File("other.procs");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int log = ::open(tmp.File("out").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(log, 0);
  const std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"}};
  pid_t pid = -1;
  {
    StartingStep step("grep ^0:: /proc/self/cgroup", tmp.File("step.sh"), "", env, std::nullopt,
                      log, CgroupEntry{.clone_into = born.dir(), .join = {fifo}});
    pid = step.pid();
    ASSERT_GT(pid, 0) << step.Wait();
    // Blocked in its open of the fifo (its first act): already in the cgroup.
    EXPECT_EQ(Cgroup2Of(pid), born.name());
    const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // lets it on
    ASSERT_GE(reader, 0);
    EXPECT_EQ(step.Wait(), "");
    char joined[2] = {};
    EXPECT_EQ(::read(reader, joined, 1), 1);
    EXPECT_STREQ(joined, "0");
    ::close(reader);
  }
  ::close(log);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ReadFileOr(tmp.File("out")), "0::" + born.name() + "\n");
}

// Where the kernel refuses to start the child in clone_into (here: not a cgroup, as in the fake v2
// trees of cgroup_test.cpp), the child joins clone_into's cgroup.procs by writing "0" to it, after
// the others.
TEST(CloneIntoCgroup, AStepFallsBackToJoiningWhereItCannotBeBornInTheCgroup) {
  TempDir tmp;
  const std::string fake = tmp.File("fake-cgroup");
  ASSERT_EQ(::mkdir(fake.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(fake + "/cgroup.procs", "", false, 0644));
  ASSERT_TRUE(WriteFileAtomic(tmp.File("other.procs"), "", false, 0644));
  const int log = ::open(tmp.File("out").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(log, 0);
  const CgroupEntry entry{.clone_into = fake, .join = {tmp.File("other.procs")}};
  StepLaunch step = LaunchStep("echo ran", tmp.File("step.sh"), "", {{"PATH", "/usr/bin:/bin"}},
                               std::nullopt, log, entry);
  ::close(log);
  ASSERT_TRUE(step.error.empty()) << step.error;
  int status = 0;
  ASSERT_EQ(::waitpid(step.pid, &status, 0), step.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ReadFileOr(tmp.File("out")), "ran\n");
  EXPECT_EQ(ReadFileOr(fake + "/cgroup.procs"), "0");
  EXPECT_EQ(ReadFileOr(tmp.File("other.procs")), "0");
}

}  // namespace
}  // namespace berth
