// MIG re-slicing, the server's side (server/core/mig_changes.h): pending jobs for a profile no free
// slice offers make exactly one change of an idle GPU on a node that allows it — committed as an
// audit row, its slices fenced, its agent told — and the node's next registration ends it, done or
// failed; a busy GPU is never changed, and a failed one waits out the hold time.
#include "server/core/mig_changes.h"

#include "core_fixture.h"

namespace berth::testing {
namespace {

class MigChangesTest : public CoreTest {
 protected:
  // m1: A100 GPU 0 in MIG mode as two 3g.40gb slices, GPU 1 as one 7g.80gb; it allows changes.
  proto::RegisterRequest Node(std::vector<GpuDevice> gpus = {}) {
    proto::RegisterRequest r = Registration("m1", 16);
    r.gpus = gpus.empty() ? std::vector<GpuDevice>{{100, "A100-3g.40gb", 0},
                                                   {101, "A100-3g.40gb", 0},
                                                   {200, "A100-7g.80gb", 1}}
                          : std::move(gpus);
    r.mig_reconfigure = true;
    return r;
  }
  void RegisterNode(const proto::RegisterRequest& r) {
    auto answer = core_->agents().Register(r, "127.0.0.1");
    ASSERT_TRUE(answer.ok()) << answer.status().message();
    sessions_[r.name] = answer->session;
  }
  JobSpec SliceSpec(const std::string& type) {
    JobSpec spec = Spec(1);
    spec.resources.gpu_type = type;
    spec.resources.gpu_milli = 1000;
    return spec;
  }
  std::vector<proto::MigLayoutMessage> Layouts() {
    std::vector<proto::MigLayoutMessage> out;
    for (const auto& s : channel_.sent()) {
      if (const auto* m = std::get_if<proto::MigLayoutMessage>(&s.message)) out.push_back(*m);
    }
    return out;
  }
  std::vector<std::string> Audit() {
    std::vector<std::string> out;
    auto rows = store_->inner().ListAudit(100);
    EXPECT_TRUE(rows.ok());
    for (const AuditRow& r : rows.ok() ? *rows : std::vector<AuditRow>{}) {
      if (r.action.starts_with("mig")) out.push_back(r.action + " " + r.target + ": " + r.detail);
    }
    return out;
  }
};

TEST_F(MigChangesTest, PendingJobsForAMissingProfileReSliceExactlyOneIdleGpu) {
  RegisterNode(Node());
  // A profile no node offers now is accepted: m1 could offer it once re-sliced.
  std::vector<int64_t> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(Submit(SliceSpec("A100-1g.10gb")));
  // Something runs on GPU 1's slice: only GPU 0 may change.
  const int64_t busy = Submit(SliceSpec("A100-7g.80gb"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("m1", busy);
  ASSERT_EQ(Layouts().size(), 1u);
  EXPECT_EQ(Layouts()[0].gpu, 0);
  // The three it needs, the 3g.40gb that still fits, and the room left as a fourth 1g.10gb.
  EXPECT_EQ(Layouts()[0].profiles,
            (std::vector<std::string>{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "3g.40gb"}));
  EXPECT_EQ(Audit(), (std::vector<std::string>{
                         "mig layout m1: GPU 0: 3g.40gb,3g.40gb -> "
                         "1g.10gb,1g.10gb,1g.10gb,1g.10gb,3g.40gb for 3 pending A100-1g.10gb "
                         "slices"}));
  // Passes meanwhile change nothing more, and give the changing GPU's slices to nobody.
  const int64_t on_old = Submit(SliceSpec("A100-3g.40gb"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Layouts().size(), 1u);
  EXPECT_EQ(Stored(on_old).status, JobStatus::kPending);
  for (int64_t j : jobs) EXPECT_EQ(Stored(j).status, JobStatus::kPending);

  // The agent applied it and registers again with the new slices: the jobs start on them.
  RegisterNode(Node({{100, "A100-1g.10gb", 0},
                     {101, "A100-1g.10gb", 0},
                     {102, "A100-1g.10gb", 0},
                     {103, "A100-1g.10gb", 0},
                     {104, "A100-3g.40gb", 0},
                     {200, "A100-7g.80gb", 1}}));
  EXPECT_EQ(Audit().back(), "mig layout done m1: GPU 0: 1g.10gb,1g.10gb,1g.10gb,1g.10gb,3g.40gb");
  ASSERT_TRUE(core_->scheduling().RunPass());
  for (int64_t j : jobs) EXPECT_EQ(Stored(j).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(on_old).status, JobStatus::kStarting);
  EXPECT_EQ(Layouts().size(), 1u);
}

TEST_F(MigChangesTest, AFailedChangeLeavesTheGpuAsItWasAndWaitsOutTheHoldTime) {
  RegisterNode(Node());
  const int64_t job = Submit(SliceSpec("A100-2g.20gb"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_EQ(Layouts().size(), 1u);
  // The agent could not apply it: it registers again with its old slices and the error.
  proto::RegisterRequest failed = Node();
  failed.mig_error = "GPU 0: `nvidia-smi mig -i 0 -gi 1 -dgi` failed: exit code 6: In use";
  RegisterNode(failed);
  EXPECT_EQ(Audit().back(),
            "mig layout failed m1: GPU 0: 2g.20gb,1g.10gb,1g.10gb,3g.40gb not applied: GPU 0: "
            "`nvidia-smi mig -i 0 -gi 1 -dgi` failed: exit code 6: In use");
  bool shown = false;
  for (const NodeStatus& n : core_->reads().Nodes()) {
    shown = shown || (n.row.name == "m1" && n.mig_error == failed.mig_error);
  }
  EXPECT_TRUE(shown);
  // GPU 0 is not tried again within the hold time; GPU 1, idle and never changed, serves it.
  core_->scheduling().RequestPass();
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_EQ(Layouts().size(), 2u);
  EXPECT_EQ(Layouts()[1].gpu, 1);
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);
}

TEST_F(MigChangesTest, ANodeThatDoesNotAllowItIsNeverChangedAndTheProfileIsRefused) {
  proto::RegisterRequest r = Node();
  r.mig_reconfigure = false;
  RegisterNode(r);
  SubmitRequest s;
  s.spec = SliceSpec("A100-1g.10gb");
  s.user = "alice";
  auto refused = core_->admission().Submit(std::move(s));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("unknown GPU type 'A100-1g.10gb'"), std::string::npos);
  const int64_t job = Submit(SliceSpec("A100-3g.40gb"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
  EXPECT_TRUE(Layouts().empty());
}

TEST_F(MigChangesTest, AChangeTheAgentNeverReportsTimesOut) {
  RegisterNode(Node());
  Submit(SliceSpec("A100-1g.10gb"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_EQ(Layouts().size(), 1u);
  clock_.Advance(options_.mig_change_timeout_ms);
  core_->scheduling().RequestPass();
  ASSERT_TRUE(core_->scheduling().RunPass());
  const std::vector<std::string> audit = Audit();
  ASSERT_GE(audit.size(), 2u);
  EXPECT_NE(audit[1].find("mig layout failed m1: GPU 0: its agent did not report"),
            std::string::npos)
      << audit[1];
}

TEST(MigProfiles, ASliceTypesProfileIsNvidiaSmis) {
  EXPECT_EQ(MigProfileOf("A100-1g.10gb", "A100"), "1g.10gb");
  EXPECT_EQ(MigProfileOf("H100-1g.10gb-me", "H100"), "1g.10gb+me");
  const auto layouts =
      MigLayouts({{0, "A100"}, {200, "A100-3g.40gb", 1}, {201, "A100-4g.40gb", 1}});
  ASSERT_EQ(layouts.size(), 1u);
  EXPECT_EQ(layouts.at(1).first, "A100");
  EXPECT_EQ(layouts.at(1).second, (std::vector<std::string>{"3g.40gb", "4g.40gb"}));
}

}  // namespace
}  // namespace berth::testing
