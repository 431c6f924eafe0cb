// A Core over a real SQLite store in a temp dir (wrapped in a FaultyStore), a fake clock and a fake
// agent channel, with helpers that speak for agents and users: register a node, submit a job,
// report a rank's progress. No HTTP, no threads unless a test starts them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fakes/fake_channel.h"
#include "fakes/fake_clock.h"
#include "fakes/faulty_store.h"
#include "fakes/temp_dir.h"
#include "server/core/core.h"

namespace berth::testing {

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sqlite = OpenSqliteStore(dir_.File("berth.db"));
    ASSERT_TRUE(sqlite.ok()) << sqlite.status().message();
    store_ = std::make_unique<FaultyStore>(std::move(*sqlite));
    options_.lease_ms = 30'000;
    core_ = std::make_unique<Core>(options_, *store_, clock_, channel_);
    ASSERT_TRUE(core_->Load().ok());
  }

  // Every test ends with the job counts kept for /metrics equal to a count of the jobs, and the
  // pass index equal to a walk of them: whatever it did (transitions, failed commits and their
  // undo, restarts), none went astray.
  void TearDown() override {
    if (core_) {
      EXPECT_TRUE(core_->books().JobCountsConsistentForTesting());
      EXPECT_TRUE(core_->books().PassIndexConsistentForTesting());
      EXPECT_TRUE(core_->scheduling().MirrorMatchesIndexForTesting());
      EXPECT_TRUE(core_->books().GroupTalliesConsistentForTesting());
    }
  }

  // A server restart: a new core loads the same store (agents must register again).
  void Restart() {
    core_ = std::make_unique<Core>(options_, *store_, clock_, channel_);
    ASSERT_TRUE(core_->Load().ok());
    sessions_.clear();
  }

  // The registration of a node with `cpus` CPUs and `gpus` V100s that runs `running`.
  static proto::RegisterRequest Registration(const std::string& name, int cpus = 8, int gpus = 0,
                                             std::vector<proto::AttemptRank> running = {}) {
    proto::RegisterRequest r;
    r.name = name;
    r.node_id = "node-id-of-" + name;
    r.address = "10.0.0." + std::to_string(name.size());
    r.cpus_milli = cpus * 1000;
    r.memory_mib = 64 * 1024;
    for (int i = 0; i < gpus; ++i) r.gpus.push_back({i, "V100"});
    r.running = std::move(running);
    return r;
  }

  // Registers that node (Registration); its session.
  std::string Register(const std::string& name, int cpus = 8, int gpus = 0,
                       std::vector<proto::AttemptRank> running = {}) {
    auto answer =
        core_->agents().Register(Registration(name, cpus, gpus, std::move(running)), "127.0.0.1");
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    sessions_[name] = answer.ok() ? answer->session : "";
    return sessions_[name];
  }

  JobSpec Spec(int cpus = 1, int gpus = 0, int priority = 0, int num_nodes = 1) {
    JobSpec spec;
    spec.name = "job";
    spec.run = "true";
    spec.resources.cpus = cpus * 1000;
    if (gpus > 0) {
      spec.resources.gpu_type = "V100";
      spec.resources.gpu_milli = gpus * 1000;
    }
    spec.priority = priority;
    spec.num_nodes = num_nodes;
    return spec;
  }

  int64_t Submit(JobSpec spec, const std::string& user = "alice") {
    SubmitRequest r;
    r.spec = std::move(spec);
    r.user = user;
    auto answer = core_->admission().Submit(std::move(r));
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    return answer.ok() ? answer->ids.front() : 0;
  }

  proto::ReportEntry Entry(int64_t job, int attempt, int rank, proto::ReportEvent event,
                           std::optional<int> exit_code = std::nullopt,
                           const std::string& phase = "run") {
    proto::Report r;
    r.job = job;
    r.attempt = attempt;
    r.rank = rank;
    r.event = event;
    r.exit_code = exit_code;
    r.phase = phase;
    return proto::ReportEntry{r.id(), r};
  }

  Result<std::vector<proto::ReportResult>> Report(const std::string& node,
                                                  std::vector<proto::ReportEntry> entries) {
    proto::ReportBatch batch;
    batch.node = node;
    batch.session = sessions_[node];
    batch.entries = std::move(entries);
    return core_->agents().Report(batch);
  }

  // Reports rank 0 of `job`'s attempt `attempt` on `node` accepted and running.
  void Run(const std::string& node, int64_t job, int attempt = 1, int rank = 0) {
    auto r = Report(node, {Entry(job, attempt, rank, proto::ReportEvent::kAccepted),
                           Entry(job, attempt, rank, proto::ReportEvent::kRunning)});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }

  JobRow Stored(int64_t job) {
    auto rows = store_->inner().GetJobs({job});
    EXPECT_TRUE(rows.ok() && rows->size() == 1);
    return rows.ok() && !rows->empty() ? rows->front() : JobRow{};
  }

  // What a server starting now on the same store would hold.
  std::string FreshDurableState() {
    FakeChannel channel;
    Core fresh(options_, store_->inner(), clock_, channel);
    EXPECT_TRUE(fresh.Load().ok());
    return fresh.reads().DurableState();
  }

  TempDir dir_;
  FakeClock clock_;
  FakeChannel channel_;
  CoreOptions options_;
  std::unique_ptr<FaultyStore> store_;
  std::unique_ptr<Core> core_;
  std::map<std::string, std::string> sessions_;
};

}  // namespace berth::testing
