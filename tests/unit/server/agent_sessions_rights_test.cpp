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
    ASSERT_TRUE(core_->scheduling().RunPass());
    ASSERT_EQ(Stored(on_n1).placement.front().node, "n1");
    Run("n1", on_n1);
  }
  int64_t on_n1 = 0;
};

// Any agent could write into any user's job log, and with unbounded job/attempt/rank create files
// until the disk was full.
TEST_F(NodeRestrictionTest, ALogAppendForAnotherNodesJobIsForbidden) {
  auto own = core_->agents().LogPrefix("n1", sessions_["n1"], on_n1, 1, 0);
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(*own, "");
  auto other = core_->agents().LogPrefix("n2", sessions_["n2"], on_n1, 1, 0);
  EXPECT_EQ(other.status().code(), Code::kForbidden);
  EXPECT_NE(other.status().message().find("node n2 holds no rank 0 of job"), std::string::npos);
  // Attempts and ranks that were never placed anywhere, and jobs that do not exist.
  EXPECT_EQ(core_->agents().LogPrefix("n1", sessions_["n1"], on_n1, 2, 0).status().code(),
            Code::kForbidden);
  EXPECT_EQ(core_->agents().LogPrefix("n1", sessions_["n1"], on_n1, 1, 7).status().code(),
            Code::kForbidden);
  EXPECT_EQ(core_->agents().LogPrefix("n1", sessions_["n1"], 999'999, 1, 0).status().code(),
            Code::kForbidden);
  // A wrong session is what it was: register again.
  EXPECT_EQ(core_->agents().LogPrefix("n1", "nope", on_n1, 1, 0).status().code(), Code::kConflict);

  // Ended and reaped: the last output may still come, from its node only (read from the store).
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  ASSERT_FALSE(core_->reads().ActiveJobRow(on_n1));
  EXPECT_TRUE(core_->agents().LogPrefix("n1", sessions_["n1"], on_n1, 1, 0).ok());
  EXPECT_EQ(core_->agents().LogPrefix("n2", sessions_["n2"], on_n1, 1, 0).status().code(),
            Code::kForbidden);
}

// GET /v1/specs/N answered any node for any spec, with its environment's secrets.
TEST_F(NodeRestrictionTest, ASpecIsReadOnlyByANodeThatRunsOneOfItsJobs) {
  const int64_t spec = Stored(on_n1).spec_id;
  EXPECT_TRUE(core_->agents().MayReadSpec("n1", sessions_["n1"], on_n1, spec).ok());
  EXPECT_EQ(core_->agents().MayReadSpec("n2", sessions_["n2"], on_n1, spec).code(),
            Code::kForbidden);
  EXPECT_EQ(core_->agents().MayReadSpec("n1", sessions_["n1"], on_n1, spec + 1).code(),
            Code::kForbidden);
  EXPECT_EQ(core_->agents().MayReadSpec("n1", "nope", on_n1, spec).code(), Code::kConflict);
  const int64_t pending = Submit(Spec(/*cpus=*/8));  // placed nowhere yet
  EXPECT_EQ(
      core_->agents().MayReadSpec("n1", sessions_["n1"], pending, Stored(pending).spec_id).code(),
      Code::kForbidden);
}

// A report about a rank of a live attempt placed on another node is forged: the whole batch is
// refused and nothing changes (n2 could end n1's job).
TEST_F(NodeRestrictionTest, AReportAboutAnotherNodesJobIsForbiddenAndChangesNothing) {
  const std::string before = core_->reads().DebugState();
  auto forged = Report("n2", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 1)});
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ(forged.status().code(), Code::kForbidden);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(Stored(on_n1).status, JobStatus::kRunning);
}

// A dying attempt's ranks free its resources when its own node reports them gone; another node's
// report of it changed the state (it freed n1's CPUs while the process still ran).
TEST_F(NodeRestrictionTest, ADyingRankIsReportedGoneOnlyByItsNode) {
  ASSERT_TRUE(core_->admission().Requeue(on_n1, "alice", false).ok());
  auto forged = Report("n2", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 143)});
  EXPECT_EQ(forged.status().code(), Code::kForbidden);
  auto nodes = core_->reads().Nodes();
  ASSERT_EQ(nodes.front().row.name, "n1");
  EXPECT_EQ(nodes.front().cpus_used, 8000);  // still held by the dying attempt
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(core_->reads().Nodes().front().cpus_used, 0);
}

// The CPUs of `node` in use, as the core counts them.
MilliCpu CpusUsed(Core& core, const std::string& node) {
  for (const auto& n : core.reads().Nodes()) {
    if (n.row.name == node) return n.cpus_used;
  }
  return -1;
}

