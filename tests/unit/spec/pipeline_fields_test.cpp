// The pipeline fields of a spec (depends_on, max_running, retry, time_limit_scope, signal): their
// text forms, the task YAML with its line numbers, the JSON form (old stored specs included) and
// the rules ValidateSpec keeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <csignal>

#include "spec/job_spec.h"

namespace berth {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Dependency Dep(DependencyKind kind, std::vector<int64_t> ids, bool groups = false) {
  Dependency d;
  d.kind = kind;
  d.groups = groups;
  d.ids = std::move(ids);
  return d;
}

std::string DependencyError(std::string_view text) {
  auto r = ParseDependency(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

std::string SignalError(std::string_view text) {
  auto r = ParseSignalName(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

ParsedTask MustParsePipelineTask(const std::string& yaml) {
  auto parsed = ParseTaskYaml(yaml, "task.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? *parsed : ParsedTask{};
}

std::string YamlError(const std::string& yaml) {
  auto parsed = ParseTaskYaml(yaml, "task.yaml");
  EXPECT_FALSE(parsed.ok()) << "parsed without error:\n" << yaml;
  return parsed.ok() ? "" : parsed.status().message();
}

Result<JobSpec> PipelineSpecFromText(const std::string& text) {
  return SpecFromJson(json::parse(text));
}

std::string JsonError(const std::string& text) {
  auto r = PipelineSpecFromText(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

std::string ValidationError(const JobSpec& s) {
  Status st = ValidateSpec(s);
  EXPECT_FALSE(st.ok());
  return st.message();
}

WarnSignal Usr1Before(DurationMs before) {
  WarnSignal s;
  s.number = SIGUSR1;
  s.name = "USR1";
  s.before = before;
  return s;
}

// ---------------------------------------------------------------------------------------------
// ParseDependency, DependencyText

TEST(ParseDependency, KindsAndIds) {
  EXPECT_EQ(*ParseDependency("ok:10"), Dep(DependencyKind::kOk, {10}));
  EXPECT_EQ(*ParseDependency("notok:10,11"), Dep(DependencyKind::kNotOk, {10, 11}));
  EXPECT_EQ(*ParseDependency("any:7"), Dep(DependencyKind::kAny, {7}));
  EXPECT_EQ(*ParseDependency("any:group:3"), Dep(DependencyKind::kAny, {3}, true));
  EXPECT_EQ(*ParseDependency("notok:group:3,4"), Dep(DependencyKind::kNotOk, {3, 4}, true));
  EXPECT_EQ(*ParseDependency("ok:9223372036854775807"),
            Dep(DependencyKind::kOk, {9223372036854775807LL}));
}

// Slurm's spellings: after* kinds, ':' between ids.
TEST(ParseDependency, SlurmForms) {
  EXPECT_EQ(*ParseDependency("afterok:10:11"), Dep(DependencyKind::kOk, {10, 11}));
  EXPECT_EQ(*ParseDependency("afternotok:10"), Dep(DependencyKind::kNotOk, {10}));
  EXPECT_EQ(*ParseDependency("afterany:10,11:12"), Dep(DependencyKind::kAny, {10, 11, 12}));
  EXPECT_EQ(*ParseDependency("afterok:group:5:6"), Dep(DependencyKind::kOk, {5, 6}, true));
}

TEST(ParseDependency, SpacesAroundPartsAndKindCase) {
  EXPECT_EQ(*ParseDependency("  ok:10  "), Dep(DependencyKind::kOk, {10}));
  EXPECT_EQ(*ParseDependency("ok: 10, 11"), Dep(DependencyKind::kOk, {10, 11}));
  EXPECT_EQ(*ParseDependency("OK:10"), Dep(DependencyKind::kOk, {10}));
  EXPECT_EQ(*ParseDependency("AfterAny:10"), Dep(DependencyKind::kAny, {10}));
}

TEST(ParseDependency, ErrorsNameTheBadPart) {
  EXPECT_EQ(DependencyError("ok:abc"), "dependency 'ok:abc': 'abc' is not a job id");
  EXPECT_EQ(DependencyError("okk:10"),
            "dependency 'okk:10': unknown kind 'okk' (expected ok, notok or any)");
  EXPECT_EQ(DependencyError("after:10"),
            "dependency 'after:10': unknown kind 'after' (expected ok, notok or any)");
  EXPECT_EQ(DependencyError("ok:"), "dependency 'ok:': names no job");
  EXPECT_EQ(DependencyError("ok:group:"), "dependency 'ok:group:': names no group");
  EXPECT_EQ(DependencyError("ok:  "), "dependency 'ok:': names no job");
  EXPECT_EQ(DependencyError("ok:10,,11"),
            "dependency 'ok:10,,11': a job id is missing between separators");
  EXPECT_EQ(DependencyError("ok:10,"),
            "dependency 'ok:10,': a job id is missing between separators");
  EXPECT_EQ(DependencyError("ok:group:x"), "dependency 'ok:group:x': 'x' is not a group id");
  EXPECT_EQ(DependencyError("ok:group"),
            "dependency 'ok:group': 'group' needs group ids after it, as ok:group:3");
  EXPECT_EQ(DependencyError("10"),
            "dependency '10': expected KIND:ID such as ok:10, any:10,11 or notok:group:3");
  EXPECT_THAT(DependencyError(""), HasSubstr("empty dependency"));
  EXPECT_THAT(DependencyError("   "), HasSubstr("empty dependency"));
}

TEST(ParseDependency, IdsArePlainPositiveNumbers) {
  EXPECT_EQ(DependencyError("ok:0"), "dependency 'ok:0': '0' is not a job id (ids start at 1)");
  EXPECT_EQ(DependencyError("ok:-5"), "dependency 'ok:-5': '-5' is not a job id");
  EXPECT_EQ(DependencyError("ok:+5"), "dependency 'ok:+5': '+5' is not a job id");
  EXPECT_EQ(DependencyError("ok:1 0"), "dependency 'ok:1 0': '1 0' is not a job id");
  EXPECT_EQ(DependencyError("ok:1.5"), "dependency 'ok:1.5': '1.5' is not a job id");
  EXPECT_EQ(DependencyError("ok:0x10"), "dependency 'ok:0x10': '0x10' is not a job id");
  EXPECT_EQ(DependencyError("ok:9223372036854775808"),
            "dependency 'ok:9223372036854775808': '9223372036854775808' is not a job id (too "
            "large)");
  // Slurm's time suffix is not supported.
  EXPECT_EQ(DependencyError("afterok:10+5"), "dependency 'afterok:10+5': '10+5' is not a job id");
}

// Slurm joins several dependencies with ','; berth takes each on its own and says so.
TEST(ParseDependency, SeveralDependenciesInOneTextGetAHint) {
  EXPECT_EQ(DependencyError("afterok:10,afterany:11"),
            "dependency 'afterok:10,afterany:11': 'afterany' is not a job id (write each "
            "dependency separately, as ok:10 and any:11)");
}

TEST(ParseDependency, LongTextIsCutInTheMessage) {
  std::string text = "ok:";
  for (int i = 1; i <= 100; ++i) text += std::to_string(i) + ",";
  text += "x";
  std::string m = DependencyError(text);
  EXPECT_THAT(m, HasSubstr("...': 'x' is not a job id"));
  EXPECT_LT(m.size(), 150u);
}

TEST(DependencyText, IsCanonicalAndParsesBack) {
  EXPECT_EQ(DependencyText(Dep(DependencyKind::kOk, {10, 11})), "ok:10,11");
  EXPECT_EQ(DependencyText(Dep(DependencyKind::kNotOk, {3}, true)), "notok:group:3");
  EXPECT_EQ(DependencyText(Dep(DependencyKind::kAny, {1})), "any:1");
  EXPECT_EQ(DependencyText(*ParseDependency("afterok:10:11")), "ok:10,11");
  EXPECT_EQ(DependencyKindName(DependencyKind::kOk), "ok");
  EXPECT_EQ(DependencyKindName(DependencyKind::kNotOk), "notok");
  EXPECT_EQ(DependencyKindName(DependencyKind::kAny), "any");
  for (const Dependency& d :
       {Dep(DependencyKind::kOk, {10, 11}), Dep(DependencyKind::kNotOk, {3}, true),
        Dep(DependencyKind::kAny, {1, 2, 3}, true)}) {
    auto back = ParseDependency(DependencyText(d));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, d);
  }
}

// ---------------------------------------------------------------------------------------------
// ParseSignalName

TEST(ParseSignalName, FormsAndCanonicalName) {
  for (std::string_view text : {"USR1", "SIGUSR1", "usr1", "sigusr1", "SigUsr1", " USR1 "}) {
    auto s = ParseSignalName(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status().message();
    EXPECT_EQ(s->number, SIGUSR1) << text;
    EXPECT_EQ(s->name, "USR1") << text;
    EXPECT_EQ(s->before, 0) << text;
  }
}

TEST(ParseSignalName, EveryTrappableSignal) {
  const std::pair<std::string_view, int> kWant[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},    {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"ALRM", SIGALRM},  {"TERM", SIGTERM}, {"CONT", SIGCONT},
      {"URG", SIGURG},   {"WINCH", SIGWINCH}};
  for (const auto& [name, number] : kWant) {
    auto s = ParseSignalName(name);
    ASSERT_TRUE(s.ok()) << name;
    EXPECT_EQ(s->number, number);
    EXPECT_EQ(s->name, name);
  }
}

TEST(ParseSignalName, ErrorsListTheAllowedSignals) {
  const std::string kList = "HUP, INT, QUIT, USR1, USR2, ALRM, TERM, CONT, URG or WINCH";
  EXPECT_EQ(SignalError("KILL"),
            "signal 'KILL' cannot be caught, so it cannot warn a job (expected " + kList + ")");
  EXPECT_THAT(SignalError("SIGSTOP"), HasSubstr("signal 'SIGSTOP' cannot be caught"));
  EXPECT_EQ(SignalError("FOO"), "unknown signal 'FOO' (expected " + kList + ")");
  EXPECT_EQ(SignalError("SEGV"), "unknown signal 'SEGV' (expected " + kList + ")");
  EXPECT_THAT(SignalError("10"), HasSubstr("unknown signal '10'"));
  EXPECT_THAT(SignalError("SIG"), HasSubstr("unknown signal 'SIG'"));
  EXPECT_THAT(SignalError(""), HasSubstr("no signal named"));
}

// ---------------------------------------------------------------------------------------------
// Task YAML

TEST(PipelineYaml, DefaultsWhenAbsent) {
  JobSpec s = MustParsePipelineTask("run: echo hi\n").spec;
  EXPECT_THAT(s.depends_on, IsEmpty());
  EXPECT_EQ(s.max_running, std::nullopt);
  EXPECT_EQ(s.retry, RetryPolicy{});
  EXPECT_EQ(s.time_limit_scope, TimeLimitScope::kAttempt);
  EXPECT_EQ(s.signal, std::nullopt);
}

TEST(PipelineYaml, EveryFieldTogether) {
  ParsedTask t = MustParsePipelineTask(R"(name: train
run: python train.py
time_limit: 4h
depends_on:
  - ok:10
  - any:group:3
max_running: 32
retry:
  max_restarts: 3
  on_exit_codes: [137, 75]
  backoff: 30s
time_limit_scope: job
signal: {name: USR1, before: 5m}
)");
  const JobSpec& s = t.spec;
  EXPECT_THAT(s.depends_on,
              ElementsAre(Dep(DependencyKind::kOk, {10}), Dep(DependencyKind::kAny, {3}, true)));
  EXPECT_EQ(s.max_running, 32);
  EXPECT_EQ(s.retry.max_restarts, 3);
  EXPECT_THAT(s.retry.on_exit_codes, ElementsAre(137, 75));
  EXPECT_EQ(s.retry.backoff, 30'000);
  EXPECT_FALSE(s.retry.never);
  EXPECT_EQ(s.time_limit_scope, TimeLimitScope::kJob);
  ASSERT_TRUE(s.signal);
  EXPECT_EQ(*s.signal, Usr1Before(5 * 60'000));
  EXPECT_THAT(t.warnings, IsEmpty());
}

TEST(PipelineYaml, DependsOnForms) {
  EXPECT_THAT(MustParsePipelineTask("depends_on: ok:10\n").spec.depends_on,
              ElementsAre(Dep(DependencyKind::kOk, {10})));
  EXPECT_THAT(MustParsePipelineTask("depends_on: any:11,12\n").spec.depends_on,
              ElementsAre(Dep(DependencyKind::kAny, {11, 12})));
  EXPECT_THAT(MustParsePipelineTask("depends_on: \"afterok:10:11\"\n").spec.depends_on,
              ElementsAre(Dep(DependencyKind::kOk, {10, 11})));
  // A bare job id means "after it succeeded".
  EXPECT_THAT(MustParsePipelineTask("depends_on: 10\n").spec.depends_on,
              ElementsAre(Dep(DependencyKind::kOk, {10})));
  EXPECT_THAT(MustParsePipelineTask("depends_on: [10, notok:11, any:group:2]\n").spec.depends_on,
              ElementsAre(Dep(DependencyKind::kOk, {10}), Dep(DependencyKind::kNotOk, {11}),
                          Dep(DependencyKind::kAny, {2}, true)));
  EXPECT_THAT(MustParsePipelineTask("depends_on: []\n").spec.depends_on, IsEmpty());
  EXPECT_THAT(MustParsePipelineTask("depends_on:\n").spec.depends_on, IsEmpty());
}

TEST(PipelineYaml, DependsOnErrorsNameTheLine) {
  EXPECT_EQ(YamlError("run: x\ndepends_on: ok:abc\n"),
            "task.yaml:2: depends_on: dependency 'ok:abc': 'abc' is not a job id");
  EXPECT_EQ(YamlError("run: x\ndepends_on:\n  - ok:10\n  - okk:11\n"),
            "task.yaml:4: depends_on: dependency 'okk:11': unknown kind 'okk' (expected ok, notok "
            "or any)");
  EXPECT_EQ(YamlError("depends_on: 0\n"),
            "task.yaml:1: depends_on: dependency 'ok:0': '0' is not a job id (ids start at 1)");
  EXPECT_EQ(YamlError("depends_on: -3\n"),
            "task.yaml:1: depends_on: dependency '-3': expected KIND:ID such as ok:10, any:10,11 "
            "or notok:group:3");
  EXPECT_EQ(YamlError("depends_on: {ok: 10}\n"),
            "task.yaml:1: depends_on: expected a dependency like ok:10 or any:10,11 or a list of "
            "them, got a map");
  EXPECT_EQ(YamlError("depends_on:\n  - [10]\n"),
            "task.yaml:2: depends_on: expected a dependency like ok:10 or any:10,11, got a list");
  // "- ok:" is YAML for a map with key ok; quoted, it is the dependency text.
  EXPECT_EQ(YamlError("depends_on:\n  - ok:\n"),
            "task.yaml:2: depends_on: expected a dependency like ok:10 or any:10,11, got a map");
  EXPECT_EQ(YamlError("depends_on:\n  - 'ok:'\n"),
            "task.yaml:2: depends_on: dependency 'ok:': names no job");
}

TEST(PipelineYaml, TooManyDependencyIdsNameTheLine) {
  std::string ids;
  for (size_t i = 1; i <= kMaxDependencyIds; ++i) ids += (i > 1 ? "," : "") + std::to_string(i);
  EXPECT_EQ(MustParsePipelineTask("depends_on: ok:" + ids + "\n").spec.depends_on.at(0).ids.size(),
            kMaxDependencyIds);
  EXPECT_EQ(YamlError("run: x\ndepends_on: [ok:" + ids + ", any:5000]\n"),
            "task.yaml:2: depends_on names 1001 jobs and groups; at most 1000 are allowed");
}

TEST(PipelineYaml, MaxRunning) {
  EXPECT_EQ(MustParsePipelineTask("max_running: 32\n").spec.max_running, 32);
  EXPECT_EQ(MustParsePipelineTask("max_running: 1000000\n").spec.max_running, kMaxRunning);
  EXPECT_EQ(MustParsePipelineTask("max_running:\n").spec.max_running, std::nullopt);
  EXPECT_EQ(YamlError("run: x\nmax_running: 0\n"),
            "task.yaml:2: max_running must be between 1 and 1000000, got 0");
  EXPECT_EQ(YamlError("max_running: 1000001\n"),
            "task.yaml:1: max_running must be between 1 and 1000000, got 1000001");
  EXPECT_EQ(YamlError("max_running: lots\n"),
            "task.yaml:1: max_running: expected a whole number, got \"lots\"");
  EXPECT_EQ(YamlError("max_running: 99999999999\n"),
            "task.yaml:1: max_running: 99999999999 is out of range");
}

TEST(PipelineYaml, RetryForms) {
  RetryPolicy r = MustParsePipelineTask("retry: {max_restarts: 2}\n").spec.retry;
  EXPECT_EQ(r.max_restarts, 2);
  EXPECT_THAT(r.on_exit_codes, IsEmpty());
  EXPECT_EQ(r.backoff, 0);
  EXPECT_FALSE(r.never);
  EXPECT_TRUE(MustParsePipelineTask("retry: never\n").spec.retry.never);
  EXPECT_EQ(MustParsePipelineTask("retry: never\n").spec.retry.max_restarts, 0);
  EXPECT_EQ(MustParsePipelineTask("retry: {}\n").spec.retry, RetryPolicy{});
  EXPECT_EQ(MustParsePipelineTask("retry:\n").spec.retry, RetryPolicy{});
  // A bare backoff is seconds; a unit works as everywhere.
  EXPECT_EQ(MustParsePipelineTask("retry: {max_restarts: 1, backoff: 45}\n").spec.retry.backoff,
            45'000);
  EXPECT_EQ(MustParsePipelineTask("retry: {max_restarts: 1, backoff: 2m}\n").spec.retry.backoff,
            120'000);
  EXPECT_EQ(MustParsePipelineTask("retry: {max_restarts: 1, backoff: 1h30m}\n").spec.retry.backoff,
            5'400'000);
  // One exit code needs no list.
  EXPECT_THAT(MustParsePipelineTask("retry: {max_restarts: 1, on_exit_codes: 137}\n")
                  .spec.retry.on_exit_codes,
              ElementsAre(137));
  EXPECT_EQ(MustParsePipelineTask("retry: {max_restarts: 1000}\n").spec.retry.max_restarts,
            kMaxRestarts);
  EXPECT_TRUE(MustParsePipelineTask("retry: {max_restarts: 1, on_oom: true}\n").spec.retry.on_oom);
  EXPECT_FALSE(
      MustParsePipelineTask("retry: {max_restarts: 1, on_oom: false}\n").spec.retry.on_oom);
}

TEST(PipelineYaml, RetryErrorsNameTheLine) {
  EXPECT_EQ(YamlError("run: x\nretry:\n  max_restarts: 3\n  on_exit: [1]\n"),
            "task.yaml:4: retry: unknown field 'on_exit' (did you mean 'on_exit_codes'?)");
  EXPECT_EQ(YamlError("retry:\n  max_restart: 3\n"),
            "task.yaml:2: retry: unknown field 'max_restart' (did you mean 'max_restarts'?)");
  EXPECT_EQ(YamlError("retry:\n  delay: 3\n"), "task.yaml:2: retry: unknown field 'delay'");
  EXPECT_EQ(YamlError("retry: always\n"),
            "task.yaml:1: retry: expected never or a map such as {max_restarts: 3, on_exit_codes: "
            "[137], backoff: 30s}, got \"always\"");
  EXPECT_THAT(YamlError("retry: [1]\n"), HasSubstr("task.yaml:1: retry: expected never or a map"));
  EXPECT_EQ(YamlError("retry:\n  max_restarts: three\n"),
            "task.yaml:2: retry.max_restarts: expected a whole number, got \"three\"");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1001\n"),
            "task.yaml:2: retry.max_restarts must be between 0 and 1000, got 1001");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: -1\n"),
            "task.yaml:2: retry.max_restarts must be between 0 and 1000, got -1");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  on_exit_codes: [137, x]\n"),
            "task.yaml:3: retry.on_exit_codes: expected exit codes like [137, 75], got \"x\"");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  on_exit_codes:\n    - 137\n    - [1]\n"),
            "task.yaml:5: retry.on_exit_codes: expected exit codes like [137, 75], got a list");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  on_exit_codes: [0]\n"),
            "task.yaml:3: retry.on_exit_codes: 0 is not the exit code of a failure (expected "
            "1..255)");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  on_exit_codes: [256]\n"),
            "task.yaml:3: retry.on_exit_codes: 256 is not the exit code of a failure (expected "
            "1..255)");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  on_exit_codes: [1, 1]\n"),
            "task.yaml:3: retry.on_exit_codes lists 1 twice");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  on_oom: maybe\n"),
            "task.yaml:3: retry.on_oom: expected true or false, got \"maybe\"");
  EXPECT_THAT(YamlError("retry:\n  on_oom: true\n"),
              HasSubstr("retry.on_oom needs retry.max_restarts"));
  EXPECT_EQ(YamlError("run: x\nretry:\n  on_exit_codes: [137]\n"),
            "task.yaml:3: retry.on_exit_codes needs retry.max_restarts");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  backoff: soon\n"),
            "task.yaml:3: retry.backoff: expected a duration like 30s, 5m or 1h (a bare number is "
            "seconds), got \"soon\"");
  EXPECT_EQ(YamlError("retry:\n  max_restarts: 1\n  backoff: 2d\n"),
            "task.yaml:3: retry.backoff must be at most 1d, got 2d");
  EXPECT_EQ(YamlError("retry: {max_restarts: 1, max_restarts: 2}\n"),
            "task.yaml:1: retry: 'max_restarts' is given twice (also on line 1)");
}

TEST(PipelineYaml, TimeLimitScope) {
  EXPECT_EQ(MustParsePipelineTask("time_limit: 1h\ntime_limit_scope: job\n").spec.time_limit_scope,
            TimeLimitScope::kJob);
  EXPECT_EQ(MustParsePipelineTask("time_limit_scope: attempt\n").spec.time_limit_scope,
            TimeLimitScope::kAttempt);
  EXPECT_EQ(YamlError("time_limit: 1h\ntime_limit_scope: jobs\n"),
            "task.yaml:2: time_limit_scope: expected attempt or job, got \"jobs\"");
  EXPECT_EQ(YamlError("run: x\ntime_limit_scope: job\n"),
            "task.yaml:2: time_limit_scope: job needs time_limit");
}

TEST(PipelineYaml, SignalForms) {
  EXPECT_EQ(MustParsePipelineTask("time_limit: 1h\nsignal: {name: USR1, before: 5m}\n").spec.signal,
            Usr1Before(300'000));
  EXPECT_EQ(
      MustParsePipelineTask("time_limit: 1h\nsignal: {name: SIGUSR1, before: 300}\n").spec.signal,
      Usr1Before(300'000));
  EXPECT_EQ(
      MustParsePipelineTask("time_limit: 1h\nsignal:\n  name: usr1\n  before: 90s\n").spec.signal,
      Usr1Before(90'000));
  // Slurm's --signal form: seconds after the '@'.
  EXPECT_EQ(MustParsePipelineTask("time_limit: 1h\nsignal: USR1@300\n").spec.signal,
            Usr1Before(300'000));
  EXPECT_EQ(MustParsePipelineTask("time_limit: 1h\nsignal: SIGUSR1@5m\n").spec.signal,
            Usr1Before(300'000));
  auto term = MustParsePipelineTask("time_limit: 1h\nsignal: TERM@60\n").spec.signal;
  ASSERT_TRUE(term);
  EXPECT_EQ(term->number, SIGTERM);
  EXPECT_EQ(term->name, "TERM");
  EXPECT_EQ(MustParsePipelineTask("signal:\n").spec.signal, std::nullopt);
}

TEST(PipelineYaml, SignalErrorsNameTheLine) {
  EXPECT_EQ(YamlError("run: x\nsignal: {name: USR1, before: 5m}\n"),
            "task.yaml:2: signal needs time_limit");
  EXPECT_EQ(YamlError("time_limit: 4m\nsignal:\n  name: USR1\n  before: 5m\n"),
            "task.yaml:4: signal.before (5m) must be shorter than time_limit (4m)");
  EXPECT_EQ(YamlError("time_limit: 5m\nsignal: USR1@300\n"),
            "task.yaml:2: signal.before (5m) must be shorter than time_limit (5m)");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal:\n  name: USR1\n  before: 0s\n"),
            "task.yaml:4: signal.before must be positive");
  EXPECT_THAT(YamlError("time_limit: 1h\nsignal:\n  name: KILL\n  before: 5m\n"),
              HasSubstr("task.yaml:3: signal.name: signal 'KILL' cannot be caught"));
  EXPECT_THAT(YamlError("time_limit: 1h\nsignal: BOGUS@30\n"),
              HasSubstr("task.yaml:2: signal: unknown signal 'BOGUS' (expected HUP, INT"));
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal: USR1\n"),
            "task.yaml:2: signal: say when to send it: {name: USR1, before: 5m} or USR1@300, got "
            "\"USR1\"");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal: USR1@soon\n"),
            "task.yaml:2: signal: expected {name: USR1, before: 5m} or USR1@300 (a bare number is "
            "seconds), got \"USR1@soon\"");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal:\n  before: 5m\n"),
            "task.yaml:3: signal: name is missing, as in {name: USR1, before: 5m} or USR1@300");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal:\n  name: USR1\n"),
            "task.yaml:3: signal: before is missing (how long before time_limit to send it), as "
            "in {name: USR1, before: 5m} or USR1@300");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal:\n  name: USR1\n  when: 5m\n"),
            "task.yaml:4: signal: unknown field 'when'");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal:\n  name: [USR1]\n  before: 5m\n"),
            "task.yaml:3: signal.name: expected a signal such as USR1, got a list");
  EXPECT_EQ(YamlError("time_limit: 1h\nsignal: {name: USR1, before: soon}\n"),
            "task.yaml:2: signal.before: expected a duration like 30s, 5m or 1h (a bare number is "
            "seconds), got \"soon\"");
}

TEST(PipelineYaml, MisspelledTopFieldsGetSuggestions) {
  EXPECT_EQ(YamlError("depend_on: ok:1\n"),
            "task.yaml:1: unknown field 'depend_on' (did you mean 'depends_on'?)");
  EXPECT_EQ(YamlError("dependencies: ok:1\n"),
            "task.yaml:1: unknown field 'dependencies' (did you mean 'depends_on'?)");
  EXPECT_EQ(YamlError("retries: 3\n"),
            "task.yaml:1: unknown field 'retries' (did you mean 'retry'?)");
  EXPECT_EQ(YamlError("max_runing: 3\n"),
            "task.yaml:1: unknown field 'max_runing' (did you mean 'max_running'?)");
  EXPECT_EQ(YamlError("time_limit_scop: job\n"),
            "task.yaml:1: unknown field 'time_limit_scop' (did you mean 'time_limit_scope'?)");
}

// The older fields keep their meaning for a bare number: minutes for time_limit, a unit required
// for kill_grace.
TEST(PipelineYaml, OlderDurationFieldsAreUnchanged) {
  EXPECT_EQ(MustParsePipelineTask("time_limit: 90\n").spec.time_limit, 90 * 60'000);
  EXPECT_THAT(YamlError("kill_grace: 30\n"), HasSubstr("(with a unit)"));
}

// ---------------------------------------------------------------------------------------------
// JSON

JobSpec PipelineSpec() {
  JobSpec s;
  s.run = "python train.py";
  s.time_limit = 4 * 3'600'000;
  s.depends_on = {Dep(DependencyKind::kOk, {10, 11}), Dep(DependencyKind::kAny, {3}, true)};
  s.max_running = 32;
  s.retry.max_restarts = 3;
  s.retry.on_exit_codes = {137, 75};
  s.retry.backoff = 30'500;  // not whole seconds: goes out as a fraction
  s.time_limit_scope = TimeLimitScope::kJob;
  s.signal = Usr1Before(5 * 60'000);
  return s;
}

TEST(PipelineJson, ShapeIsTheDocumentedOne) {
  json::value v = SpecToJson(PipelineSpec());
  EXPECT_EQ(json::serialize(v.at("depends_on")), R"(["ok:10,11","any:group:3"])");
  EXPECT_EQ(v.at("max_running").as_int64(), 32);
  EXPECT_EQ(
      json::serialize(v.at("retry")),
      R"({"max_restarts":3,"on_exit_codes":[137,75],"backoff_s":3.05E1,"never":false,"on_oom":false})");
  EXPECT_EQ(v.at("time_limit_scope").as_string(), "job");
  EXPECT_EQ(json::serialize(v.at("signal")), R"({"name":"USR1","before_s":300})");

  json::value d = SpecToJson(JobSpec{});
  EXPECT_EQ(json::serialize(d.at("depends_on")), "[]");
  EXPECT_TRUE(d.at("max_running").is_null());
  EXPECT_EQ(json::serialize(d.at("retry")),
            R"({"max_restarts":0,"on_exit_codes":[],"backoff_s":0,"never":false,"on_oom":false})");
  EXPECT_EQ(d.at("time_limit_scope").as_string(), "attempt");
  EXPECT_TRUE(d.at("signal").is_null());
}

TEST(PipelineJson, RoundTripIsExact) {
  JobSpec never;
  never.retry.never = true;
  JobSpec limits;
  limits.time_limit = kMaxTimeLimit;
  limits.max_running = kMaxRunning;
  limits.retry.max_restarts = kMaxRestarts;
  limits.retry.backoff = kMaxBackoff;
  limits.signal = Usr1Before(kMaxTimeLimit - 1);
  limits.signal->number = SIGWINCH;
  limits.signal->name = "WINCH";
  for (int64_t id = 1; id <= static_cast<int64_t>(kMaxDependencyIds); ++id) {
    limits.depends_on.push_back(Dep(DependencyKind::kNotOk, {id}));
  }
  for (const JobSpec& s : {PipelineSpec(), JobSpec{}, never, limits}) {
    auto back = PipelineSpecFromText(json::serialize(SpecToJson(s)));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, s);
  }
}

// Specs stored before these fields existed have none of their keys: they read as the defaults.
TEST(PipelineJson, OldStoredSpecReadsWithDefaults) {
  auto s = PipelineSpecFromText(R"({"name":"train","num_nodes":1,
    "resources":{"accelerators":{"V100":4},"cpus":8,"memory":32},
    "envs":{"LR":"0.01"},"workdir":"/home/me","setup":"","run":"python train.py",
    "priority":0,"pool":"","node_selector":{},"placement":null,
    "time_limit_s":3600,"kill_grace_s":null,
    "recovery":{"on_preemption":"requeue","on_node_lost":"fail"}})");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->name, "train");
  EXPECT_THAT(s->depends_on, IsEmpty());
  EXPECT_EQ(s->max_running, std::nullopt);
  EXPECT_EQ(s->retry, RetryPolicy{});
  EXPECT_EQ(s->time_limit_scope, TimeLimitScope::kAttempt);
  EXPECT_EQ(s->signal, std::nullopt);
  // And it is written back with the new keys, which read as the same spec.
  auto again = PipelineSpecFromText(json::serialize(SpecToJson(*s)));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *s);
}

TEST(PipelineJson, PartialObjectsAndOtherSpellings) {
  auto s = PipelineSpecFromText(R"({"time_limit_s": 600, "retry": {"never": true},
                        "signal": {"name": "sigusr2", "before_s": 30.5},
                        "depends_on": ["afterok:1:2"], "max_running": null})");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->retry.never);
  EXPECT_EQ(s->retry.max_restarts, 0);
  ASSERT_TRUE(s->signal);
  EXPECT_EQ(s->signal->name, "USR2");
  EXPECT_EQ(s->signal->number, SIGUSR2);
  EXPECT_EQ(s->signal->before, 30'500);
  EXPECT_THAT(s->depends_on, ElementsAre(Dep(DependencyKind::kOk, {1, 2})));
  EXPECT_EQ(s->max_running, std::nullopt);
  auto r = PipelineSpecFromText(R"({"retry": {"max_restarts": 2}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->retry.max_restarts, 2);
  EXPECT_THAT(r->retry.on_exit_codes, IsEmpty());
  EXPECT_EQ(r->retry.backoff, 0);
}

TEST(PipelineJson, WrongTypesAndUnknownKeysNameTheField) {
  EXPECT_EQ(JsonError(R"({"depends_on": "ok:10"})"),
            "depends_on: expected a list of dependencies like \"ok:10\", got a string");
  EXPECT_EQ(JsonError(R"({"depends_on": [10]})"), "depends_on[0]: expected a string, got a number");
  EXPECT_EQ(JsonError(R"({"depends_on": ["ok:10", "ok:x"]})"),
            "depends_on[1]: dependency 'ok:x': 'x' is not a job id");
  EXPECT_EQ(JsonError(R"({"max_running": "3"})"),
            "max_running: expected a whole number, got a string");
  EXPECT_EQ(JsonError(R"({"retry": "never"})"), "retry: expected an object, got a string");
  EXPECT_EQ(JsonError(R"({"retry": {"backoff": 3}})"), "retry: unknown field 'backoff'");
  EXPECT_EQ(JsonError(R"({"retry": {"never": 1}})"),
            "retry.never: expected true or false, got a number");
  EXPECT_EQ(JsonError(R"({"retry": {"on_exit_codes": 137}})"),
            "retry.on_exit_codes: expected a list, got a number");
  EXPECT_EQ(JsonError(R"({"retry": {"max_restarts": 1, "on_exit_codes": [137, "x"]}})"),
            "retry.on_exit_codes[1]: expected a whole number, got a string");
  EXPECT_EQ(JsonError(R"({"retry": {"backoff_s": null}})"),
            "retry.backoff_s: expected a number, got null");
  EXPECT_EQ(JsonError(R"({"time_limit_scope": "jobs"})"),
            "time_limit_scope: expected \"attempt\" or \"job\", got \"jobs\"");
  EXPECT_EQ(JsonError(R"({"time_limit_scope": null})"),
            "time_limit_scope: expected a string, got null");
  EXPECT_EQ(JsonError(R"({"signal": "USR1@300"})"),
            "signal: expected an object or null, got a string");
  EXPECT_EQ(JsonError(R"({"signal": {"before_s": 300}})"), "signal: name is missing");
  EXPECT_EQ(JsonError(R"({"signal": {"name": "USR1", "before": 300}})"),
            "signal: unknown field 'before'");
  EXPECT_THAT(JsonError(R"({"signal": {"name": "KILL", "before_s": 300}})"),
              HasSubstr("signal.name: signal 'KILL' cannot be caught"));
}

// A list longer than the limit is refused before its texts are parsed.
TEST(PipelineJson, TooManyDependenciesAreRefusedEarly) {
  json::array deps;
  for (int i = 1; i <= 1001; ++i) deps.emplace_back("ok:" + std::to_string(i));
  auto r = SpecFromJson(json::object{{"depends_on", deps}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "depends_on has 1001 dependencies; at most 1000 jobs and groups are allowed");
  deps.pop_back();
  EXPECT_TRUE(SpecFromJson(json::object{{"depends_on", deps}}).ok());
}

// JSON skips the YAML parser: ValidateSpec still applies.
TEST(PipelineJson, IsValidated) {
  EXPECT_EQ(JsonError(R"({"max_running": 0})"), "max_running must be between 1 and 1000000, got 0");
  EXPECT_EQ(JsonError(R"({"retry": {"on_exit_codes": [137]}})"),
            "retry.on_exit_codes needs retry.max_restarts");
  EXPECT_EQ(JsonError(R"({"retry": {"never": true, "max_restarts": 2}})"),
            "retry: never cannot be combined with max_restarts");
  EXPECT_EQ(JsonError(R"({"signal": {"name": "USR1", "before_s": 300}})"),
            "signal needs time_limit");
  EXPECT_EQ(JsonError(R"({"time_limit_s": 240, "signal": {"name": "USR1", "before_s": 300}})"),
            "signal.before (5m) must be shorter than time_limit (4m)");
  EXPECT_EQ(JsonError(R"({"time_limit_scope": "job"})"), "time_limit_scope: job needs time_limit");
}

// ---------------------------------------------------------------------------------------------
// ValidateSpec

TEST(PipelineValidate, ValidSpecsPass) {
  EXPECT_TRUE(ValidateSpec(PipelineSpec()).ok()) << ValidateSpec(PipelineSpec()).message();
  JobSpec s;
  s.retry.never = true;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s = {};
  s.retry.backoff = 30'000;  // a wait without restarts is harmless
  EXPECT_TRUE(ValidateSpec(s).ok());
}

TEST(PipelineValidate, Dependencies) {
  JobSpec s;
  s.depends_on = {Dep(DependencyKind::kOk, {})};
  EXPECT_EQ(ValidationError(s), "depends_on: dependency 'ok:' names no job");
  s.depends_on = {Dep(DependencyKind::kAny, {}, true)};
  EXPECT_EQ(ValidationError(s), "depends_on: dependency 'any:group:' names no group");
  s.depends_on = {Dep(DependencyKind::kOk, {10, 0})};
  EXPECT_EQ(ValidationError(s), "depends_on: dependency 'ok:10,0': 0 is not a job id");
  s.depends_on = {Dep(DependencyKind::kNotOk, {-4}, true)};
  EXPECT_EQ(ValidationError(s), "depends_on: dependency 'notok:group:-4': -4 is not a group id");
  // The limit counts ids over all dependencies.
  s.depends_on.clear();
  for (int64_t id = 1; id <= 500; ++id) s.depends_on.push_back(Dep(DependencyKind::kOk, {id}));
  std::vector<int64_t> more;
  for (int64_t id = 1; id <= 500; ++id) more.push_back(id + 1000);
  s.depends_on.push_back(Dep(DependencyKind::kAny, more, true));
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.depends_on.back().ids.push_back(7);
  EXPECT_EQ(ValidationError(s), "depends_on names 1001 jobs and groups; at most 1000 are allowed");
}

TEST(PipelineValidate, MaxRunning) {
  JobSpec s;
  s.max_running = 1;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.max_running = 0;
  EXPECT_EQ(ValidationError(s), "max_running must be between 1 and 1000000, got 0");
  s.max_running = -1;
  EXPECT_EQ(ValidationError(s), "max_running must be between 1 and 1000000, got -1");
  s.max_running = kMaxRunning + 1;
  EXPECT_EQ(ValidationError(s), "max_running must be between 1 and 1000000, got 1000001");
}

TEST(PipelineValidate, Retry) {
  JobSpec s;
  s.retry.max_restarts = kMaxRestarts + 1;
  EXPECT_EQ(ValidationError(s), "retry.max_restarts must be between 0 and 1000, got 1001");
  s = {};
  s.retry.max_restarts = 1;
  s.retry.on_exit_codes = {1, 255};
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.retry.on_exit_codes = {-1};
  EXPECT_EQ(ValidationError(s),
            "retry.on_exit_codes: -1 is not the exit code of a failure (expected 1..255)");
  s = {};
  s.retry.on_exit_codes = {137};
  EXPECT_EQ(ValidationError(s), "retry.on_exit_codes needs retry.max_restarts");
  s = {};
  s.retry.max_restarts = 1;
  s.retry.backoff = -1;
  EXPECT_EQ(ValidationError(s), "retry.backoff must not be negative");
  s.retry.backoff = kMaxBackoff;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.retry.backoff = kMaxBackoff + 1000;
  EXPECT_EQ(ValidationError(s), "retry.backoff must be at most 1d, got 1d1s");
}

TEST(PipelineValidate, RetryNeverStandsAlone) {
  JobSpec s;
  s.retry.never = true;
  s.retry.max_restarts = 2;
  EXPECT_EQ(ValidationError(s), "retry: never cannot be combined with max_restarts");
  s.retry.max_restarts = 0;
  s.retry.on_exit_codes = {137};
  EXPECT_EQ(ValidationError(s), "retry: never cannot be combined with on_exit_codes");
  s.retry.on_exit_codes.clear();
  s.retry.backoff = 1000;
  EXPECT_EQ(ValidationError(s), "retry: never cannot be combined with backoff");
}

TEST(PipelineValidate, TimeLimitScopeAndSignalNeedATimeLimit) {
  JobSpec s;
  s.time_limit_scope = TimeLimitScope::kJob;
  EXPECT_EQ(ValidationError(s), "time_limit_scope: job needs time_limit");
  s.time_limit = 60'000;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s = {};
  s.signal = Usr1Before(1000);
  EXPECT_EQ(ValidationError(s), "signal needs time_limit");
}

TEST(PipelineValidate, SignalBeforeTheLimit) {
  JobSpec s;
  s.time_limit = 4 * 60'000;
  s.signal = Usr1Before(5 * 60'000);
  EXPECT_EQ(ValidationError(s), "signal.before (5m) must be shorter than time_limit (4m)");
  s.signal->before = 4 * 60'000;
  EXPECT_EQ(ValidationError(s), "signal.before (4m) must be shorter than time_limit (4m)");
  s.signal->before = 4 * 60'000 - 1;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.signal->before = 0;
  EXPECT_EQ(ValidationError(s), "signal.before must be positive");
  s.signal->before = -5;
  EXPECT_EQ(ValidationError(s), "signal.before must be positive");
}

// A spec built in code must pair the name with its number; the name is what is stored.
TEST(PipelineValidate, SignalNameAndNumberAgree) {
  JobSpec s;
  s.time_limit = 3'600'000;
  s.signal = Usr1Before(60'000);
  s.signal->number = SIGUSR2;
  EXPECT_THAT(ValidationError(s), HasSubstr("signal.name: \"USR1\" does not match signal number"));
  s.signal = Usr1Before(60'000);
  s.signal->name = "usr1";  // not the canonical name
  EXPECT_THAT(ValidationError(s), HasSubstr("signal.name: \"usr1\" does not match"));
  s.signal->name = "KILL";
  s.signal->number = SIGKILL;
  EXPECT_THAT(ValidationError(s), HasSubstr("signal.name: signal 'KILL' cannot be caught"));
}

}  // namespace
}  // namespace berth
