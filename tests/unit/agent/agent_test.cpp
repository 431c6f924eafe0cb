// The agent against a fake server (FakeConnection), a fake supervisor launcher (FakeLauncher) and a
// FakeClock. Job directories, events files and inotify are real, in a temp state dir: the test
// plays each job's supervisor by writing its output and events itself.
//
// Every test runs one agent for node n1, which declares two V100s, 4 CPUs and 8 GiB, on its own
// thread, and waits for what it does (WaitFor) instead of sleeping. Its commands (podman's version
// at start, health probes) go to a FakeCommandRunner: the node has podman 4.3.1 and nothing else.
#include "agent/agent.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "fakes/fake_clock.h"
#include "fakes/fake_connection.h"
#include "fakes/fake_health.h"
#include "fakes/fake_launcher.h"
#include "fakes/temp_dir.h"
#include "supervise/supervisor.h"

namespace berth {
namespace {

using proto::AttemptRank;
using proto::ReportEvent;
using testing::FakeClock;
using testing::FakeCommandRunner;
using testing::FakeConnection;
using testing::FakeLauncher;
using testing::TempDir;
using testing::WaitFor;

// How long a test waits for the agent to do something: ample, since each wait normally ends in
// a few milliseconds.
constexpr int kTimeoutMs = 3000;
// How long a test waits for the agent's start (its first registration): it detects the node's
// cgroups and makes its own, which takes longer on a loaded machine (a sanitizer run beside
// others).
constexpr int kStartTimeoutMs = 30'000;
constexpr int64_t kSpecId = 7;

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() {
    options_.name = "n1";
    options_.state_dir = state_.path();
    options_.gpus = "V100:2";
    options_.cpus = 4000;
    options_.memory = 8192;
    connection_.AddSpec(kSpecId, R"({"run":"echo hi"})");
    // A podman the agent finds (an executable file) and asks its version through the runner.
    options_.podman = tools_.path() + "/podman";
    WriteFileInPlace(options_.podman, "#!/bin/sh\nexit 1\n", 0755);
    commands_->On(options_.podman,
                  [](const auto&) { return FakeCommandRunner::Exit(0, "podman version 4.3.1\n"); });
    options_.command_runner = commands_;
  }

  ~AgentTest() override {
    connection_.ReleaseSpecs();  // a launcher thread held in GetSpec would keep Run() from ending
    connection_.ReleaseBlobs();  // nor one held fetching uploads
    launcher_.ReleaseStarts();   // nor one held in Start
    if (agent_) {
      agent_->RequestStop();
      thread_.join();
    }
  }

  void StartAgent() {
    agent_ = std::make_unique<Agent>(options_, clock_, connection_, launcher_);
    thread_ = std::thread([this] { run_status_ = agent_->Run(); });
    // Every test's agent registers; waiting for that here leaves each test's own waits the
    // agent's work alone, not its start.
    ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kStartTimeoutMs));
  }

  std::string JobDir(const std::string& key) const { return state_.path() + "/jobs/" + key; }

  static proto::LaunchMessage LaunchOf(const AttemptRank& id, std::vector<int> gpus) {
    proto::LaunchMessage m;
    m.job = id.job;
    m.attempt = id.attempt;
    m.rank = id.rank;
    m.spec_id = kSpecId;
    m.name = "train";
    m.user = "alice";
    m.node_ips = {"10.0.0.1"};
    m.gpus_per_node = static_cast<int64_t>(gpus.size());
    m.gpus = std::move(gpus);
    return m;
  }

  static proto::StopMessage StopOf(const AttemptRank& id) {
    return {id.job, id.attempt, id.rank, "cancelled by alice"};
  }

  // The first report of `event` for `id` the server received, if any.
  std::optional<proto::Report> Reported(const AttemptRank& id, ReportEvent event) const {
    for (const auto& r : connection_.reports()) {
      if (r.id() == id && r.event == event) return r;
    }
    return std::nullopt;
  }
  bool WaitForReport(const AttemptRank& id, ReportEvent event) const {
    return WaitFor([&] { return Reported(id, event).has_value(); }, kTimeoutMs);
  }

  TempDir state_;
  TempDir tools_;
  std::shared_ptr<FakeCommandRunner> commands_ = std::make_shared<FakeCommandRunner>();
  AgentOptions options_;
  FakeClock clock_;
  FakeConnection connection_;
  FakeLauncher launcher_;
  std::unique_ptr<Agent> agent_;
  std::thread thread_;
  Status run_status_;
};

