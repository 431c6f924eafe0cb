// The idle policy (spec/idle_policy.h): its one-line form, what it refuses, and when a job with
// idle GPUs is warned and acted on.
#include "spec/idle_policy.h"

#include <gtest/gtest.h>

#include "spec/job_spec.h"

namespace berth {
namespace {

constexpr DurationMs kSample = 10'000;

TEST(IdlePolicy, ReadsTheServersForm) {
  Result<IdlePolicy> p = ParseIdlePolicy("below=5,warn=10m,act=30m,action=requeue", kSample);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->below, 5);
  EXPECT_EQ(p->warn, 600'000);
  EXPECT_EQ(p->act, 1'800'000);
  EXPECT_EQ(p->action, IdleAction::kRequeue);
  EXPECT_EQ(p->interactive_warn, 600'000);  // the batch windows unless given
  EXPECT_EQ(p->interactive_act, 1'800'000);
  EXPECT_EQ(p->Format(),
            "below=5,warn=10m,act=30m,action=requeue,interactive_warn=10m,interactive_act=30m,"
            "exempt=yes");
  EXPECT_EQ(ParseIdlePolicy(p->Format(), kSample).value(), *p);
  Result<IdlePolicy> q =
      ParseIdlePolicy(" action=cancel, below=10, interactive_warn=1h, exempt=no ", kSample);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->action, IdleAction::kCancel);
  EXPECT_EQ(q->interactive_warn, 3'600'000);
  EXPECT_EQ(q->interactive_act, 3'600'000 + (30 - 10) * 60'000);  // the batch gap after it
  EXPECT_FALSE(q->exempt);
}

TEST(IdlePolicy, RefusesWhatCannotWorkSayingWhy) {
  auto why = [](const std::string& text) {
    Result<IdlePolicy> p = ParseIdlePolicy(text, kSample);
    return p.ok() ? std::string("accepted") : p.status().message();
  };
  const std::string hint = " (expected e.g. below=5,warn=10m,act=30m,action=requeue)";
  EXPECT_EQ(why("below=5,warn=20s"),
            "--idle-policy 'below=5,warn=20s': warn=20s is shorter than three samples (30s): too "
            "short to tell an idle GPU from a pause" +
                hint);
  EXPECT_EQ(why("warn=30m,act=10m"),
            "--idle-policy 'warn=30m,act=10m': act=10m must be longer than warn=30m (both count "
            "from when the GPUs went idle)" +
                hint);
  EXPECT_EQ(why("action=kill"),
            "--idle-policy 'action=kill': action=kill is not requeue, cancel or none" + hint);
  EXPECT_EQ(why("below=0"),
            "--idle-policy 'below=0': below=0 is not a percentage from 1 to 100" + hint);
  EXPECT_EQ(why("below=101"),
            "--idle-policy 'below=101': below=101 is not a percentage from 1 to 100" + hint);
  EXPECT_EQ(why("warn=soon"),
            "--idle-policy 'warn=soon': warn=soon is not a duration (10m, 1h30m)" + hint);
  EXPECT_EQ(why("below=5,below=6"), "--idle-policy 'below=5,below=6': 'below' given twice" + hint);
  EXPECT_EQ(why("threshold=5"),
            "--idle-policy 'threshold=5': unknown key 'threshold' (known: below, warn, act, "
            "action, interactive_warn, interactive_act, exempt)" +
                hint);
  EXPECT_EQ(why("requeue"), "--idle-policy 'requeue': 'requeue' is not KEY=VALUE" + hint);
}

// Teams' and pools' policies: a job in a pool with a policy has that pool's, else its team's, else
// the cluster's; `none` turns it off for them.
TEST(IdlePolicy, APoolsPolicyThenATeamsThenTheClusters) {
  IdlePolicies p;
  EXPECT_EQ(p.For("vision", ""), nullptr);
  p.cluster = ParseIdlePolicy("action=requeue", 10'000).value();
  ASSERT_TRUE(AddScopedIdlePolicy("vision=action=cancel,warn=5m,act=10m", "--team-idle-policy",
                                  10'000, p.teams)
                  .ok());
  ASSERT_TRUE(AddScopedIdlePolicy("research=none", "--team-idle-policy", 10'000, p.teams).ok());
  ASSERT_TRUE(
      AddScopedIdlePolicy("interactive=action=none", "--pool-idle-policy", 10'000, p.pools).ok());
  EXPECT_EQ(p.For("nlp", "")->action, IdleAction::kRequeue);
  EXPECT_EQ(p.For("vision", "")->action, IdleAction::kCancel);
  EXPECT_EQ(p.For("vision", "")->warn, 5 * 60'000);
  EXPECT_EQ(p.For("research", ""), nullptr);
  EXPECT_EQ(p.For("research", "interactive")->action, IdleAction::kNone);
  EXPECT_EQ(p.For("vision", "interactive")->action, IdleAction::kNone);
  EXPECT_EQ(AddScopedIdlePolicy("vision=none", "--team-idle-policy", 10'000, p.teams).message(),
            "--team-idle-policy: 'vision' is given twice");
  EXPECT_EQ(AddScopedIdlePolicy("=none", "--team-idle-policy", 10'000, p.teams).message(),
            "--team-idle-policy: expected NAME=POLICY (or NAME=none), got '=none'");
  const Status bad = AddScopedIdlePolicy("gpu=action=nap", "--pool-idle-policy", 10'000, p.pools);
  EXPECT_EQ(bad.message().rfind("--pool-idle-policy gpu: ", 0), 0u) << bad.message();
}

TEST(IdlePolicy, WarnsThenActsAsTheIdleSpellGrows) {
  const IdlePolicy p =
      ParseIdlePolicy("warn=10m,act=30m,interactive_warn=1h,interactive_act=2h", kSample).value();
  EXPECT_EQ(JudgeIdle(p, 0, false), IdleVerdict::kBusy);
  EXPECT_EQ(JudgeIdle(p, 9 * 60'000, false), IdleVerdict::kIdle);
  EXPECT_EQ(JudgeIdle(p, 10 * 60'000, false), IdleVerdict::kWarn);
  EXPECT_EQ(JudgeIdle(p, 30 * 60'000, false), IdleVerdict::kAct);
  EXPECT_EQ(JudgeIdle(p, 30 * 60'000, true), IdleVerdict::kIdle);  // its own windows
  EXPECT_EQ(JudgeIdle(p, 60 * 60'000, true), IdleVerdict::kWarn);
  EXPECT_EQ(JudgeIdle(p, 120 * 60'000, true), IdleVerdict::kAct);
}

// A job's exemption (`idle_ok`): in the task YAML, the stored spec, and checked.
TEST(IdlePolicy, AJobsExemptionIsReadKeptAndChecked) {
  Result<ParsedTask> task = ParseTaskYaml("run: python prep.py\nidle_ok: data prep\n", "t.yaml");
  ASSERT_TRUE(task.ok()) << task.status().message();
  EXPECT_EQ(task->spec.idle_ok, "data prep");
  Result<JobSpec> back = SpecFromJson(SpecToJson(task->spec));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->idle_ok, "data prep");
  EXPECT_TRUE(ValidateSpec(task->spec).ok());
  JobSpec bad = task->spec;
  bad.idle_ok = std::string(201, 'x');
  EXPECT_EQ(ValidateSpec(bad).message(),
            "idle_ok: a reason of at most 200 characters on one line, e.g. \"data prep\"");
  bad.idle_ok = "two\nlines";
  EXPECT_FALSE(ValidateSpec(bad).ok());
}

}  // namespace
}  // namespace berth
