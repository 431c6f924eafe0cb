// The server's side of node health (docs/operators.md "Node health"): a GPU fault ends only the
// attempts on that GPU (requeued, or failed where recovery.on_node_fault says so) and fences the
// GPU; a node fault keeps the node from new jobs; a failing prolog requeues; `undrain --force`
// clears a health drain and tells the agent; an operator's drain is not the probes' to clear.
#include "core_fixture.h"

namespace berth::testing {
namespace {

class CoreHealthTest : public CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    Register("n1", 8, /*gpus=*/4);
  }

  Result<proto::HealthAnswer> Health(const std::string& node,
                                     std::vector<proto::HealthFault> faults) {
    proto::HealthRequest r;
    r.node = node;
    r.session = sessions_[node];
    r.health.faults = std::move(faults);
    r.health.probes.push_back({.name = "xid", .ok = faults.empty()});
    return core_->agents().ReportHealth(r);
  }

  static proto::HealthFault Fault(int gpu, const std::string& reason, bool sticky = false) {
    return proto::HealthFault{"xid", gpu, reason, FakeClock::kStartWall, sticky};
  }

  // The GPU device of `job`'s attempt on its node.
  int GpuOf(int64_t job) { return Stored(job).placement.at(0).gpus.at(0).index; }

  NodeStatus Node(const std::string& name) {
    for (auto& n : core_->reads().Nodes()) {
      if (n.row.name == name) return n;
    }
    return {};
  }
};