// The server launches rank 0 of job 1's first attempt on n1, on GPU 1, with spec 7 ("echo hi").
// The agent writes the run plan into <state>/jobs/1-1-0, starts a supervisor for that directory and
// reports the rank accepted. The run sees GPU 1 only (BERTH_GPU_IDS names it too); setup sees no
// CUDA_VISIBLE_DEVICES at all.
TEST_F(AgentTest, LaunchStartsASupervisorWithThePlanAndReportsAccepted) {
  StartAgent();
  ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kStartTimeoutMs));
  proto::RegisterRequest joined = connection_.registers()[0];
  EXPECT_EQ(joined.name, "n1");
  EXPECT_EQ(joined.cpus_milli, 4000);
  EXPECT_EQ(joined.memory_mib, 8192);
  EXPECT_EQ(joined.gpus, (std::vector<proto::NodeGpu>{{0, "V100"}, {1, "V100"}}));
  EXPECT_TRUE(joined.running.empty());

  connection_.Push(LaunchOf({1, 1, 0}, {1}));

  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  EXPECT_EQ(launcher_.starts()[0], JobDir("1-1-0"));
  auto plan = ReadRunPlan(JobDir("1-1-0"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->run, "echo hi");
  EXPECT_EQ(plan->limits.node_cpu_milli, 4000);  // what its cgroup's parent weighs
  EXPECT_EQ(plan->run_env["CUDA_VISIBLE_DEVICES"], "1");
  // Nothing is fenced (declared GPUs, no device files): its index on the node all the same.
  EXPECT_EQ(plan->run_env["BERTH_GPU_IDS"], "1");
  EXPECT_EQ(plan->run_env["BERTH_JOB_ID"], "1");
  EXPECT_EQ(plan->setup_env.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(plan->setup_env["BERTH_JOB_ID"], "1");
  // The node's name, and (podman is here) the user's podman in their image store.
  EXPECT_EQ(plan->run_env["BERTH_NODE"], "n1");
  EXPECT_EQ(plan->setup_env["BERTH_NODE"], "n1");
  EXPECT_EQ(plan->run_env["BERTH_PODMAN"],
            state_.path() + "/containers/" + std::to_string(::geteuid()) + "/podman");
  EXPECT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kAccepted));
}

// The server sends spec 8 on the watch stream before the launches that use it: the agent runs both
// jobs from it without fetching it (one round trip less per submission), and writes no file for
// it. Spec 7, which did not come that way, is fetched once, for both jobs that use it.
TEST_F(AgentTest, ASpecSentOnTheStreamIsNotFetched) {
  StartAgent();
  connection_.Push(proto::SpecMessage{8, R"({"run":"echo streamed"})"});
  proto::LaunchMessage first = LaunchOf({1, 1, 0}, {});
  first.spec_id = 8;
  proto::LaunchMessage second = LaunchOf({2, 1, 0}, {});
  second.spec_id = 8;
  connection_.Push(first);
  connection_.Push(second);
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 2; }, kTimeoutMs));
  for (const char* key : {"1-1-0", "2-1-0"}) {
    auto plan = ReadRunPlan(JobDir(key));
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->run, "echo streamed");
  }
  EXPECT_EQ(connection_.spec_requests(), 0);

  connection_.Push(LaunchOf({3, 1, 0}, {}));
  connection_.Push(LaunchOf({4, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 4; }, kTimeoutMs));
  EXPECT_EQ(ReadRunPlan(JobDir("4-1-0"))->run, "echo hi");
  EXPECT_EQ(connection_.spec_requests(), 1);
  EXPECT_EQ(std::vector<std::string>{"jobs"}, [&] {
    std::vector<std::string> dirs;
    for (const auto& e : std::filesystem::directory_iterator(state_.path())) {
      if (e.is_directory()) dirs.push_back(e.path().filename());
    }
    return dirs;
  }());
}

// Job 1 prints "hello" and exits 0. The server must have the whole output before it hears of the
// exit (a user who sees "succeeded" then reads the log), so the 6 bytes arrive before, or in the
// same round as, the "exited" report. Once the server has acknowledged the exit, the agent has
// nothing left to ship and removes the job's directory.
TEST_F(AgentTest, ProgressAndExitAreReportedAfterTheOutput) {
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  std::string dir = JobDir("1-1-0");

  std::ofstream(dir + "/output.log", std::ios::app) << "hello\n";
  AppendEvent(dir, {"running"});
  AppendEvent(dir, {"exited", 0, "run", ""});

  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  auto exited = *Reported({1, 1, 0}, ReportEvent::kExited);
  EXPECT_EQ(exited.exit_code, 0);
  EXPECT_EQ(exited.phase, "run");
  EXPECT_TRUE(Reported({1, 1, 0}, ReportEvent::kRunning).has_value());
  EXPECT_EQ(connection_.log({1, 1, 0}), "hello\n");
  auto journal = connection_.journal();
  auto log_at = std::find(journal.begin(), journal.end(), "log 1-1-0 6");
  auto exit_at = std::find(journal.begin(), journal.end(), "report 1-1-0 exited");
  EXPECT_LT(log_at, exit_at) << "the exit was reported before the output was shipped";

  EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(dir); }, kTimeoutMs));
}

// A short job: it starts, and exits 50 ms later. Its acceptance and start wait for its exit (the
// hold is 1 s here, 20 ms by default), and all three reach the server in one request: one commit
// there instead of two. Nothing waits longer than the hold: a job that keeps running is reported
// running once it is over.
TEST_F(AgentTest, AShortJobsStartAndExitAreReportedInOneRequest) {
  options_.report_hold_ms = 1000;
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  AppendEvent(JobDir("1-1-0"), {"running"});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  AppendEvent(JobDir("1-1-0"), {"exited", 0, "run", ""});
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  auto requests = connection_.report_requests();
  ASSERT_EQ(requests.size(), 1u);
  std::vector<ReportEvent> events;
  for (const auto& r : requests[0].reports) events.push_back(r.event);
  EXPECT_EQ(events, (std::vector<ReportEvent>{ReportEvent::kAccepted, ReportEvent::kRunning,
                                              ReportEvent::kExited}));

  auto started = std::chrono::steady_clock::now();
  connection_.Push(LaunchOf({2, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 2; }, kTimeoutMs));
  AppendEvent(JobDir("2-1-0"), {"running"});
  ASSERT_TRUE(WaitForReport({2, 1, 0}, ReportEvent::kRunning));
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(900));
  EXPECT_EQ(connection_.report_requests().size(), 2u);
}

