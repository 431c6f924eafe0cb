// The agent's side of node health, against a fake server and fake probe seams: the first round of
// probes runs before the node registers and the registration carries it; a failing prolog fails the
// rank in phase "prolog" and drains the node (told to the server before the rank's end, and kept
// across a restart); an operator's reset makes the agent forget its faults.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "agent/agent.h"
#include "common/files.h"
#include "fakes/fake_clock.h"
#include "fakes/fake_connection.h"
#include "fakes/fake_health.h"
#include "fakes/fake_launcher.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using testing::FakeClock;
using testing::FakeCommandRunner;
using testing::FakeConnection;
using testing::FakeLauncher;
using testing::FakeNodeSystem;
using testing::TempDir;
using testing::WaitFor;

constexpr int kHealthTimeoutMs = 3000;

class AgentHealthTest : public ::testing::Test {
 protected:
  AgentHealthTest() {
    options_.name = "n1";
    options_.state_dir = state_.path();
    options_.gpus = "V100:2";
    options_.cpus = 4000;
    options_.memory = 8192;
    options_.isolation = false;
    options_.health.interval_ms = 60'000;  // rounds only when a test asks (a reset)
    options_.health.scripts_dir = "/health.d";
    options_.health.prolog_dir = "/prolog.d";
    options_.health.epilog_dir = "/epilog.d";
    options_.health.idle_dir = "";
    options_.health.nvidia_smi = "";
    options_.command_runner = runner_;
    options_.node_system = system_;
    system_->SetExecutables("/health.d", {"/health.d/scratch"});
    runner_->On("/health.d/scratch", [this](const TimedCommand&) {
      return FakeCommandRunner::Exit(scratch_bad_ ? 1 : 0, "scratch is read-only");
    });
    connection_.AddSpec(7, R"({"run":"echo hi"})");
  }
  ~AgentHealthTest() override { Stop(); }

  void Start() {
    agent_ = std::make_unique<Agent>(options_, clock_, connection_, launcher_);
    thread_ = std::thread([this] { (void)agent_->Run(); });
  }
  void Stop() {
    if (!agent_) return;
    connection_.ReleaseSpecs();
    launcher_.ReleaseStarts();
    agent_->RequestStop();
    thread_.join();
    agent_.reset();
  }
  static proto::LaunchMessage Launch(int64_t job) {
    proto::LaunchMessage m;
    m.job = job;
    m.attempt = 1;
    m.spec_id = 7;
    m.user = "alice";
    m.gpus = {1};
    m.gpus_per_node = 1;
    return m;
  }

  TempDir state_;
  AgentOptions options_;
  FakeClock clock_;
  FakeConnection connection_;
  FakeLauncher launcher_;
  std::shared_ptr<FakeCommandRunner> runner_ = std::make_shared<FakeCommandRunner>();
  std::shared_ptr<FakeNodeSystem> system_ = std::make_shared<FakeNodeSystem>();
  std::atomic<bool> scratch_bad_{false};
  std::unique_ptr<Agent> agent_;
  std::thread thread_;
};

TEST_F(AgentHealthTest, TheFirstRoundRunsBeforeTheNodeRegisters) {
  scratch_bad_ = true;
  Start();
  ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kHealthTimeoutMs));
  const auto health = connection_.registers()[0].health;
  ASSERT_TRUE(health);
  EXPECT_EQ(health->NodeReason(), "health.d/scratch: scratch is read-only");
  // An operator's --force: the agent forgets, probes afresh and says so.
  scratch_bad_ = false;
  const size_t sent = connection_.health_requests().size();
  connection_.Push(proto::HealthResetMessage{});
  ASSERT_TRUE(
      WaitFor([&] { return connection_.health_requests().size() > sent; }, kHealthTimeoutMs));
  EXPECT_FALSE(connection_.health_requests().back().health.NodeFaulty());
}

TEST_F(AgentHealthTest, AFailingPrologFailsTheRankAndDrainsTheNodeUntilReset) {
  system_->SetExecutables("/prolog.d", {"/prolog.d/10-scratch"});
  runner_->On("/prolog.d/10-scratch",
              [](const TimedCommand&) { return FakeCommandRunner::Exit(3, "no scratch space"); });
  Start();
  ASSERT_TRUE(WaitFor([&] { return !connection_.registers().empty(); }, kHealthTimeoutMs));
  connection_.Push(Launch(1));
  auto exited = [&]() -> std::optional<proto::Report> {
    for (const auto& r : connection_.reports()) {
      if (r.job == 1 && r.event == proto::ReportEvent::kExited) return r;
    }
    return std::nullopt;
  };
  ASSERT_TRUE(WaitFor([&] { return exited().has_value(); }, kHealthTimeoutMs));
  EXPECT_EQ(exited()->phase, "prolog");
  EXPECT_EQ(exited()->reason, "prolog/10-scratch: exit code 3: no scratch space");
  EXPECT_TRUE(launcher_.starts().empty()) << "the job never started";
  // The server heard of the drain (before the rank's end: it must not place the job here again).
  auto health = connection_.health_requests();
  ASSERT_FALSE(health.empty());
  EXPECT_EQ(health.back().health.NodeReason(), "prolog/10-scratch: exit code 3: no scratch space");
  // The prolog got who and what.
  bool saw = false;
  for (const auto& call : runner_->calls()) {
    if (call.argv[0] != "/prolog.d/10-scratch") continue;
    saw = true;
    EXPECT_EQ(call.env.at("BERTH_JOB_ID"), "1");
    EXPECT_EQ(call.env.at("BERTH_NODE"), "n1");
    EXPECT_EQ(call.env.at("CUDA_VISIBLE_DEVICES"), "1");
  }
  EXPECT_TRUE(saw);

  // Kept across a restart of the agent.
  Stop();
  Start();
  ASSERT_TRUE(WaitFor([&] { return connection_.registers().size() >= 2; }, kHealthTimeoutMs));
  ASSERT_TRUE(connection_.registers().back().health);
  EXPECT_TRUE(connection_.registers().back().health->NodeFaulty());
  // Until an operator clears it.
  const size_t sent = connection_.health_requests().size();
  connection_.Push(proto::HealthResetMessage{});
  ASSERT_TRUE(
      WaitFor([&] { return connection_.health_requests().size() > sent; }, kHealthTimeoutMs));
  EXPECT_FALSE(connection_.health_requests().back().health.NodeFaulty());
  EXPECT_TRUE(ReadFileOr(state_.File("health.json")).empty());
}

}  // namespace
}  // namespace berth
