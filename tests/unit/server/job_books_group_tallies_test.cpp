// Bulk groups' status counts kept in memory (src/server/core/group_tallies.h): while a group has
// jobs in the core's memory its counts come from its tally, not from a count of its jobs in the
// store. Each test checks the tally against the store at the steps that matter (and the fixture
// checks every tally against the store at the end of every core test): transitions, the reap of
// finished jobs (still counted), a failed commit's undo, and a restart mid-group.
#include <gtest/gtest.h>

#include <thread>

#include "core_fixture.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;
using Counts = std::map<JobStatus, int>;

class GroupTallyTest : public CoreTest {
 protected:
  // Submits `count` jobs of one CPU each as a bulk group; returns the group and its job ids.
  std::pair<int64_t, std::vector<int64_t>> SubmitGroup(int count, int max_running = 0) {
    SubmitRequest r;
    r.spec = Spec(1);
    if (max_running > 0) r.spec.max_running = max_running;
    r.user = "alice";
    r.count = count;
    r.as_group = true;
    auto answer = core_->admission().Submit(std::move(r));
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    if (!answer.ok() || !answer->group) return {0, {}};
    return {*answer->group, answer->ids};
  }

  Counts Tallied(int64_t group) {
    auto g = core_->reads().TalliedGroup(group);
    EXPECT_TRUE(g.has_value()) << "group " << group << " is not tallied";
    return g ? g->Counts() : Counts{};
  }

  Counts InStore(int64_t group) {
    auto counts = store_->inner().GroupStatusCounts({group});
    EXPECT_TRUE(counts.ok());
    return counts.ok() ? (*counts)[group] : Counts{};
  }
};

TEST(GroupTallies, MovesEntersAndGoesWithTheLastJobInMemory) {
  GroupTallies tallies;
  GroupTallies::Tally t;
  t.size = 3;
  t.user = "alice";
  t.by_status[static_cast<int>(JobStatus::kPending)] = 2;
  t.by_status[static_cast<int>(JobStatus::kSucceeded)] = 1;
  t.live = 2;
  tallies.Start(7, t);
  tallies.Move(7, JobStatus::kPending, JobStatus::kRunning);
  EXPECT_EQ(
      tallies.Find(7)->Counts(),
      (Counts{{JobStatus::kPending, 1}, {JobStatus::kRunning, 1}, {JobStatus::kSucceeded, 1}}));
  EXPECT_FALSE(tallies.Enter(8)) << "a group without a tally never starts one";
  EXPECT_FALSE(tallies.Find(8).has_value());
  EXPECT_TRUE(tallies.Enter(7));
  tallies.Leave(7);
  tallies.Leave(7);
  ASSERT_TRUE(tallies.Find(7).has_value()) << "one job of the group is still in memory";
  tallies.Leave(7);
  EXPECT_FALSE(tallies.Find(7).has_value());
  EXPECT_TRUE(tallies.All().empty());
}

// Through placement, running, success (the finished job leaves memory but stays counted), a
// cancel of the rest, and the end of the last job: then memory no longer answers for the group.
TEST_F(GroupTallyTest, FollowsTheGroupUntilItsLastJobLeavesMemory) {
  Register("n1", 2);
  auto [group, ids] = SubmitGroup(4);
  ASSERT_EQ(ids.size(), 4u);
  auto g = core_->reads().TalliedGroup(group);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->size, 4);
  EXPECT_EQ(g->user, "alice");
  EXPECT_EQ(g->Counts(), (Counts{{JobStatus::kPending, 4}}));

  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", ids[0]);
  EXPECT_EQ(
      Tallied(group),
      (Counts{{JobStatus::kPending, 2}, {JobStatus::kStarting, 1}, {JobStatus::kRunning, 1}}));
  EXPECT_EQ(Tallied(group), InStore(group));

  ASSERT_TRUE(Report("n1", {Entry(ids[0], 1, 0, ReportEvent::kExited, 0)}).ok());
  ASSERT_FALSE(core_->reads().ActiveJobRow(ids[0]).has_value()) << "the finished job left memory";
  EXPECT_EQ(Tallied(group)[JobStatus::kSucceeded], 1);
  EXPECT_EQ(Tallied(group), InStore(group));

  CancelRequest cancel;
  cancel.all = true;
  cancel.user = "alice";
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  EXPECT_EQ(Tallied(group), (Counts{{JobStatus::kSucceeded, 1}, {JobStatus::kCancelled, 3}}))
      << "the placed job is cancelled while its process stops";
  EXPECT_EQ(Tallied(group), InStore(group));

  // The placed job's rank exits: the last job leaves memory, and the tally with it.
  ASSERT_TRUE(core_->reads().ActiveJobRow(ids[1]).has_value() ||
              core_->reads().ActiveJobRow(ids[2]).has_value());
  for (int64_t id : {ids[1], ids[2]}) {
    if (core_->reads().ActiveJobRow(id)) {
      ASSERT_TRUE(Report("n1", {Entry(id, 1, 0, ReportEvent::kAccepted),
                                Entry(id, 1, 0, ReportEvent::kExited, 143)})
                      .ok());
    }
  }
  EXPECT_FALSE(core_->reads().TalliedGroup(group).has_value());
  EXPECT_EQ(InStore(group), (Counts{{JobStatus::kSucceeded, 1}, {JobStatus::kCancelled, 3}}));
}