// A job that prints is not held back: a user who reads its first line must see it RUNNING. Its
// start is noticed first and held (the hold is 1 s here); the round that ships its output sends
// the held reports right after it, not at the end of the hold.
TEST_F(AgentTest, AJobsStartIsNotHeldOnceItsOutputIsShipped) {
  options_.report_hold_ms = 1000;
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  AppendEvent(JobDir("1-1-0"), {"running"});
  std::ofstream(JobDir("1-1-0") + "/output.log", std::ios::app) << "first\n";
  ASSERT_TRUE(WaitFor([&] { return connection_.log({1, 1, 0}) == "first\n"; }, kTimeoutMs));
  auto shipped = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kRunning));
  EXPECT_LT(std::chrono::steady_clock::now() - shipped, std::chrono::milliseconds(500))
      << "the job's start was held back while its output was on the server";
  auto journal = connection_.journal();
  auto log_at = std::find(journal.begin(), journal.end(), "log 1-1-0 6");
  auto running_at = std::find(journal.begin(), journal.end(), "report 1-1-0 running");
  EXPECT_LT(log_at, running_at);
  EXPECT_FALSE(Reported({1, 1, 0}, ReportEvent::kExited).has_value());
}

// The user cancels job 1 while it runs: the server sends a stop, and the agent asks the job's
// supervisor (pid 100001, the first the fake hands out) to stop it.
TEST_F(AgentTest, StopOfARunningJobSignalsItsSupervisor) {
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  EXPECT_TRUE(launcher_.stops().empty());

  connection_.Push(StopOf({1, 1, 0}));

  EXPECT_TRUE(
      WaitFor([&] { return launcher_.stops() == std::vector<pid_t>{FakeLauncher::kFirstPid}; },
              kTimeoutMs));
  // The stop names the rank's directory: the node supervisor runs every rank of the node.
  EXPECT_EQ(launcher_.stop_dirs(), launcher_.starts());
}

// The server launches job 3, but its spec is slow to come: the agent has taken the launch off the
// queue and waits for the spec when the user cancels the job and the stop arrives. The agent must
// not say "never ran" yet — the server would free the GPUs while the launch could still start the
// job — and once the spec arrives it must not start the job either. Only then does it report the
// rank exited with no exit code, "was not running".
TEST_F(AgentTest, StopOfALaunchNotYetStartedIsReportedAsNeverRun) {
  connection_.HoldSpecs();
  StartAgent();
  connection_.Push(LaunchOf({3, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return connection_.spec_requests() == 1; }, kTimeoutMs));

  connection_.Push(StopOf({3, 1, 0}));
  ASSERT_TRUE(WaitFor([&] { return connection_.delivered() == 2; }, kTimeoutMs));
  EXPECT_FALSE(Reported({3, 1, 0}, ReportEvent::kExited).has_value());

  connection_.ReleaseSpecs();

  ASSERT_TRUE(WaitForReport({3, 1, 0}, ReportEvent::kExited));
  auto exited = *Reported({3, 1, 0}, ReportEvent::kExited);
  EXPECT_EQ(exited.exit_code, std::nullopt);
  EXPECT_EQ(exited.reason, "was not running");
  EXPECT_TRUE(launcher_.starts().empty());
  EXPECT_FALSE(Reported({3, 1, 0}, ReportEvent::kAccepted).has_value());
  EXPECT_FALSE(std::filesystem::exists(JobDir("3-1-0")));
}

// The agent registers again (the server dropped its stream: it restarted) while job 3
// is being launched (its spec is slow to come) and job 4 waits behind it: it says it has both, so
// that the server stops them if it no longer wants them instead of freeing their resources while
// they start. Job 4 was sent twice: one stop drops both copies.
TEST_F(AgentTest, ARegistrationCountsLaunchesInProgressAndQueued) {
  connection_.HoldSpecs();
  StartAgent();
  connection_.Push(LaunchOf({3, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return connection_.spec_requests() == 1; }, kTimeoutMs));
  connection_.Push(LaunchOf({4, 1, 0}, {1}));
  connection_.Push(LaunchOf({4, 1, 0}, {1}));
  ASSERT_TRUE(WaitFor([&] { return connection_.delivered() == 3; }, kTimeoutMs));
  connection_.EndStream();
  ASSERT_TRUE(WaitFor([&] { return connection_.registers().size() >= 2; }, kTimeoutMs));
  auto running = connection_.registers()[1].running;
  std::sort(running.begin(), running.end());
  EXPECT_EQ(running, (std::vector<AttemptRank>{{3, 1, 0}, {4, 1, 0}, {4, 1, 0}}));

  connection_.Push(StopOf({4, 1, 0}));
  ASSERT_TRUE(WaitForReport({4, 1, 0}, ReportEvent::kExited));
  connection_.ReleaseSpecs();
  ASSERT_TRUE(WaitForReport({3, 1, 0}, ReportEvent::kAccepted));
  EXPECT_EQ(launcher_.starts(), std::vector<std::string>{JobDir("3-1-0")});
}