// A registration's `running` list may name old attempts of any job. n2 re-registered naming attempt
// 1 of a job that had run on n1: the core held that attempt's whole placement again, n1's CPUs
// included, until n1 re-registered (which it need not do for days). Now a registration claims only
// ranks placed on its own node; the rest are ignored.
TEST_F(NodeRestrictionTest, ARegistrationCannotHoldAnotherNodesResources) {
  ASSERT_TRUE(core_->admission().Requeue(on_n1, "alice", false).ok());
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 143)}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_EQ(Stored(on_n1).attempt, 2);
  Run("n1", on_n1, 2);
  const MilliCpu n1_before = CpusUsed(*core_, "n1");
  ASSERT_EQ(n1_before, 8000);
  Register("n2", 4, 0, {{on_n1, 1, 0}});  // forged: attempt 1 ran on n1
  EXPECT_EQ(CpusUsed(*core_, "n1"), n1_before);
  EXPECT_EQ(CpusUsed(*core_, "n2"), 0);
  // n1 ends the job; its CPUs are free for bob, whatever n2 claimed.
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 2, 0, proto::ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(CpusUsed(*core_, "n1"), 0);
  const int64_t bobs = Submit(Spec(/*cpus=*/8), "bob");
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(bobs).status, JobStatus::kStarting);
}

// A two-node gang was cancelled while its ranks still stopped, and the server restarted. Each
// node's registration holds only its own rank's grant (n2 also names rank 0, which is n1's: that
// part is ignored); n1's rank is held once n1 registers still running it, and the gang's resources
// are free once both ranks are gone.
TEST_F(NodeRestrictionTest, AnEndedGangIsHeldRankByRankByTheNodesThatRunIt) {
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  const int64_t gang = Submit(Spec(/*cpus=*/4, 0, 0, /*num_nodes=*/2));
  ASSERT_TRUE(core_->scheduling().RunPass());
  const JobRow placed = Stored(gang);
  ASSERT_EQ(placed.placement.size(), 2u);
  std::map<std::string, int> rank_on;
  for (const auto& g : placed.placement) rank_on[g.node] = g.rank;
  Run("n1", gang, 1, rank_on["n1"]);
  Run("n2", gang, 1, rank_on["n2"]);
  CancelRequest cancel{.ids = {gang}, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  Restart();

  Register("n2", 4, 0, {{gang, 1, rank_on["n2"]}, {gang, 1, rank_on["n1"]}});
  EXPECT_EQ(CpusUsed(*core_, "n2"), 4000);
  EXPECT_EQ(CpusUsed(*core_, "n1"), 0) << "n2 may not hold n1's rank";
  Register("n1", 8, 0, {{gang, 1, rank_on["n1"]}});
  EXPECT_EQ(CpusUsed(*core_, "n1"), 4000) << "n1 holds its own rank";
  ASSERT_TRUE(Report("n2", {Entry(gang, 1, rank_on["n2"], proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(CpusUsed(*core_, "n2"), 4000) << "held until every claimed rank is gone";
  ASSERT_TRUE(Report("n1", {Entry(gang, 1, rank_on["n1"], proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(CpusUsed(*core_, "n1"), 0);
  EXPECT_EQ(CpusUsed(*core_, "n2"), 0);
  EXPECT_EQ(Stored(gang).status, JobStatus::kCancelled);
}

// The same for an earlier attempt of a job that runs again: after a restart each node holds the
// rank of attempt 1 that it still runs, beside attempt 2's.
TEST_F(NodeRestrictionTest, ADyingGangIsHeldRankByRankByTheNodesThatRunIt) {
  ASSERT_TRUE(Report("n1", {Entry(on_n1, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  const int64_t gang = Submit(Spec(/*cpus=*/2, 0, 0, /*num_nodes=*/2));
  ASSERT_TRUE(core_->scheduling().RunPass());
  std::map<std::string, int> rank_on;
  for (const auto& g : Stored(gang).placement) rank_on[g.node] = g.rank;
  ASSERT_TRUE(core_->admission().Requeue(gang, "alice", false).ok());
  for (const std::string node : {"n1", "n2"}) {
    ASSERT_TRUE(
        Report(node, {Entry(gang, 1, rank_on[node], proto::ReportEvent::kExited, 143)}).ok());
  }
  ASSERT_TRUE(core_->scheduling().RunPass());
  ASSERT_EQ(Stored(gang).attempt, 2);
  rank_on.clear();
  for (const auto& g : Stored(gang).placement) rank_on[g.node] = g.rank;
  ASSERT_EQ(rank_on.size(), 2u);
  Restart();

  Register("n2", 4, 0, {{gang, 1, rank_on["n2"]}, {gang, 1, rank_on["n1"]}});
  EXPECT_EQ(CpusUsed(*core_, "n2"), 4000) << "attempt 2's rank and attempt 1's";
  EXPECT_EQ(CpusUsed(*core_, "n1"), 2000) << "attempt 2's only: n2 may not hold n1's rank";
  Register("n1", 8, 0, {{gang, 1, rank_on["n1"]}});
  EXPECT_EQ(CpusUsed(*core_, "n1"), 4000) << "n1 holds its own rank of attempt 1";
  ASSERT_TRUE(Report("n1", {Entry(gang, 1, rank_on["n1"], proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(CpusUsed(*core_, "n1"), 4000) << "held until every claimed rank is gone";
  ASSERT_TRUE(Report("n2", {Entry(gang, 1, rank_on["n2"], proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(CpusUsed(*core_, "n1"), 2000);
  EXPECT_EQ(CpusUsed(*core_, "n2"), 2000);
}

}  // namespace
}  // namespace berth::testing
