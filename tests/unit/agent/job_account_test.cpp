// Removing a job's work dir as its user (agent/job_account.h RemoveTreeAsOwner).
#include "agent/job_account.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fakes/temp_dir.h"

namespace berth {
namespace {

using berth::testing::TempDir;
namespace fs = std::filesystem;

// A job left a directory it made read-only in its work dir: its user's `rm -rf` failed on it, and
// the agent fell back to removing the whole job dir as root — walking a tree the user could still
// change. The owner's removal makes the tree writable to them first, so root never needs to.
TEST(JobAccountTest, AnOwnerRemovesATreeTheyMadeReadOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (it removes the tree as another user)";
  const passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "needs the user nobody";
  TempDir dir;
  ::chmod(dir.path().c_str(), 0711);
  const std::string root_file = dir.File("root-owned");
  std::ofstream(root_file) << "root's\n";
  const std::string work = dir.File("work");
  fs::create_directories(work + "/ro/deeper");
  std::ofstream(work + "/ro/deeper/f") << "x\n";
  fs::create_symlink(root_file, work + "/ro/link");
  for (const std::string p : {work, work + "/ro", work + "/ro/deeper", work + "/ro/deeper/f"}) {
    ASSERT_EQ(::chown(p.c_str(), nobody->pw_uid, nobody->pw_gid), 0) << p;
  }
  ASSERT_EQ(::lchown((work + "/ro/link").c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  ::chmod((work + "/ro/deeper").c_str(), 0500);
  ::chmod((work + "/ro").c_str(), 0500);
  EXPECT_TRUE(RemoveTreeAsOwner(work));
  EXPECT_FALSE(fs::exists(fs::symlink_status(work)));
  EXPECT_TRUE(fs::exists(root_file));
  EXPECT_TRUE(RemoveTreeAsOwner(work)) << "nothing there: gone";
}

}  // namespace
}  // namespace berth