// Earlier agents left one file per submission in <state>/specs: the agent moves it aside before it
// registers and removes it after, so that deleting a million files never delays the node's lease.
TEST_F(AgentTest, TheSpecsDirectoryOfEarlierAgentsIsRemoved) {
  for (int i = 1; i <= 50; ++i) {
    std::filesystem::create_directories(state_.path() + "/specs");
    std::ofstream(state_.path() + "/specs/" + std::to_string(i) + ".json") << "{}";
  }
  StartAgent();
  ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kStartTimeoutMs));
  EXPECT_TRUE(WaitFor(
      [&] {
        return !std::filesystem::exists(state_.path() + "/specs") &&
               !std::filesystem::exists(state_.path() + "/specs.old");
      },
      kTimeoutMs));
}

// Spec ids of a long sweep stay in use while a thousand newer ones come and go: the agent keeps the
// specs it used last (not the newest ids), so the sweep's next launch needs no fetch.
TEST_F(AgentTest, TheSpecCacheKeepsWhatWasUsedLast) {
  StartAgent();
  connection_.Push(proto::SpecMessage{kSpecId, R"({"run":"echo sweep"})"});
  connection_.Push(LaunchOf({1, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  for (int64_t id = 100; id < 100 + 1100; ++id) {
    connection_.Push(proto::SpecMessage{id, R"({"run":"true"})"});
    if (id % 100 == 0) {  // the sweep goes on meanwhile
      connection_.Push(LaunchOf({id, 1, 0}, {}));
      ASSERT_TRUE(
          WaitFor([&] { return launcher_.starts().size() == static_cast<size_t>(1 + id / 100); },
                  kTimeoutMs));
    }
  }
  connection_.Push(LaunchOf({2, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 13; }, kTimeoutMs));
  EXPECT_EQ(ReadRunPlan(JobDir("2-1-0"))->run, "echo sweep");
  EXPECT_EQ(connection_.spec_requests(), 0);
}

// Specs were kept by count only (1,024), and a spec's text may be as big as the server's body
// limit: the cache could hold gigabytes. It is bounded by bytes too: three specs of 25 MiB pass 64
// MiB, and the one used longest ago is fetched again when a launch needs it. (These specs are too
// big to run, an environment of 25 MiB: each launch fails saying so, which is all this test needs.)
TEST_F(AgentTest, TheSpecCacheIsBoundedByBytes) {
  StartAgent();
  const std::string big = R"({"run":"true","envs":{"PAD":")" + std::string(25 << 20, 'x') + "\"}}";
  for (int64_t id = 100; id < 103; ++id) {
    connection_.AddSpec(id, big);
    connection_.Push(proto::SpecMessage{id, big});
  }
  ASSERT_TRUE(WaitFor([&] { return connection_.delivered() >= 3; }, kTimeoutMs));
  proto::LaunchMessage newest = LaunchOf({1, 1, 0}, {});
  newest.spec_id = 102;
  connection_.Push(newest);
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  EXPECT_EQ(connection_.spec_requests(), 0) << "the newest is cached";
  proto::LaunchMessage oldest = LaunchOf({2, 1, 0}, {});
  oldest.spec_id = 100;
  connection_.Push(oldest);
  ASSERT_TRUE(WaitForReport({2, 1, 0}, ReportEvent::kExited));
  EXPECT_EQ(connection_.spec_requests(), 1) << "the oldest went, past the byte cap";
  EXPECT_NE(Reported({2, 1, 0}, ReportEvent::kExited)->reason.find("can hold at most 128 KiB"),
            std::string::npos);
}

// A job whose workdir must be fetched held up every launch behind it while it was fetched (for
// ever, when the fetch could not end). Launches that need uploads go on a lane of their own: job 2
// starts while job 1's fetch waits; a cancel of job 1 ends its fetch, which reports it never ran.
TEST_F(AgentTest, AFetchOfUploadsHoldsUpNoOtherLaunch) {
  connection_.HoldBlobs();
  StartAgent();
  const std::string manifest(64, 'a');
  connection_.Push(proto::SpecMessage{9, R"({"run":"true","workdir_upload":")" + manifest + "\"}"});
  proto::LaunchMessage fetching = LaunchOf({1, 1, 0}, {});
  fetching.spec_id = 9;
  connection_.Push(fetching);
  ASSERT_TRUE(WaitFor([&] { return connection_.blob_fetches() == 1; }, kTimeoutMs));
  connection_.Push(LaunchOf({2, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  EXPECT_EQ(launcher_.starts()[0], JobDir("2-1-0"));
  connection_.Push(StopOf({1, 1, 0}));
  ASSERT_TRUE(WaitFor([&] { return connection_.delivered() >= 4; }, kTimeoutMs));
  connection_.ReleaseBlobs();
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  EXPECT_EQ(launcher_.starts().size(), 1u) << "the cancelled job never started";
}

// The spec of job 3 is slow to come, so job 4's launch waits in the queue behind it; then job 4 is
// cancelled. The agent drops the queued launch and reports at once that rank 0 of job 4 never ran;
// when the spec arrives, only job 3 starts.
TEST_F(AgentTest, StopOfAQueuedLaunchDropsItAndReportsItNeverRan) {
  connection_.HoldSpecs();
  StartAgent();
  connection_.Push(LaunchOf({3, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return connection_.spec_requests() == 1; }, kTimeoutMs));
  connection_.Push(LaunchOf({4, 1, 0}, {1}));
  connection_.Push(StopOf({4, 1, 0}));

  ASSERT_TRUE(WaitForReport({4, 1, 0}, ReportEvent::kExited));
  auto exited = *Reported({4, 1, 0}, ReportEvent::kExited);
  EXPECT_EQ(exited.exit_code, std::nullopt);
  EXPECT_EQ(exited.reason, "was not running");

  connection_.ReleaseSpecs();
  ASSERT_TRUE(WaitForReport({3, 1, 0}, ReportEvent::kAccepted));
  EXPECT_EQ(launcher_.starts(), std::vector<std::string>{JobDir("3-1-0")});
  EXPECT_FALSE(Reported({4, 1, 0}, ReportEvent::kAccepted).has_value());
}

// Job 1 runs on n1, but the server has moved on (it requeued the attempt while n1 was cut off): it
// answers the rank's next report with "stop". The agent stops the job's supervisor.
TEST_F(AgentTest, AReportAnsweredStopStopsTheJob) {
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kAccepted));
  EXPECT_TRUE(launcher_.stops().empty());  // "accepted" was answered ok

  connection_.MarkStale({1, 1, 0});
  AppendEvent(JobDir("1-1-0"), {"running"});

  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kRunning));
  EXPECT_TRUE(
      WaitFor([&] { return launcher_.stops() == std::vector<pid_t>{FakeLauncher::kFirstPid}; },
              kTimeoutMs));
}

