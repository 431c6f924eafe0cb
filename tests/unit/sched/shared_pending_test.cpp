// Pending jobs that share their request (Snapshot::shared_pending, sched/cluster.h): the server's
// form of a queue, where a submission's jobs share one request. A pass decides on them exactly as
// on the same jobs each with a request of its own, and names each job by its own id. (Every golden
// scenario is run both ways too: tests/unit/sched/scenario_runner.cpp.)
#include <gtest/gtest.h>

#include <set>

#include "sched/scheduler.h"
#include "sched_testing.h"

namespace berth::sched::testing {
namespace {

// A node of 4 GPUs held by a low-priority running job and one of 2 free; a high-priority job of 4
// GPUs that must preempt it; two submissions of 1-GPU jobs (ten and three) that fill what is left
// and wait.
Snapshot Cluster() {
  Snapshot s;
  s.now = 1'000'000;
  s.nodes = {MakeNode("a", 64, 256, "H100", 4), MakeNode("b", 64, 256, "H100", 2)};
  RunningJob low;
  low.id = 1;
  SetGpus(low.per_node, "H100:4");
  low.placement = {{"a", 0, {{0, 1000}, {1, 1000}, {2, 1000}, {3, 1000}}}};
  EXPECT_EQ(Hold(s, low), "");
  return s;
}

std::vector<std::string> Decide(const Snapshot& s) { return FormatDecisions(Schedule(s, {})); }

TEST(SharedPendingTest, ASharedRequestDecidesAsOneRequestPerJob) {
  JobRequest urgent = MakeJob(5, "H100:4", 10);
  JobRequest small = MakeJob(0, "H100:1");  // its id is not read
  JobRequest other = MakeJob(0, "H100:1");
  other.user = "bob";

  Snapshot own = Cluster();
  own.pending.push_back(urgent);
  for (JobId id = 10; id < 20; ++id) {
    own.pending.push_back(small);
    own.pending.back().id = id;
  }
  for (JobId id = 30; id < 33; ++id) {
    own.pending.push_back(other);
    own.pending.back().id = id;
  }

  Snapshot shared = Cluster();
  shared.pending.push_back(urgent);  // both forms in one snapshot
  auto small_shared = std::make_shared<const JobRequest>(small);
  auto other_shared = std::make_shared<const JobRequest>(other);
  for (JobId id = 10; id < 20; ++id) shared.shared_pending.push_back({id, small_shared});
  for (JobId id = 30; id < 33; ++id) shared.shared_pending.push_back({id, other_shared});

  const std::vector<std::string> expected = Decide(own);
  EXPECT_EQ(Decide(shared), expected);
  // The jobs are named by their own ids: two of them on b, job 5 preempting job 1.
  PassResult result = Schedule(shared, {});
  ASSERT_EQ(result.placements.size(), 2u);
  std::set<JobId> placed;
  for (const PlaceDecision& d : result.placements) placed.insert(d.job);
  EXPECT_EQ(placed.size(), 2u) << "each placement names a different job";
  for (JobId id : placed) EXPECT_TRUE((id >= 10 && id < 20) || (id >= 30 && id < 33)) << id;
  ASSERT_EQ(result.preemptions.size(), 1u);
  EXPECT_EQ(result.preemptions[0].preemptor, 5);
  EXPECT_EQ(result.waiting.size(), 12u) << "11 small jobs, and job 5 until its victim stops";
}

}  // namespace
}  // namespace berth::sched::testing
