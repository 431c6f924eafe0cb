// RemoveTreeNoFollow (common/tree_removal.h): a tree others can write into is removed without ever
// following a link, even one swapped in for a directory while the walk runs.
#include "common/tree_removal.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fakes/temp_dir.h"

namespace berth {
namespace {

using berth::testing::TempDir;
namespace fs = std::filesystem;

void Touch(const std::string& path) { std::ofstream(path) << "x\n"; }

// A tree with links to a directory outside it, and a directory made read-only by its owner.
TEST(TreeRemovalTest, RemovesLinksNotWhatTheyPointAt) {
  TempDir dir;
  const std::string outside = dir.File("outside");
  fs::create_directories(outside);
  Touch(outside + "/keep");
  const std::string tree = dir.File("tree");
  fs::create_directories(tree + "/a/b");
  Touch(tree + "/a/b/f");
  fs::create_symlink(outside, tree + "/a/to-dir");
  fs::create_symlink(outside + "/keep", tree + "/a/b/to-file");
  ::chmod((tree + "/a/b").c_str(), 0500);
  EXPECT_TRUE(RemoveTreeNoFollow(tree));
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(outside + "/keep"));
  // A path that is a link itself is removed as a link; one that does not exist is gone already.
  fs::create_symlink(outside, dir.File("link"));
  EXPECT_TRUE(RemoveTreeNoFollow(dir.File("link")));
  EXPECT_TRUE(fs::exists(outside + "/keep"));
  EXPECT_TRUE(RemoveTreeNoFollow(dir.File("never-was")));
}

// The race a walk by path loses: between the look at an entry (a directory) and its opening, its
// owner swaps it for a link to a directory of root's. Opened with O_NOFOLLOW relative to its
// parent, the link is removed and the directory it points at is not entered.
TEST(TreeRemovalTest, ADirectorySwappedForALinkMidWalkIsNotFollowed) {
  TempDir dir;
  const std::string victim = dir.File("victim");
  fs::create_directories(victim);
  Touch(victim + "/precious");
  const std::string tree = dir.File("tree");
  fs::create_directories(tree + "/sub");
  Touch(tree + "/sub/f");
  int swaps = 0;
  EXPECT_TRUE(RemoveTreeNoFollow(tree, [&](const std::string& path) {
    if (path != tree + "/sub") return;
    ++swaps;
    fs::rename(path, dir.File("moved-away"));
    fs::create_symlink(victim, path);
  }));
  EXPECT_EQ(swaps, 1);
  EXPECT_TRUE(fs::exists(victim + "/precious"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
}

}  // namespace
}  // namespace berth
