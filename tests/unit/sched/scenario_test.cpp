// Golden scheduler scenarios: runs every tests/scenarios/*.scn and compares what each command
// prints with the "> " lines written under it (see scenario_runner.h for the language).
//
// After an intended change of behaviour or wording, rewrite the expectations with
//   BERTH_UPDATE_GOLDEN=1 ./build-sched/tests/berth_sched_tests --gtest_filter='Scenarios/*'
// and read the diff before committing it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "scenario_runner.h"

namespace berth::sched::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(BERTH_SCENARIO_DIR)) {
    if (entry.path().extension() == ".scn") files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class Scenarios : public ::testing::TestWithParam<std::string> {};

TEST_P(Scenarios, MatchesGolden) {
  const fs::path path = fs::path(BERTH_SCENARIO_DIR) / GetParam();
  const std::string expected = ReadFile(path);
  ASSERT_FALSE(expected.empty()) << "cannot read " << path;
  std::string actual;
  try {
    actual = RunScenario(GetParam(), expected);
  } catch (const ScenarioError& e) {
    FAIL() << e.what();
  }
  // A broken invariant is a scheduler bug, never an expectation to record.
  EXPECT_EQ(actual.find("> BROKEN:"), std::string::npos) << actual;

  const char* update = std::getenv("BERTH_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1" && actual != expected) {
    std::ofstream(path, std::ios::binary) << actual;
    GTEST_SKIP() << "rewrote " << path;
  }
  EXPECT_EQ(expected, actual) << "scenario " << path
                              << " changed; if intended, rerun with BERTH_UPDATE_GOLDEN=1";
}

TEST(ScenariosTest, DirectoryHasScenarios) { EXPECT_GE(ScenarioFiles().size(), 6u); }

// The runner itself: stale "> " lines are replaced by what the command prints now, and a malformed
// line is reported with its file and line number.
TEST(ScenariosTest, RunnerRewritesOutputAndReportsBadLines) {
  const std::string script =
      "node n1 cpus=1 mem=1G\n"
      "pending 1 cpus=2\n"
      "schedule\n"
      "> place 1 on n1\n";
  EXPECT_EQ(RunScenario("t.scn", script),
            "node n1 cpus=1 mem=1G\n"
            "pending 1 cpus=2\n"
            "schedule\n"
            "> wait 1: waiting for resources: needs 2 CPUs on 1 node; most free on one node: 1 CPU "
            "(n1)\n");
  try {
    RunScenario("t.scn", "node n1 cpus=1\n\nnode n2 gpus=V100\n");
    ADD_FAILURE() << "expected a ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "t.scn:3: bad gpus 'V100' (want V100:4)");
  }
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = fs::path(info.param).stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, Scenarios, ::testing::ValuesIn(ScenarioFiles()), TestName);

}  // namespace
}  // namespace berth::sched::testing