// An agent on n1 ran rank 0 of job 5's second attempt and was restarted (an upgrade). While it was
// away the job ended with exit 0 and its supervisor (pid 100077) exited. The new agent finds the
// job's directory, tells the server at registration that it holds 5-2-0, reports the "running" and
// the exit it missed, and cleans the directory up once the server has them. It starts nothing.
TEST_F(AgentTest, ReAdoptionReportsExitsThatHappenedWhileTheAgentWasAway) {
  std::string dir = JobDir("5-2-0");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/supervisor.pid") << "100077\n";
  launcher_.Kill(100077);
  AppendEvent(dir, {"running"});
  AppendEvent(dir, {"exited", 0, "run", ""});

  StartAgent();

  ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kStartTimeoutMs));
  EXPECT_EQ(connection_.registers()[0].running, (std::vector<AttemptRank>{{5, 2, 0}}));
  ASSERT_TRUE(WaitForReport({5, 2, 0}, ReportEvent::kExited));
  auto exited = *Reported({5, 2, 0}, ReportEvent::kExited);
  EXPECT_EQ(exited.exit_code, 0);
  EXPECT_EQ(exited.phase, "run");
  EXPECT_TRUE(Reported({5, 2, 0}, ReportEvent::kRunning).has_value());
  EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(dir); }, kTimeoutMs));
  EXPECT_TRUE(launcher_.starts().empty());
}

// Job directories are recycled, not created and deleted: ext4 without a journal spends most of a
// short job's launch finding free inodes. Job 1 runs as alice and prints a secret; once the server
// has its exit and output, its directory becomes a spare (<state>/jobs/.spare-0) with every file
// emptied and given back to the agent. Job 2's launch renames that same directory (same inode) into
// place: it starts with an empty output and no events, and ships only its own output.
TEST_F(AgentTest, AFinishedJobsDirectoryIsEmptiedAndReusedByTheNextLaunch) {
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  std::string first = JobDir("1-1-0");
  struct stat first_st {};
  ASSERT_EQ(::stat(first.c_str(), &first_st), 0);
  std::ofstream(first + "/output.log", std::ios::app) << "alice's secret\n";
  std::ofstream(first + "/supervisor.pid") << "100001\n";
  AppendEvent(first, {"running"});
  AppendEvent(first, {"exited", 0, "run", ""});
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  std::string spare = state_.path() + "/jobs/.spare-0";
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(spare); }, kTimeoutMs));
  EXPECT_FALSE(std::filesystem::exists(first));
  for (const char* name : {"output.log", "events", "supervisor.pid", "run.json"}) {
    EXPECT_EQ(ReadFileOr(spare + "/" + name, "missing"), "") << name;
  }

  connection_.Push(LaunchOf({2, 1, 0}, {1}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 2; }, kTimeoutMs));
  std::string second = JobDir("2-1-0");
  struct stat second_st {};
  ASSERT_EQ(::stat(second.c_str(), &second_st), 0);
  EXPECT_EQ(second_st.st_ino, first_st.st_ino) << "job 2 got a new directory, not the spare";
  EXPECT_FALSE(std::filesystem::exists(spare));
  EXPECT_EQ(ReadFileOr(second + "/output.log"), "");
  EXPECT_EQ(ReadFileOr(second + "/events"), "");
  auto plan = ReadRunPlan(second);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->run_env.at("CUDA_VISIBLE_DEVICES"), "1");
  std::ofstream(second + "/output.log", std::ios::app) << "job 2\n";
  AppendEvent(second, {"running"});
  AppendEvent(second, {"exited", 0, "run", ""});
  ASSERT_TRUE(WaitForReport({2, 1, 0}, ReportEvent::kExited));
  EXPECT_EQ(connection_.log({2, 1, 0}), "job 2\n");
  EXPECT_EQ(connection_.log({1, 1, 0}), "alice's secret\n");
}

