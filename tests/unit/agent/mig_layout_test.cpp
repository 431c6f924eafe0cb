// Re-slicing one GPU (agent/mig_layout.h): the exact nvidia-smi commands, a failure that puts the
// old layout back, and the recording runner that simulates a declared node's change.
#include "agent/mig_layout.h"

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/strings.h"
#include "fakes/fake_health.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

std::vector<std::string> Lines(const std::vector<TimedCommand>& calls) {
  std::vector<std::string> out;
  for (const TimedCommand& c : calls) out.push_back(Join(c.argv, " "));
  return out;
}

const std::vector<MigSlice> kOld = {
    {.index = 100, .gpu = 0, .profile = "3g.40gb", .uuid = "MIG-a", .gi = 1, .ci = 0},
    {.index = 101, .gpu = 0, .profile = "3g.40gb", .uuid = "MIG-b", .gi = 2, .ci = 0}};

TEST(MigLayout, TheOldInstancesGoThenTheNewOnesComeInOneCommand) {
  EXPECT_EQ(Lines([] {
              std::vector<TimedCommand> out;
              for (auto& argv : MigLayoutCommands(0, kOld, {"4g.40gb", "1g.10gb", "1g.10gb"})) {
                out.push_back({.argv = argv});
              }
              return out;
            }()),
            (std::vector<std::string>{
                "nvidia-smi mig -i 0 -gi 1 -ci 0 -dci", "nvidia-smi mig -i 0 -gi 1 -dgi",
                "nvidia-smi mig -i 0 -gi 2 -ci 0 -dci", "nvidia-smi mig -i 0 -gi 2 -dgi",
                "nvidia-smi mig -i 0 -cgi 4g.40gb,1g.10gb,1g.10gb -C"}));
  testing::FakeCommandRunner runner;
  runner.On("nvidia-smi", [](const TimedCommand&) { return testing::FakeCommandRunner::Exit(0); });
  EXPECT_TRUE(ApplyMigLayout(runner, 0, kOld, {"7g.80gb"}).ok());
  EXPECT_EQ(Lines(runner.calls()).back(), "nvidia-smi mig -i 0 -cgi 7g.80gb -C");
}

// A GPU instance in use cannot be destroyed: nothing else is tried, and the error says which
// command and what nvidia-smi answered.
TEST(MigLayout, ABusyGpuIsLeftAsItWas) {
  testing::FakeCommandRunner runner;
  runner.On("nvidia-smi", [](const TimedCommand& c) {
    return Join(c.argv, " ").ends_with("-dci")
               ? testing::FakeCommandRunner::Exit(
                     6, "Unable to destroy compute instance ID 0: In use by another client")
               : testing::FakeCommandRunner::Exit(0);
  });
  Status st = ApplyMigLayout(runner, 0, kOld, {"7g.80gb"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "`nvidia-smi mig -i 0 -gi 1 -ci 0 -dci` failed: exit code 6: Unable to destroy compute "
            "instance ID 0: In use by another client");
  EXPECT_EQ(runner.calls().size(), 1u);
}

// A creation that fails once the old instances are gone puts the old layout back.
TEST(MigLayout, AFailedCreationPutsTheOldLayoutBack) {
  testing::FakeCommandRunner runner;
  runner.On("nvidia-smi", [](const TimedCommand& c) {
    return Join(c.argv, " ").find("7g.80gb") != std::string::npos
               ? testing::FakeCommandRunner::Exit(2, "Insufficient resources")
               : testing::FakeCommandRunner::Exit(0);
  });
  Status st = ApplyMigLayout(runner, 0, kOld, {"7g.80gb"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("-cgi 7g.80gb -C` failed: exit code 2: Insufficient resources"),
            std::string::npos);
  EXPECT_EQ(Lines(runner.calls()).back(), "nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb -C");
}

TEST(MigLayout, ADeclaredNodesChangeIsRecordedAndItsSlicesMadeAsDeclared) {
  testing::TempDir tmp;
  RecordingCommandRunner recorder(tmp.File("mig-commands.log"));
  ASSERT_TRUE(ApplyMigLayout(recorder, 0, kOld, {"1g.10gb", "1g.10gb"}).ok());
  EXPECT_EQ(ReadFileOr(tmp.File("mig-commands.log")),
            "nvidia-smi mig -i 0 -gi 1 -ci 0 -dci\nnvidia-smi mig -i 0 -gi 1 -dgi\n"
            "nvidia-smi mig -i 0 -gi 2 -ci 0 -dci\nnvidia-smi mig -i 0 -gi 2 -dgi\n"
            "nvidia-smi mig -i 0 -cgi 1g.10gb,1g.10gb -C\n");
  const std::vector<MigSlice> fresh = DeclaredSlices("n1", 0, {"1g.10gb", "1g.10gb"});
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_EQ(fresh[1].index, 101);
  EXPECT_EQ(fresh[1].gi, 2);
  auto declared = ParseMigDeclaration("0=1g.10gb*2", 1, "n1");
  ASSERT_TRUE(declared.ok());
  EXPECT_EQ(*declared, fresh);
  RecordingCommandRunner nowhere("/nonexistent/dir/log");
  EXPECT_FALSE(ApplyMigLayout(nowhere, 0, kOld, {"1g.10gb"}).ok());
}

}  // namespace
}  // namespace berth