// A pass whose commit fails places nothing: the jobs, and their group's tally, are as before.
TEST_F(GroupTallyTest, AFailedCommitLeavesTheTallyAsItWas) {
  Register("n1", 2);
  auto [group, ids] = SubmitGroup(3);
  store_->FailWrites(1);
  EXPECT_FALSE(core_->scheduling().RunPass());
  EXPECT_EQ(Tallied(group), (Counts{{JobStatus::kPending, 3}}));
  EXPECT_EQ(Tallied(group), InStore(group));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Tallied(group), (Counts{{JobStatus::kPending, 1}, {JobStatus::kStarting, 2}}));
  EXPECT_EQ(Tallied(group), InStore(group));
}

// The tally is read without the core's lock, so it must not show a change still being committed
// (one that may yet be undone): while a pass's placement waits in the store, it still says pending.
TEST_F(GroupTallyTest, AChangeBeingCommittedIsNotShownYet) {
  Register("n1", 2);
  auto [group, ids] = SubmitGroup(2);
  store_->HoldWrites(true);
  std::thread pass([this] { EXPECT_TRUE(core_->scheduling().RunPass()); });
  while (store_->held_writes() < 1) std::this_thread::yield();
  EXPECT_EQ(Tallied(group), (Counts{{JobStatus::kPending, 2}}));
  store_->HoldWrites(false);
  pass.join();
  EXPECT_EQ(Tallied(group), (Counts{{JobStatus::kStarting, 2}}));
}

// A restart mid-group starts its tally from the store, finished (and no longer loaded) jobs
// included, with its limit.
TEST_F(GroupTallyTest, ARestartTalliesTheGroupFromTheStore) {
  Register("n1", 2);
  auto [group, ids] = SubmitGroup(4, /*max_running=*/2);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", ids[0]);
  Run("n1", ids[1]);
  ASSERT_TRUE(Report("n1", {Entry(ids[0], 1, 0, ReportEvent::kExited, 0)}).ok());
  const Counts before = Tallied(group);
  EXPECT_EQ(
      before,
      (Counts{{JobStatus::kPending, 2}, {JobStatus::kRunning, 1}, {JobStatus::kSucceeded, 1}}));

  Restart();
  auto g = core_->reads().TalliedGroup(group);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->Counts(), before);
  EXPECT_EQ(g->size, 4);
  EXPECT_EQ(g->user, "alice");
  EXPECT_EQ(g->max_running, 2);
  EXPECT_TRUE(core_->books().GroupTalliesConsistentForTesting());
}

// The group's limit is kept with its tally: a change shows at once, one whose commit failed does
// not.
TEST_F(GroupTallyTest, KeepsTheGroupsLimitAsCommitted) {
  Register("n1", 2);
  auto [group, ids] = SubmitGroup(3, /*max_running=*/2);
  ASSERT_TRUE(core_->reads().TalliedGroup(group).has_value());
  EXPECT_EQ(core_->reads().TalliedGroup(group)->max_running, 2);
  ASSERT_TRUE(core_->admission().SetGroupLimit(group, 3, "alice", false).ok());
  EXPECT_EQ(core_->reads().TalliedGroup(group)->max_running, 3);
  store_->FailWrites(1);
  EXPECT_FALSE(core_->admission().SetGroupLimit(group, std::nullopt, "alice", false).ok());
  EXPECT_EQ(core_->reads().TalliedGroup(group)->max_running, 3);
  ASSERT_TRUE(core_->admission().SetGroupLimit(group, std::nullopt, "alice", false).ok());
  EXPECT_EQ(core_->reads().TalliedGroup(group)->max_running, std::nullopt);
}

// A job of a group cancelled while its process still ran, and a restart: the agent registers still
// running it, and the new server holds it (HoldEndedAttempts). It is in memory again for its
// group's tally and limit: when it and then the next job end, the limit still holds the last two
// pending jobs to one at a time (it was forgotten one job early, when the held job's end was
// counted against a group that had not counted it in). A registration whose commit fails brings
// nothing in.
TEST_F(GroupTallyTest, AStoppingJobHeldAfterARestartCountsForItsGroup) {
  Register("n1", 8);
  auto [group, ids] = SubmitGroup(4, /*max_running=*/1);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", ids[0]);
  CancelRequest cancel{.ids = {ids[0]}, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  Restart();

  proto::RegisterRequest r;
  r.name = "n1";
  r.node_id = "node-id-of-n1";
  r.cpus_milli = 8000;
  r.memory_mib = 64 * 1024;
  r.running = {{ids[0], 1, 0}};
  const std::string before = core_->reads().DebugState();
  store_->FailWrites(1);
  ASSERT_FALSE(core_->agents().Register(r, "127.0.0.1").ok());
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(core_->reads().TalliedGroup(group)->live, 3);
  EXPECT_TRUE(core_->books().GroupTalliesConsistentForTesting());
  Register("n1", 8, 0, {{ids[0], 1, 0}});
  EXPECT_EQ(core_->reads().TalliedGroup(group)->live, 4) << "the stopping job is in memory again";
  EXPECT_TRUE(core_->books().GroupTalliesConsistentForTesting());

  ASSERT_TRUE(Report("n1", {Entry(ids[0], 1, 0, ReportEvent::kExited, 143)}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(ids[1]).status, JobStatus::kStarting);
  Run("n1", ids[1]);
  ASSERT_TRUE(Report("n1", {Entry(ids[1], 1, 0, ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(core_->admission().GroupLimit(group), 1) << "two of the group's jobs are still pending";
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(ids[2]).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(ids[3]).status, JobStatus::kPending) << "max_running 1";
  EXPECT_EQ(Tallied(group), InStore(group));
}

}  // namespace
}  // namespace berth::testing
