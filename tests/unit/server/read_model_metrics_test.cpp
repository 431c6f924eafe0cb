// The Core's metrics (docs/monitoring.md): events counted once their change is committed, and the
// gauges of the state at scrape time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core_fixture.h"

namespace berth::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class CoreMetricsTest : public CoreTest {
 protected:
  std::string Gauges() {
    metrics::ExpositionWriter out;
    core_->reads().WriteGauges(out);
    return out.Take();
  }
};

TEST_F(CoreMetricsTest, LaunchesWaitsRunTimesAndOutcomesAreCounted) {
  Register("n1", 8, 2);
  const int64_t a = Submit(Spec(1, 1));
  clock_.StepWall(5'000);  // it waited five seconds
  ASSERT_TRUE(core_->scheduling().RunPass());
  const CoreMetrics& m = core_->metrics();
  EXPECT_EQ(m.launches.Value({}), 1);
  EXPECT_EQ(m.admission_wait_seconds.Count({""}), 1U);
  EXPECT_EQ(m.pass_seconds.Count({}), 1U);
  EXPECT_GE(m.commit_seconds.Count({}), 2U);  // the submission and the placement
  Run("n1", a);
  clock_.StepWall(60'000);
  ASSERT_TRUE(Report("n1", {Entry(a, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(m.jobs_finished.Value({"SUCCEEDED"}), 1);
  EXPECT_EQ(m.job_run_seconds.Count({"SUCCEEDED"}), 1U);
  // One V100 for a minute, one CPU for a minute.
  EXPECT_NEAR(m.user_gpu_seconds.Value({"alice", "", "V100"}), 60, 1e-9);
  EXPECT_NEAR(m.user_cpu_seconds.Value({"alice", ""}), 60, 1e-9);

  metrics::ExpositionWriter out;
  m.Write(out);
  EXPECT_THAT(out.text(), HasSubstr("berth_jobs_finished_total{status=\"SUCCEEDED\"} 1\n"));
  EXPECT_THAT(out.text(), HasSubstr("berth_admission_wait_seconds_bucket{team=\"\",le=\"5\"} 1\n"));
  EXPECT_THAT(out.text(), HasSubstr("berth_admission_wait_seconds_bucket{team=\"\",le=\"1\"} 0\n"));
}

TEST_F(CoreMetricsTest, AChangeTheStoreRefusedCountsNothing) {
  Register("n1", 8, 2);
  Submit(Spec(1, 1));
  store_->FailWrites(1);
  EXPECT_FALSE(core_->scheduling().RunPass());  // the placement could not be recorded
  EXPECT_EQ(core_->metrics().launches.Value({}), 0);
  EXPECT_EQ(core_->metrics().admission_wait_seconds.Count({""}), 0U);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(core_->metrics().launches.Value({}), 1);
}

TEST_F(CoreMetricsTest, PreemptionsAreCountedByReason) {
  Register("n1", 8, 1);
  const int64_t low = Submit(Spec(1, 1, 0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", low);
  Submit(Spec(1, 1, 5));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(core_->metrics().preemptions.Value({"priority"}), 1);
  EXPECT_EQ(core_->metrics().preemptions.Value({"reclaim"}), 0);
}

// With nothing pending, berth_pending_jobs had no series at all: `sum(berth_pending_jobs)` was
// empty, not 0, and alerts on it broke. One series is always there.
TEST_F(CoreMetricsTest, PendingJobsHasASeriesWhenNothingIsPending) {
  Register("n1", 8);
  EXPECT_THAT(Gauges(), HasSubstr("berth_pending_jobs{reason=\"new\",user=\"\",team=\"\"} 0\n"));
  const int64_t a = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", a);
  EXPECT_THAT(Gauges(), HasSubstr("berth_pending_jobs{reason=\"new\",user=\"\",team=\"\"} 0\n"));
}

TEST_F(CoreMetricsTest, GaugesShowJobsGpusNodesAndWhyJobsWait) {
  Register("n1", 8, 2);
  Register("n2", 8, 2);
  ASSERT_TRUE(core_->agents().Drain("n2", true).ok());
  const int64_t a = Submit(Spec(1, 2));
  Submit(Spec(1, 2));  // no room left: waits for resources
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", a);
  Submit(Spec(1, 1), "bob");  // not yet considered by a pass
  const std::string page = Gauges();
  EXPECT_THAT(page, HasSubstr("berth_jobs{status=\"RUNNING\",pool=\"\",team=\"\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("berth_jobs{status=\"PENDING\",pool=\"\",team=\"\"} 2\n"));
  EXPECT_THAT(page,
              HasSubstr("berth_pending_jobs{reason=\"resources\",user=\"alice\",team=\"\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("berth_pending_jobs{reason=\"new\",user=\"\",team=\"\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("berth_gpus{type=\"V100\",state=\"used\"} 2\n"));
  EXPECT_THAT(page, HasSubstr("berth_gpus{type=\"V100\",state=\"free\"} 2\n"));
  EXPECT_THAT(page, HasSubstr("berth_node_gpus{node=\"n1\",type=\"V100\",state=\"used\"} 2\n"));
  EXPECT_THAT(page, HasSubstr("berth_nodes{state=\"DRAINING\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("berth_nodes{state=\"UP\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("berth_nodes{state=\"DOWN\"} 0\n"));
  EXPECT_THAT(page, Not(HasSubstr("state=\"down\"")));
}

TEST_F(CoreMetricsTest, LeaseExpiriesAreCountedAndTheirGpusAreDown) {
  Register("n1", 8, 2);
  clock_.Advance(options_.lease_ms + 1);
  core_->agents().CheckLeases();
  EXPECT_EQ(core_->metrics().lease_expiries.Value({}), 1);
  EXPECT_THAT(Gauges(), HasSubstr("berth_gpus{type=\"V100\",state=\"down\"} 2\n"));
}

TEST(ReasonClass, NamesTheKindOfWait) {
  EXPECT_EQ(ReadModel::ReasonClass("waiting for resources: needs V100:4 on 1 node"), "resources");
  EXPECT_EQ(ReadModel::ReasonClass("preempting lower-priority job 3; starts on n1 once it stops"),
            "preempting");
  EXPECT_EQ(ReadModel::ReasonClass("reclaiming team red's quota from other teams' borrowed job 4"),
            "reclaiming");
  EXPECT_EQ(
      ReadModel::ReasonClass("waiting: user alice's running jobs hold 8 GPUs and this job needs "
                             "1 more; the user's max-running-gpus is 8"),
      "user_cap");
  EXPECT_EQ(ReadModel::ReasonClass("waiting: team nlp holds 8 A100 and this job needs 2 more; its "
                                   "quota is 6 and it may borrow 2 beyond it"),
            "team_borrow_limit");
  EXPECT_EQ(ReadModel::ReasonClass("waiting: no node in pool 'prod'"), "no_node");
  EXPECT_EQ(ReadModel::ReasonClass(
                "waiting: group 3 is at its max_running (32 of its jobs placed, at most 32)"),
            "group_cap");
  EXPECT_EQ(
      ReadModel::ReasonClass("waiting for resources: needs V100:8 on 1 node; no whole V100 free "
                             "on any node; holds a reservation on n1 (expected free in 5m)"),
      "reservation");
  EXPECT_EQ(ReadModel::ReasonClass("invalid request: num_nodes must be at least 1"), "invalid");
  EXPECT_EQ(ReadModel::ReasonClass("the server could not record its placement"), "other");
}

}  // namespace
}  // namespace berth::testing
