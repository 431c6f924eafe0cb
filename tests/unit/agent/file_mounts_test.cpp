// The shell that places file mounts (agent/file_mounts.h), run by bash against a temp dir.
#include "agent/file_mounts.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using berth::testing::TempDir;

// Runs `script` with bash in `cwd` with HOME=`home`; answers its exit status.
int RunBash(const std::string& script, const std::string& cwd, const std::string& home) {
  std::string file = cwd + "/place.sh";
  std::ofstream(file) << script;
  std::string cmd =
      "cd '" + cwd + "' && HOME='" + home + "' bash '" + file + "' 2>'" + cwd + "/err'";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(FileMountScriptTest, DirectoriesMergeFilesReplaceHomeExpands) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("built/0/sub"));
  std::ofstream(dir.File("built/0/sub/a")) << "a";
  std::ofstream(dir.File("built/1")) << "file";
  std::filesystem::create_directories(dir.File("home"));
  std::filesystem::create_directories(dir.File("work/existing"));
  std::ofstream(dir.File("work/existing/old")) << "kept";
  std::ofstream(dir.File("home/cfg")) << "stale";
  std::string script = FileMountScript({
      {.built = dir.File("built/0"), .target = "existing", .file = false},
      {.built = dir.File("built/0"), .target = dir.File("abs/new dir"), .file = false},
      {.built = dir.File("built/1"), .target = "~/cfg", .file = true},
      {.built = dir.File("built/1"), .target = "it's/quoted", .file = true},
  });
  ASSERT_EQ(RunBash(script, dir.File("work"), dir.File("home")), 0)
      << ReadFileOr(dir.File("work/err"));
  EXPECT_EQ(ReadFile(dir.File("work/existing/sub/a")), "a");
  EXPECT_EQ(ReadFile(dir.File("work/existing/old")), "kept");
  EXPECT_EQ(ReadFile(dir.File("abs/new dir/sub/a")), "a");
  EXPECT_EQ(ReadFile(dir.File("home/cfg")), "file");
  EXPECT_EQ(ReadFile(dir.File("work/it's/quoted")), "file");
}

TEST(FileMountScriptTest, AFailureNamesTheTarget) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("work"));
  std::ofstream(dir.File("blocker")) << "a file where a directory must go";
  std::string script = FileMountScript({
      {.built = dir.File("nothing"), .target = dir.File("blocker/x"), .file = true},
  });
  EXPECT_EQ(RunBash(script + "echo never\n", dir.File("work"), dir.path()), 1);
  EXPECT_NE(ReadFileOr(dir.File("work/err"))
                .find("berth: file_mounts: cannot place " + dir.File("blocker/x")),
            std::string::npos);
  EXPECT_EQ(FileMountScript({}), "");
}

}  // namespace
}  // namespace berth