TEST_F(CoreHealthTest, AGpuFaultRequeuesOnlyTheJobOnThatGpuAndFencesIt) {
  std::vector<int64_t> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(Submit(Spec(1, /*gpus=*/1)));
  ASSERT_TRUE(core_->scheduling().RunPass());
  std::map<int, int64_t> on;
  for (int64_t j : jobs) {
    Run("n1", j);
    on[GpuOf(j)] = j;
  }
  ASSERT_EQ(on.size(), 3u);
  ASSERT_TRUE(on.count(2));

  ASSERT_TRUE(Health("n1", {Fault(2, "xid 79 on GPU 2 (fell off the bus)")}).ok());
  JobRow victim = Stored(on[2]);
  EXPECT_EQ(victim.status, JobStatus::kPending);
  EXPECT_EQ(victim.reason, "health: xid 79 on GPU 2 (fell off the bus) on node n1; requeued");
  EXPECT_EQ(victim.requeues, 1);
  EXPECT_EQ(victim.restarts, 0) << "not the job's failure";
  for (int gpu : {0, 1}) EXPECT_EQ(Stored(on[gpu]).status, JobStatus::kRunning);

  // The old attempt holds GPU 2 until its rank is gone; then nobody gets GPU 2.
  auto r = Report("n1", {Entry(on[2], 1, 0, proto::ReportEvent::kExited, 143)});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(on[2]).status, JobStatus::kStarting);
  EXPECT_EQ(GpuOf(on[2]), 3) << "placed again, on the one healthy free GPU";
  int64_t waits = Submit(Spec(1, 1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(waits).status, JobStatus::kPending) << "GPU 2 is fenced";
  EXPECT_EQ(Node("n1").health.faults.size(), 1u);
  EXPECT_EQ(Node("n1").row.draining, false);

  // Fault gone: GPU 2 is given out again.
  ASSERT_TRUE(Health("n1", {}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(waits).status, JobStatus::kStarting);
  EXPECT_EQ(GpuOf(waits), 2);
}

TEST_F(CoreHealthTest, AFaultOnAGpuInMigModeEndsTheJobsOnItsSlicesAndFencesThem) {
  // m1: GPU 0 whole, GPU 1 in MIG mode as two A100-3g.40gb slices (agent/mig.h).
  proto::RegisterRequest r = Registration("m1", 8);
  r.gpus = {{0, "A100"}, {200, "A100-3g.40gb", 1}, {201, "A100-3g.40gb", 1}};
  auto answer = core_->agents().Register(r, "127.0.0.1");
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  sessions_["m1"] = answer->session;
  JobSpec slice = Spec(1);
  slice.resources.gpu_type = "A100-3g.40gb";
  slice.resources.gpu_milli = 1000;
  JobSpec whole = Spec(1);
  whole.resources.gpu_type = "A100";
  whole.resources.gpu_milli = 1000;
  const int64_t on_slice = Submit(slice), on_whole = Submit(whole);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("m1", on_slice);
  Run("m1", on_whole);
  EXPECT_GE(GpuOf(on_slice), 200);

  // The probes name GPU 1, not the slice: the job on the slice ends, the one on GPU 0 runs on.
  ASSERT_TRUE(Health("m1", {Fault(1, "xid 79 on GPU 1 (fell off the bus)")}).ok());
  EXPECT_EQ(Stored(on_slice).status, JobStatus::kPending);
  EXPECT_EQ(Stored(on_slice).reason,
            "health: xid 79 on GPU 1 (fell off the bus) on node m1; requeued");
  EXPECT_EQ(Stored(on_whole).status, JobStatus::kRunning);
  ASSERT_TRUE(Report("m1", {Entry(on_slice, 1, 0, proto::ReportEvent::kExited, 143)}).ok());
  // Neither slice of the faulty GPU is given out.
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(on_slice).status, JobStatus::kPending);
  ASSERT_TRUE(Health("m1", {}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(on_slice).status, JobStatus::kStarting);
}

TEST_F(CoreHealthTest, RecoveryOnNodeFaultFailMakesTheJobFail) {
  JobSpec spec = Spec(1, 1);
  spec.on_node_fault = RecoveryAction::kFail;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  ASSERT_TRUE(Health("n1", {Fault(GpuOf(job), "ecc: 2 uncorrected ECC errors on GPU 0")}).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kFailed);
  EXPECT_EQ(Stored(job).reason, "health: ecc: 2 uncorrected ECC errors on GPU 0 on node n1");
}

TEST_F(CoreHealthTest, ANodeFaultKeepsNewJobsAwayButLetsRunningOnesFinish) {
  int64_t running = Submit(Spec(1, 1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", running);
  ASSERT_TRUE(Health("n1", {Fault(-1, "health.d/nhc: /scratch full")}).ok());
  int64_t waits = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(waits).status, JobStatus::kPending);
  EXPECT_EQ(Stored(running).status, JobStatus::kRunning);
  EXPECT_EQ(Node("n1").health.NodeReason(), "health.d/nhc: /scratch full");
  ASSERT_TRUE(Health("n1", {}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(waits).status, JobStatus::kStarting);
}

TEST_F(CoreHealthTest, ANodeRegisteringUnhealthyTakesNoJobs) {
  proto::RegisterRequest r;
  r.name = "n2";
  r.node_id = "node-id-of-n2";
  r.cpus_milli = 64'000;
  r.memory_mib = 1024;
  r.health = proto::NodeHealth{{Fault(-1, "disk: /state has 3 MiB free (below 512 MiB)")}, {}};
  ASSERT_TRUE(core_->agents().Register(r, "127.0.0.1").ok());
  int64_t big = Submit(Spec(16));  // fits only n2
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(big).status, JobStatus::kPending);
}

TEST_F(CoreHealthTest, AFailingPrologRequeuesTheJob) {
  int64_t job = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  proto::ReportEntry failed = Entry(job, 1, 0, proto::ReportEvent::kExited, 1, "prolog");
  failed.report->reason = "prolog/10-scratch: exit code 3: no scratch space";
  auto r = Report("n1", {Entry(job, 1, 0, proto::ReportEvent::kAccepted), failed});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[1].action, proto::ReportAction::kOk);
  JobRow row = Stored(job);
  EXPECT_EQ(row.status, JobStatus::kPending);
  EXPECT_EQ(row.reason,
            "prolog failed on node n1: prolog/10-scratch: exit code 3: no scratch space; requeued");
  EXPECT_EQ(row.restarts, 0);
}

TEST_F(CoreHealthTest, UndrainForceClearsAHealthDrainAndTellsTheAgent) {
  ASSERT_TRUE(Health("n1", {Fault(-1, "prolog/10-scratch: exit code 3", /*sticky=*/true)}).ok());
  // A plain undrain leaves the health drain.
  ASSERT_TRUE(core_->agents().Drain("n1", false, "ops").ok());
  EXPECT_TRUE(Node("n1").health.NodeFaulty());
  const size_t before = channel_.sent().size();
  auto node = core_->agents().Drain("n1", false, "ops", /*force=*/true);
  ASSERT_TRUE(node.ok());
  EXPECT_FALSE(node->health.NodeFaulty());
  auto sent = channel_.sent();
  ASSERT_EQ(sent.size(), before + 1);
  EXPECT_TRUE(std::holds_alternative<proto::HealthResetMessage>(sent.back().message));
  int64_t job = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
}

TEST_F(CoreHealthTest, AnOperatorsDrainOutlivesCleanHealth) {
  ASSERT_TRUE(core_->agents().Drain("n1", true, "ops").ok());
  ASSERT_TRUE(Health("n1", {}).ok());
  ASSERT_TRUE(Health("n1", {}).ok());
  int64_t job = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);
  EXPECT_TRUE(Node("n1").row.draining);
}

TEST_F(CoreHealthTest, AnUnknownSessionIsAConflict) {
  proto::HealthRequest r;
  r.node = "n1";
  r.session = "stale";
  EXPECT_EQ(core_->agents().ReportHealth(r).status().code(), Code::kConflict);
}

}  // namespace
}  // namespace berth::testing
