// ValidateSpec guards every door (YAML, JSON, CLI flags): each rule, and the message that names the
// field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "spec/job_spec.h"

namespace berth {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string ErrorOf(const JobSpec& s) {
  Status st = ValidateSpec(s);
  EXPECT_FALSE(st.ok());
  return st.message();
}

TEST(ValidateSpec, DefaultSpecIsValid) { EXPECT_TRUE(ValidateSpec(JobSpec{}).ok()); }

TEST(ValidateSpec, ResourceRules) {
  JobSpec s;
  s.resources.cpus = kMaxCpus + 1;
  EXPECT_THAT(ErrorOf(s), HasSubstr("resources.cpus must be at most 1000000"));
  s = {};
  s.resources.memory = -1;
  EXPECT_EQ(ErrorOf(s), "resources.memory must not be negative");
  // A fraction of one device is a share; above one device only whole devices make sense.
  s = {};
  s.resources.gpu_type = "T4";
  s.resources.gpu_milli = 250;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.resources.gpu_milli = 2500;
  EXPECT_THAT(ErrorOf(s), HasSubstr("more than one GPU must be a whole number"));
  s.resources.gpu_type = "";
  s.resources.gpu_milli = 1000;
  EXPECT_THAT(ErrorOf(s), HasSubstr("needs a type"));
  s.resources.gpu_type = "T4";
  s.resources.gpu_milli = 0;
  EXPECT_THAT(ErrorOf(s), HasSubstr("count of 0"));
}

TEST(ValidateSpec, NamesAndLimits) {
  JobSpec s;
  s.name = "my job";
  EXPECT_THAT(ErrorOf(s), HasSubstr("name \"my job\" is not a valid name"));
  s = {};
  s.priority = kMaxPriority + 1;
  EXPECT_THAT(ErrorOf(s), HasSubstr("priority must be between"));
  s = {};
  s.node_selector = {{"gpu_gen", "hopper gen"}};
  EXPECT_THAT(ErrorOf(s), HasSubstr("node_selector.gpu_gen \"hopper gen\" is not a valid name"));
  s = {};
  s.exclusive = "-rack";
  EXPECT_THAT(ErrorOf(s), HasSubstr("placement.exclusive"));
  s.exclusive = "rack";
  s.topology_required = "rack";
  EXPECT_THAT(ErrorOf(s), HasSubstr("exclusive and topology cannot be combined"));
  s.exclusive = "";
  s.topology_preferred = "-switch";
  EXPECT_THAT(ErrorOf(s), HasSubstr("placement.topology.preferred"));
  s = {};
  s.run = std::string(kMaxScriptBytes + 1, 'x');
  EXPECT_EQ(ValidateSpec(s).code(), Code::kTooLarge);
  s = {};
  s.kill_grace = 0;  // SIGKILL at once is a legitimate choice
  EXPECT_TRUE(ValidateSpec(s).ok());
}

// --env overrides go through SetEnv, which keeps keys unique; a spec with a key twice is refused,
// since its JSON form (an object) could not keep both.
TEST(ValidateSpec, EnvKeysAreUniqueAndSetEnvReplacesInPlace) {
  JobSpec s;
  SetEnv(&s, "LR", "0.1");
  SetEnv(&s, "EPOCHS", "3");
  SetEnv(&s, "LR", "0.2");
  EXPECT_THAT(s.envs, ElementsAre(Pair("LR", "0.2"), Pair("EPOCHS", "3")));
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.envs.emplace_back("LR", "0.3");
  EXPECT_EQ(ErrorOf(s), "envs.LR is given twice");
}

TEST(ValidateSpec, EnvCountAndTotalSizeAreBounded) {
  JobSpec spec;
  for (int i = 0; i < 1001; ++i) spec.envs.push_back({"V" + std::to_string(i), "x"});
  auto st = ValidateSpec(spec);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at most 1000"), std::string::npos) << st.message();
  spec.envs.clear();
  for (int i = 0; i < 10; ++i)
    spec.envs.push_back({"V" + std::to_string(i), std::string(120'000, 'x')});
  st = ValidateSpec(spec);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("KiB"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace berth
