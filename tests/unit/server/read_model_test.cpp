// ReadModel (server/core/read_model.h): where a terminal or a port-forward reaches a job, and the
// "memory, else store" reads of a job's row and a group's counts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "common/json_util.h"
#include "core_fixture.h"
#include "spec/job_spec.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

// Where a user attaches (server/http/terminal_bridges.h): only to a running interactive job, each
// rank on its own node; the refusals say why. A port-forward reaches any running job.
TEST_F(CoreTest, TerminalOfARunningInteractiveJobNamesItsRanksNode) {
  Register("n1");
  Register("n2");
  EXPECT_EQ(core_->reads().TerminalOf(99, 0).status().code(), Code::kNotFound);
  JobSpec batch = Spec();
  int64_t plain = Submit(batch);
  JobSpec spec = Spec(1, 0, 0, 2);
  spec.interactive = true;
  int64_t job = Submit(spec);
  auto waiting = core_->reads().TerminalOf(job, 0);
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), Code::kConflict);
  EXPECT_NE(waiting.status().message().find("PENDING, not RUNNING yet"), std::string::npos)
      << waiting.status().message();
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run(Stored(plain).placement.at(0).node, plain);
  auto refused = core_->reads().TerminalOf(plain, 0);
  EXPECT_EQ(refused.status().code(), Code::kConflict);
  EXPECT_NE(refused.status().message().find("not interactive"), std::string::npos);
  // A port of any running job may be forwarded, interactive or not.
  auto port = core_->reads().PortOf(plain, 0);
  ASSERT_TRUE(port.ok()) << port.status().message();
  EXPECT_EQ(port->node, Stored(plain).placement.at(0).node);
  EXPECT_EQ(core_->reads().PortOf(plain, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(core_->reads().PortOf(99, 0).status().code(), Code::kNotFound);
  const Placement placed = Stored(job).placement;
  ASSERT_EQ(placed.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) Run(placed[rank].node, job, 1, rank);
  for (int rank = 0; rank < 2; ++rank) {
    auto target = core_->reads().TerminalOf(job, rank);
    ASSERT_TRUE(target.ok()) << target.status().message();
    EXPECT_EQ(target->node, placed[rank].node);
    EXPECT_EQ(target->row.user, "alice");
    EXPECT_EQ(target->row.attempt, 1);
  }
  EXPECT_EQ(core_->reads().TerminalOf(job, 2).status().code(), Code::kInvalidArgument);
}

// A job's row and a group's counts come from memory while the job or group is active there, and
// from the store once they are over: the same answer either way, NotFound for what never was.
TEST_F(CoreTest, RowsAndGroupCountsComeFromMemoryElseTheStore) {
  Register("n1");
  SubmitRequest r;
  r.spec = Spec(1);
  r.user = "alice";
  r.count = 2;
  r.as_group = true;
  auto answer = core_->admission().Submit(std::move(r));
  ASSERT_TRUE(answer.ok() && answer->group) << answer.status().message();
  const int64_t group = *answer->group;
  const int64_t job = answer->ids.front();

  auto active = core_->reads().JobRowOf(job);
  ASSERT_TRUE(active.ok()) << active.status().message();
  EXPECT_EQ(active->first.status, JobStatus::kPending);
  EXPECT_TRUE(active->second);  // its output may still grow
  ASSERT_TRUE(core_->reads().TalliedGroup(group).has_value());
  auto tallied = core_->reads().Group(group);
  ASSERT_TRUE(tallied.ok());
  EXPECT_EQ(tallied->size, 2);
  EXPECT_EQ(tallied->Counts()[JobStatus::kPending], 2);

  CancelRequest cancel;
  cancel.all = true;
  cancel.user = "alice";
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  EXPECT_FALSE(core_->reads().TalliedGroup(group).has_value());  // reaped: the store answers
  auto ended = core_->reads().JobRowOf(job);
  ASSERT_TRUE(ended.ok()) << ended.status().message();
  EXPECT_EQ(ended->first.status, JobStatus::kCancelled);
  EXPECT_FALSE(ended->second);
  auto stored = core_->reads().Group(group);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->size, 2);
  EXPECT_EQ(stored->user, "alice");
  EXPECT_EQ(stored->Counts()[JobStatus::kCancelled], 2);
  auto counts = core_->reads().GroupCounts({group});
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[group][JobStatus::kCancelled], 2);

  EXPECT_EQ(core_->reads().JobRowOf(999).status().code(), Code::kNotFound);
  EXPECT_EQ(core_->reads().Group(999).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace berth::testing
