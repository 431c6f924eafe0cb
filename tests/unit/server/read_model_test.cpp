// ReadModel (server/core/read_model.h): where a terminal or a port-forward reaches a job.
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

}  // namespace
}  // namespace berth::testing