// A job whose supervisor died may have left processes that still hold its output open: its
// directory is removed, never handed to the next job as a spare.
TEST_F(AgentTest, TheDirectoryOfAJobWhoseSupervisorDiedIsNotReused) {
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kAccepted));
  launcher_.Kill(FakeLauncher::kFirstPid);
  clock_.Advance(1000);  // the next full scan is due
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  ASSERT_TRUE(WaitFor([&] { return !std::filesystem::exists(JobDir("1-1-0")); }, kTimeoutMs));
  EXPECT_FALSE(std::filesystem::exists(state_.path() + "/jobs/.spare-0"));
}

// Spares outlive the agent: a restarted agent adopts none of them as a job (it registers holding
// nothing) and hands them to its next launches.
TEST_F(AgentTest, SparesSurviveARestartAndAreNotTakenForJobs) {
  std::string spare = JobDir(".spare-41");
  std::filesystem::create_directories(spare);
  std::ofstream(spare + "/output.log").flush();

  StartAgent();
  ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kStartTimeoutMs));
  EXPECT_TRUE(connection_.registers()[0].running.empty());
  connection_.Push(LaunchOf({3, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  EXPECT_FALSE(std::filesystem::exists(spare));
  EXPECT_TRUE(std::filesystem::exists(JobDir("3-1-0") + "/run.json"));
  AppendEvent(JobDir("3-1-0"), {"exited", 0, "run", ""});
  ASSERT_TRUE(WaitForReport({3, 1, 0}, ReportEvent::kExited));
  // Numbered after the highest spare found at start.
  EXPECT_TRUE(WaitFor([&] { return std::filesystem::exists(JobDir(".spare-42")); }, kTimeoutMs));
}

// Regression: a stop of a re-adopted job that had already exited signalled its dead supervisor's
// pid. Job 5's supervisor (pid 100077) recorded exit 0 and exited while the agent was away; after
// a reboot that pid may belong to any process. The new agent registers holding 5-2-0, and the
// server, which gave up on n1 meanwhile, stops it — before the agent could ship the job's output
// and exit (here the server refuses log appends for a while). The agent knows from the events file
// that the job is over: it must signal no one, and report the exit once shipping works again.
TEST_F(AgentTest, StopAfterReAdoptionSignalledTheDeadSupervisorsPid) {
  std::string dir = JobDir("5-2-0");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/supervisor.pid") << "100077\n";
  launcher_.Kill(100077);
  std::ofstream(dir + "/output.log") << "done\n";
  AppendEvent(dir, {"running"});
  AppendEvent(dir, {"exited", 0, "run", ""});
  connection_.SetLogStatus(Status::Unavailable("the server is busy"));
  connection_.Push(StopOf({5, 2, 0}));

  StartAgent();

  ASSERT_TRUE(WaitFor([&] { return connection_.delivered() == 1; }, kTimeoutMs));
  EXPECT_TRUE(launcher_.stops().empty()) << "the stop signalled pid " << launcher_.stops()[0];

  connection_.SetLogStatus(Status::Ok());
  clock_.Advance(1000);  // output that failed to ship is retried by the next full scan
  ASSERT_TRUE(WaitForReport({5, 2, 0}, ReportEvent::kExited));
  EXPECT_EQ(Reported({5, 2, 0}, ReportEvent::kExited)->exit_code, 0);
  EXPECT_EQ(connection_.log({5, 2, 0}), "done\n");
  EXPECT_TRUE(launcher_.stops().empty());
}

// One round ships every rank's new output in one request (a request per rank was most of a
// printing job's cost to the server), at most 1 MiB of a rank each: three ranks that ended while
// the agent was away, one with 1.5 MiB of output, go in two requests, and each exit is reported
// only once all of its rank's output went.
TEST_F(AgentTest, OutputOfManyRanksGoesInOneRequest) {
  const std::string big(1536 << 10, 'x');
  for (int job : {6, 7, 8}) {
    std::string dir = JobDir(fmt::format("{}-1-0", job));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/supervisor.pid") << 100000 + job << "\n";
    launcher_.Kill(100000 + job);
    std::ofstream(dir + "/output.log") << (job == 7 ? big : fmt::format("job {}\n", job));
    AppendEvent(dir, {"running"});
    AppendEvent(dir, {"exited", 0, "run", ""});
  }

  StartAgent();

  for (int job : {6, 7, 8}) ASSERT_TRUE(WaitForReport({job, 1, 0}, ReportEvent::kExited));
  EXPECT_EQ(connection_.log({6, 1, 0}), "job 6\n");
  EXPECT_EQ(connection_.log({7, 1, 0}), big);
  EXPECT_EQ(connection_.log({8, 1, 0}), "job 8\n");
  EXPECT_EQ(connection_.log_batches(), 2)
      << "the small ranks with the big one's first MiB, then its rest";
  // Each exit is reported after the last of its rank's output was stored.
  const std::vector<std::string> journal = connection_.journal();
  auto at = [&](const std::string& entry) {
    return std::find(journal.begin(), journal.end(), entry) - journal.begin();
  };
  for (const auto& [key, size] : {std::pair{"6-1-0", 6}, {"7-1-0", 1536 << 10}, {"8-1-0", 6}}) {
    const std::string logged = fmt::format("log {} {}", key, size);
    const std::string exited = fmt::format("report {} exited", key);
    ASSERT_LT(at(logged), static_cast<long>(journal.size())) << logged;
    EXPECT_LT(at(logged), at(exited)) << key;
  }
}

// A rank whose output the server refuses (not the node's to write) is sent again at the next
// round, not in every one of a round's 16 tries; the other ranks' output and exits go on.
TEST_F(AgentTest, ARefusedRanksOutputDoesNotHoldUpTheOthers) {
  for (int job : {6, 7}) {
    std::string dir = JobDir(fmt::format("{}-1-0", job));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/supervisor.pid") << 100000 + job << "\n";
    launcher_.Kill(100000 + job);
    std::ofstream(dir + "/output.log") << fmt::format("job {}\n", job);
    AppendEvent(dir, {"running"});
    AppendEvent(dir, {"exited", 0, "run", ""});
  }
  connection_.Refuse({6, 1, 0});

  StartAgent();

  ASSERT_TRUE(WaitForReport({7, 1, 0}, ReportEvent::kExited));
  EXPECT_EQ(connection_.log({7, 1, 0}), "job 7\n");
  EXPECT_FALSE(Reported({6, 1, 0}, ReportEvent::kExited)) << "its output did not go";
  EXPECT_EQ(connection_.pieces_sent({6, 1, 0}), 1) << "once in the first round, not 16 times";
  clock_.Advance(1000);  // the next full scan tries it again
  ASSERT_TRUE(WaitFor([&] { return connection_.pieces_sent({6, 1, 0}) == 2; }, kTimeoutMs));
}

// Defence in depth for the gang setup race: job 1's supervisor dies (SIGKILL, the OOM killer, a
// stop that landed before it could write anything) without recording an exit. Its events file
// never changes, so nothing wakes the agent; only the full scan, which runs once a second of
// monotonic time, notices the dead supervisor. The agent then records the end itself and reports
// exit 137, "the job's supervisor died" — else the server would hold the job's GPUs for good.
TEST_F(AgentTest, ASupervisorThatDiedWithoutAnExitIsReportedLost) {
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0, 1}));
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kAccepted));

  launcher_.Kill(FakeLauncher::kFirstPid);
  clock_.Advance(1000);  // the next full scan is due

  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  auto exited = *Reported({1, 1, 0}, ReportEvent::kExited);
  EXPECT_EQ(exited.exit_code, 137);
  EXPECT_EQ(exited.phase, "supervisor");
  EXPECT_EQ(exited.reason, "the job's supervisor died");
}

