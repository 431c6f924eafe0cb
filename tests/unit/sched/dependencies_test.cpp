// Dependencies: ok, notok and any over jobs and groups; failures name the dependency; a job's end
// touches only its watchers; Save/Restore undo a change.
#include "sched/dependencies.h"

#include <gtest/gtest.h>

namespace berth::sched {
namespace {

DepCondition On(DepKind kind, std::vector<int64_t> jobs) {
  DepCondition c{kind, {}};
  for (int64_t id : jobs) c.targets.push_back({false, id, 1, 0, 0, ""});
  return c;
}

DepCondition OnGroup(DepKind kind, int64_t group, int size) {
  return {kind, {{true, group, size, 0, 0, ""}}};
}

TEST(DependenciesTest, OkWaitsForEveryJobThenHolds) {
  Dependencies deps;
  EXPECT_EQ(deps.Add(1, {On(DepKind::kOk, {10, 11})}), DepState::kWaiting);
  EXPECT_TRUE(deps.JobEnded(10, std::nullopt, JobStatus::kSucceeded).empty());
  auto changes = deps.JobEnded(11, std::nullopt, JobStatus::kSucceeded);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, 1);
  EXPECT_EQ(changes[0].state, DepState::kMet);
}

TEST(DependenciesTest, OkFailsAtTheFirstFailureAndSaysWhich) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kOk, {10, 11})});
  auto changes = deps.JobEnded(11, std::nullopt, JobStatus::kFailed);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, DepState::kFailed);
  EXPECT_EQ(changes[0].why, "dependency 11 failed");
  // Once failed, later ends change nothing.
  EXPECT_TRUE(deps.JobEnded(10, std::nullopt, JobStatus::kSucceeded).empty());
}

TEST(DependenciesTest, CancelledDependencySaysSo) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kOk, {10})});
  auto changes = deps.JobEnded(10, std::nullopt, JobStatus::kCancelled);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].why, "dependency 10 was cancelled");
}

TEST(DependenciesTest, NotOkHoldsWhenAllEndedAndOneFailed) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kNotOk, {10, 11})});
  EXPECT_TRUE(deps.JobEnded(10, std::nullopt, JobStatus::kFailed).empty());  // 11 still runs
  auto changes = deps.JobEnded(11, std::nullopt, JobStatus::kSucceeded);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, DepState::kMet);
}

TEST(DependenciesTest, NotOkFailsWhenEverythingSucceeded) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kNotOk, {10})});
  auto changes = deps.JobEnded(10, std::nullopt, JobStatus::kSucceeded);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, DepState::kFailed);
  EXPECT_EQ(changes[0].why, "dependency notok:10 can no longer hold: job 10 succeeded");
}

TEST(DependenciesTest, AnyHoldsHoweverTheyEnd) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kAny, {10, 11})});
  EXPECT_TRUE(deps.JobEnded(10, std::nullopt, JobStatus::kFailed).empty());
  auto changes = deps.JobEnded(11, std::nullopt, JobStatus::kCancelled);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, DepState::kMet);
}

TEST(DependenciesTest, GroupCountsEveryJobOfIt) {
  Dependencies deps;
  deps.Add(1, {OnGroup(DepKind::kOk, 3, 3)});
  EXPECT_TRUE(deps.JobEnded(20, 3, JobStatus::kSucceeded).empty());
  EXPECT_TRUE(deps.JobEnded(21, 3, JobStatus::kSucceeded).empty());
  EXPECT_TRUE(deps.JobEnded(99, 4, JobStatus::kFailed).empty());  // another group
  auto changes = deps.JobEnded(22, 3, JobStatus::kSucceeded);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].state, DepState::kMet);

  deps.Add(2, {OnGroup(DepKind::kOk, 5, 2)});
  changes = deps.JobEnded(31, 5, JobStatus::kFailedSetup);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].why, "dependency group 5 failed (job 31 failed)");
}

TEST(DependenciesTest, AddedWithTargetsAlreadyEnded) {
  Dependencies deps;
  DepCondition done = On(DepKind::kOk, {10});
  done.targets[0].ended = 1;
  EXPECT_EQ(deps.Add(1, {done}), DepState::kMet);
  DepCondition group = OnGroup(DepKind::kAny, 3, 4);
  group.targets[0].ended = 3;
  EXPECT_EQ(deps.Add(2, {group}), DepState::kWaiting);
  EXPECT_EQ(deps.JobEnded(40, 3, JobStatus::kLost).size(), 1u);
}

TEST(DependenciesTest, AllConditionsMustHold) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kOk, {10}), On(DepKind::kAny, {11})});
  EXPECT_TRUE(deps.JobEnded(10, std::nullopt, JobStatus::kSucceeded).empty());
  EXPECT_EQ(deps.JobEnded(11, std::nullopt, JobStatus::kFailed).size(), 1u);
  EXPECT_EQ(deps.Find(1)->state, DepState::kMet);
}

TEST(DependenciesTest, RestoreUndoesAnEnd) {
  Dependencies deps;
  deps.Add(1, {On(DepKind::kOk, {10})});
  std::vector<Dependencies::Key> keys = deps.Watching(10, std::nullopt);
  ASSERT_EQ(keys, std::vector<Dependencies::Key>{1});
  std::optional<Dependencies::Waiter> saved = deps.Save(1);
  deps.JobEnded(10, std::nullopt, JobStatus::kFailed);
  EXPECT_EQ(deps.Find(1)->state, DepState::kFailed);
  deps.Restore(1, saved);
  EXPECT_EQ(deps.Find(1)->state, DepState::kWaiting);
  // The job's end, committed this time, still counts once.
  EXPECT_EQ(deps.JobEnded(10, std::nullopt, JobStatus::kSucceeded).size(), 1u);
  EXPECT_EQ(deps.Find(1)->state, DepState::kMet);
  deps.Restore(2, std::nullopt);  // a waiter that did not exist: stays absent
  EXPECT_EQ(deps.Find(2), nullptr);
  deps.Remove(1);
  EXPECT_TRUE(deps.Watching(10, std::nullopt).empty());
  EXPECT_EQ(deps.size(), 0u);
}

}  // namespace
}  // namespace berth::sched
