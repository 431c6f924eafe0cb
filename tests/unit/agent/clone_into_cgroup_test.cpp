// clone3 with CLONE_INTO_CGROUP for real, on this machine's cgroup2 hierarchy (the hybrid layout's
// /sys/fs/cgroup/unified takes processes though it has no controllers): a child is born in the
// cgroup and runs its function on its own stack; a directory that is not a cgroup is refused, and
// a step then falls back to joining by cgroup.procs (as on the fake v2 tree the other tests use).
#include "supervise/clone_into_cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "common/files.h"
#include "common/sanitizers.h"
#include "common/strings.h"
#include "fakes/temp_dir.h"
#include "supervise/step.h"
#include "support/cgroup2.h"

namespace berth {
namespace {

using testing::TempDir;

constexpr size_t kStack = 64 * 1024;

// The cgroup2 line of /proc/PID/cgroup, without its "0::".
std::string Cgroup2Of(pid_t pid) {
  for (const std::string& line :
       Split(ReadFileOr("/proc/" + std::to_string(pid) + "/cgroup"), '\n')) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// A cgroup2 cgroup of this test's own, removed at its end.
class OwnCgroup {
 public:
  explicit OwnCgroup(const std::string& leaf) {
    const std::string base = testing::OwnCgroup2Dir();
    if (base.empty()) return;
    dir_ = base + "/" + leaf + "-" + std::to_string(::getpid());
    if (::mkdir(dir_.c_str(), 0755) != 0) dir_.clear();
  }
  ~OwnCgroup() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
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

TEST(CloneIntoCgroup, AChildIsBornInACgroup2CgroupAndExitsWithItsFunctionsValue) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "clone3 is called on x86-64 only; elsewhere steps join by cgroup.procs";
#elif defined(BERTH_SANITIZED)
  GTEST_SKIP() << "a child sharing the memory of a sanitized process would share its runtime's "
                  "thread state (sanitized builds start steps with fork() and join)";
#endif
  if (::geteuid() != 0) GTEST_SKIP() << "making a cgroup needs root";
  OwnCgroup cgroup("berth-test-clone");
  if (cgroup.dir().empty()) GTEST_SKIP() << "no writable cgroup2 hierarchy";
  int gate[2];
  ASSERT_EQ(::pipe2(gate, O_CLOEXEC), 0);
  auto stack = std::make_unique<char[]>(kStack);
  const int dir = ::open(cgroup.dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0) << strerror(errno);
  const pid_t pid = CloneIntoCgroup(WaitForAPipe, gate, stack.get(), kStack, dir, SIGCHLD);
  const int clone_errno = errno;
  ::close(dir);
  ASSERT_GT(pid, 0) << strerror(clone_errno);
  // In it from the start: the parent never wrote its cgroup.procs.
  const std::string own = Cgroup2Of(::getpid());
  EXPECT_EQ(Cgroup2Of(pid),
            (own == "/" ? "" : own) + "/berth-test-clone-" + std::to_string(::getpid()));
  EXPECT_EQ(ReadFileOr(cgroup.dir() + "/cgroup.procs"), std::to_string(pid) + "\n");
  EXPECT_NE(Cgroup2Of(::getpid()), Cgroup2Of(pid));
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
  int never[2] = {-1, -1};
  const pid_t pid = CloneIntoCgroup(WaitForAPipe, never, stack.get(), kStack, dir, SIGCHLD);
  const int clone_errno = errno;
  ::close(dir);
  EXPECT_EQ(pid, -1);
#if defined(__x86_64__)
  EXPECT_EQ(clone_errno, EBADF) << strerror(clone_errno);
#else
  EXPECT_EQ(clone_errno, ENOSYS) << strerror(clone_errno);
#endif
}

// A step whose entry names a real cgroup2 directory runs in it; its output says where it was. Born
// there, it joins only the other hierarchies' cgroups: shown with a second cgroup2 cgroup in the
// list, which it ends in only if it did not join the first after it (the fallback joins
// clone_into's own last). Sanitized builds start steps with fork() and always join.
TEST(CloneIntoCgroup, AStepIsBornInItsRanksCgroup2CgroupAndJoinsOnlyTheOthers) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a cgroup needs root";
  OwnCgroup born("berth-test-born"), other("berth-test-other");
  if (born.dir().empty() || other.dir().empty()) GTEST_SKIP() << "no writable cgroup2 hierarchy";
  TempDir tmp;
  const std::string own = Cgroup2Of(::getpid());
  const std::string prefix = "0::" + (own == "/" ? "" : own);
  const std::string pid = std::to_string(::getpid());
  auto run = [&](const CgroupEntry& entry) {
    const int log = ::open(tmp.File("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(log, 0);
    StepLaunch step = LaunchStep("grep ^0:: /proc/self/cgroup", tmp.File("step.sh"), "",
                                 {{"PATH", "/usr/bin:/bin"}}, std::nullopt, log, entry);
    ::close(log);
    EXPECT_TRUE(step.error.empty()) << step.error;
    int status = 0;
    EXPECT_EQ(::waitpid(step.pid, &status, 0), step.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return ReadFileOr(tmp.File("out"));
  };
  EXPECT_EQ(run({.clone_into = born.dir(), .join = {born.dir() + "/cgroup.procs"}}),
            prefix + "/berth-test-born-" + pid + "\n");
#if defined(__x86_64__) && !defined(BERTH_SANITIZED)
  EXPECT_EQ(run({.clone_into = born.dir(),
                 .join = {born.dir() + "/cgroup.procs", other.dir() + "/cgroup.procs"}}),
            prefix + "/berth-test-other-" + pid + "\n");
#endif
}

// Where the kernel refuses to start the child in clone_into (here: not a cgroup, as in the fake v2
// trees of cgroup_test.cpp), the child joins by writing "0" to every cgroup.procs instead,
// clone_into's included.
TEST(CloneIntoCgroup, AStepFallsBackToJoiningWhereItCannotBeBornInTheCgroup) {
  TempDir tmp;
  const std::string fake = tmp.File("fake-cgroup");
  ASSERT_EQ(::mkdir(fake.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(fake + "/cgroup.procs", "", false, 0644));
  ASSERT_TRUE(WriteFileAtomic(tmp.File("other.procs"), "", false, 0644));
  const int log = ::open(tmp.File("out").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(log, 0);
  const CgroupEntry entry{.clone_into = fake,
                          .join = {tmp.File("other.procs"), fake + "/cgroup.procs"}};
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