// Launches, reports and exits wake the agent's threads, but not its heartbeat: with a 7.5 s
// interval, twenty jobs launched and ended within it bring no heartbeat (there was one per
// wake-up).
TEST_F(AgentTest, JobsComingAndGoingSendNoHeartbeat) {
  StartAgent();
  for (int64_t job = 1; job <= 20; ++job) {
    connection_.Push(LaunchOf({job, 1, 0}, {}));
    ASSERT_TRUE(WaitForReport({job, 1, 0}, ReportEvent::kAccepted));
    AppendEvent(JobDir(fmt::format("{}-1-0", job)), {"exited", 0, "run", ""});
    ASSERT_TRUE(WaitForReport({job, 1, 0}, ReportEvent::kExited));
  }
  EXPECT_TRUE(connection_.heartbeats().empty()) << connection_.heartbeats().size();
}

// The server restarted and lost n1's session: the heartbeat answers Conflict ("register again").
// The agent registers anew, with the same identity, and renews its lease under the new session.
// Registrations answer a 50 ms heartbeat interval, so the first heartbeat comes at once.
TEST_F(AgentTest, AConflictOnHeartbeatMakesTheAgentRegisterAgain) {
  connection_.SetHeartbeatMs(50);
  connection_.SetHeartbeatStatus(Status::Conflict("register again"));
  StartAgent();

  ASSERT_TRUE(WaitFor([&] { return connection_.registers().size() >= 2; }, kTimeoutMs));
  auto registers = connection_.registers();
  EXPECT_EQ(registers[1].name, "n1");
  EXPECT_EQ(registers[1].node_id, registers[0].node_id);

  connection_.SetHeartbeatStatus(Status::Ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const auto& h : connection_.heartbeats()) {
          if (h.session != "session-1") return true;
        }
        return false;
      },
      kTimeoutMs));
}

// An agent that is not root runs only its own user's jobs: another user's fails at launch, saying
// why, and never reaches a supervisor (it would run as the agent's user, with its files).
TEST_F(AgentTest, ANonRootAgentRunsOnlyItsOwnUsersJobs) {
  options_.only_user = "bob";
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));  // alice's
  ASSERT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kExited));
  auto exited = Reported({1, 1, 0}, ReportEvent::kExited);
  EXPECT_EQ(exited->phase, "launch");
  EXPECT_NE(exited->reason.find("runs only bob's jobs, not alice's"), std::string::npos)
      << exited->reason;
  EXPECT_TRUE(launcher_.starts().empty());
}

