// A node may touch only what is placed on it (issue "Bounded and least-privilege"; Kubernetes'
// NodeRestriction): log appends, spec reads and reports about another node's job are refused
// (Forbidden), whatever session the sender holds, and change nothing.
#include "core_fixture.h"

namespace berth::testing {
namespace {

class NodeRestrictionTest : public CoreTest {
 protected:
  // Nodes n1 and n2 with 8 CPUs each; job `on_n1` takes all of n1 and runs there.
  void SetUp() override {
    CoreTest::SetUp();
    Register("n1", 8);
    Register("n2", 4);
    on_n1 = Submit(Spec(/*cpus=*/8));
    ASSERT_TRUE(core_->RunPass());
    ASSERT_EQ(Stored(on_n1).placement.front().node, "n1");
    Run("n1", on_n1);
  }
  int64_t on_n1 = 0;
};

// Any agent could write into any user's job log, and with unbounded job/attempt/rank create files
// until the disk was full.
TEST_F(NodeRestrictionTest, ALogAppendForAnotherNodesJobIsForbidden) {
  auto own = core_->LogPrefix("n1", sessions_["n1"], on_n1, 1, 0);
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(*own, "");
  auto other = core_->LogPrefix("n2", sessions_["n2"], on_n1, 1, 0);
  EXPECT_EQ(other.status().code(), Code::kForbidden);
  EXPECT_NE(other.status().message().find("node n2 holds no rank 0 of job"), std::string::npos);
  // Attempts and ranks that were never placed anywhere, and jobs that do not exist.
  EXPECT_EQ(core_->LogPrefix("n1", sessions_["n1"], on_n1, 2, 0).status().code(), Code::kForbidden);
  EXPECT_EQ(core_->LogPrefix("n1", sessions_["n1"], on_n1, 1, 7).status().code(), Code::kForbidden);
  EXPECT_EQ(core_->LogPrefix("n1", sessions_["n1"], 999'999, 1, 0).status().code(),
            Code::kForbidden);
  // A wrong session is what it was: register again.
  EXPECT_EQ(core_->LogPrefix("n1", "nope", on_n1, 1, 0).status().code(), Code::kConflict);

  // Ended and reaped: the last output may still come, from its node only (read from the store).
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  ASSERT_FALSE(core_->ActiveJobRow(on_n1));
  EXPECT_TRUE(core_->LogPrefix("n1", sessions_["n1"], on_n1, 1, 0).ok());
  EXPECT_EQ(core_->LogPrefix("n2", sessions_["n2"], on_n1, 1, 0).status().code(), Code::kForbidden);
}

// GET /v1/specs/N answered any node for any spec, with its environment's secrets.
TEST_F(NodeRestrictionTest, ASpecIsReadOnlyByANodeThatRunsOneOfItsJobs) {
  const int64_t spec = Stored(on_n1).spec_id;
  EXPECT_TRUE(core_->MayReadSpec("n1", sessions_["n1"], on_n1, spec).ok());
  EXPECT_EQ(core_->MayReadSpec("n2", sessions_["n2"], on_n1, spec).code(), Code::kForbidden);
  EXPECT_EQ(core_->MayReadSpec("n1", sessions_["n1"], on_n1, spec + 1).code(), Code::kForbidden);
  EXPECT_EQ(core_->MayReadSpec("n1", "nope", on_n1, spec).code(), Code::kConflict);
  const int64_t pending = Submit(Spec(/*cpus=*/8));  // placed nowhere yet
  EXPECT_EQ(core_->MayReadSpec("n1", sessions_["n1"], pending, Stored(pending).spec_id).code(),
            Code::kForbidden);
}

// A report about a rank of a live attempt placed on another node is forged: the whole batch is
// refused and nothing changes (n2 could end n1's job).
TEST_F(NodeRestrictionTest, AReportAboutAnotherNodesJobIsForbiddenAndChangesNothing) {
  const std::string before = core_->DebugState();
  auto forged = Report("n2", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 1)});
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ(forged.status().code(), Code::kForbidden);
  EXPECT_EQ(core_->DebugState(), before);
  EXPECT_EQ(Stored(on_n1).status, JobStatus::kRunning);
}

// A dying attempt's ranks free its resources when its own node reports them gone; another node's
// report of it changed the state (it freed n1's CPUs while the process still ran).
TEST_F(NodeRestrictionTest, ADyingRankIsReportedGoneOnlyByItsNode) {
  ASSERT_TRUE(core_->Requeue(on_n1, "alice", false).ok());
  auto forged = Report("n2", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 143)});
  EXPECT_EQ(forged.status().code(), Code::kForbidden);
  auto nodes = core_->Nodes();
  ASSERT_EQ(nodes.front().row.name, "n1");
  EXPECT_EQ(nodes.front().cpus_used, 8000);  // still held by the dying attempt
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(core_->Nodes().front().cpus_used, 0);
}

}  // namespace
}  // namespace berth::testing