// The agent starts a supervisor without holding its lock (the spawner's answer is a round trip).
// A stop that arrives while job 1's supervisor is being started is not lost, nor answered "was not
// running": once the pid is known, the supervisor is told to stop. Meanwhile the agent goes on:
// job 2's stop, for a job it never had, is answered at once.
TEST_F(AgentTest, AStopWhileTheSupervisorStartsReachesIt) {
  StartAgent();
  launcher_.HoldStarts();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  connection_.Push(StopOf({1, 1, 0}));
  connection_.Push(StopOf({2, 1, 0}));
  EXPECT_TRUE(WaitForReport({2, 1, 0}, ReportEvent::kExited));
  EXPECT_TRUE(launcher_.stops().empty());
  launcher_.ReleaseStarts();
  EXPECT_TRUE(
      WaitFor([&] { return launcher_.stops() == std::vector<pid_t>{FakeLauncher::kFirstPid}; },
              kTimeoutMs));
  EXPECT_TRUE(WaitForReport({1, 1, 0}, ReportEvent::kAccepted));
  EXPECT_FALSE(Reported({1, 1, 0}, ReportEvent::kExited).has_value());
}

// A burst of launches for one user looks the account up once (the agent keeps it 2 s), not once
// per job; a user the node does not know is looked up again each time, and still fails the job.
TEST_F(AgentTest, ALaunchBurstLooksTheAccountUpOnce) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a job its work dir (chown) needs root";
  auto lookups = std::make_shared<std::atomic<int>>(0);
  options_.lookup_account = [lookups](const std::string& user) -> Result<JobAccount> {
    lookups->fetch_add(1);
    if (user == "alice") return JobAccount{"alice", 1001, 1001, {1001}, "/home/alice", "/bin/sh"};
    return Status::NotFound("user '" + user + "' does not exist on this node");
  };
  StartAgent();
  for (int64_t job = 1; job <= 10; ++job) connection_.Push(LaunchOf({job, 1, 0}, {}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 10; }, kTimeoutMs));
  EXPECT_EQ(ReadRunPlan(JobDir("10-1-0"))->run_as->uid, 1001u);
  EXPECT_EQ(lookups->load(), 1);
  for (int64_t job = 11; job <= 12; ++job) {
    auto unknown = LaunchOf({job, 1, 0}, {});
    unknown.user = "mallory";
    connection_.Push(unknown);
    ASSERT_TRUE(WaitForReport({job, 1, 0}, ReportEvent::kExited));
  }
  EXPECT_EQ(lookups->load(), 3);
}

// A root agent runs each job as its user: the plan carries the account, and the job's environment
// is the account's (HOME, USER, PATH...), with nothing of the agent's own but the locale. A user
// the node does not know fails the job; so does another name for uid 0.
TEST_F(AgentTest, ARootAgentRunsJobsAsTheirUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a job its work dir (chown) needs root";
  options_.base_environment = {{"AWS_SECRET_ACCESS_KEY", "s3cr3t"}, {"LANG", "C.UTF-8"}};
  options_.lookup_account = [](const std::string& user) -> Result<JobAccount> {
    if (user == "alice")
      return JobAccount{"alice", 1001, 1001, {1001, 27}, "/home/alice", "/bin/zsh"};
    if (user == "toor") return JobAccount{"toor", 0, 0, {0}, "/root", "/bin/sh"};
    return Status::NotFound("user '" + user + "' does not exist on this node");
  };
  StartAgent();
  connection_.Push(LaunchOf({1, 1, 0}, {0}));
  ASSERT_TRUE(WaitFor([&] { return launcher_.starts().size() == 1; }, kTimeoutMs));
  auto plan = ReadRunPlan(JobDir("1-1-0"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_TRUE(plan->run_as.has_value());
  EXPECT_EQ(plan->run_as->uid, 1001u);
  EXPECT_EQ(plan->run_as->groups, (std::vector<gid_t>{1001, 27}));
  EXPECT_EQ(plan->run_env["HOME"], "/home/alice");
  EXPECT_EQ(plan->run_env["USER"], "alice");
  EXPECT_EQ(plan->run_env["LOGNAME"], "alice");
  EXPECT_EQ(plan->run_env["SHELL"], "/bin/zsh");
  EXPECT_EQ(plan->run_env["LANG"], "C.UTF-8");
  EXPECT_EQ(plan->run_env.count("AWS_SECRET_ACCESS_KEY"), 0u);

  auto unknown = LaunchOf({2, 1, 0}, {1});
  unknown.user = "mallory";
  connection_.Push(unknown);
  ASSERT_TRUE(WaitForReport({2, 1, 0}, ReportEvent::kExited));
  EXPECT_NE(Reported({2, 1, 0}, ReportEvent::kExited)->reason.find("'mallory' does not exist"),
            std::string::npos);
  auto alias = LaunchOf({3, 1, 0}, {});
  alias.user = "toor";
  connection_.Push(alias);
  ASSERT_TRUE(WaitForReport({3, 1, 0}, ReportEvent::kExited));
  EXPECT_NE(Reported({3, 1, 0}, ReportEvent::kExited)->reason.find("uid 0"), std::string::npos);
  EXPECT_EQ(launcher_.starts().size(), 1u);
}

}  // namespace
}  // namespace berth
