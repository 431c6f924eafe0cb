// Preemption and reservations in Schedule(): the stories the golden scenarios (preemption.scn,
// preemption_stopping.scn, exclusive_preemption.scn, starvation.scn) do not tell, and properties
// over many passes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "sched/scheduler.h"
#include "sched_testing.h"

namespace berth::sched {
namespace {

using testing::Apply;
using testing::CheckedPass;
using testing::CheckInvariants;
using ::testing::ElementsAre;
using testing::Finish;
using testing::FormatDecisions;
using testing::Hold;
using ::testing::IsEmpty;
using testing::MakeJob;
using testing::MakeNode;
using testing::PreemptMode;

RunningJob Running(JobId id, int priority, std::vector<std::pair<std::string, std::vector<int>>> on,
                   TimeMs started = 0) {
  RunningJob job;
  job.id = id;
  job.priority = priority;
  job.started_at = started;
  job.per_node.gpu_type = "V100";
  job.per_node.gpu_milli = static_cast<MilliGpu>(on.front().second.size()) * kMilliPerGpu;
  for (auto& [node, devices] : on) {
    NodeGrant grant{node, static_cast<int>(job.placement.size()), {}};
    for (int d : devices) grant.gpus.push_back({d, kMilliPerGpu});
    job.placement.push_back(grant);
  }
  return job;
}

// n1 has 4 V100s, all held by job 1 (priority 0). With preemption off, job 2 (priority 9) waits.
TEST(PreemptionTest, OnlyWhenConfigured) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Running(1, 0, {{"n1", {0, 1, 2, 3}}})), "");
  s.pending = {MakeJob(2, "V100:4", 9)};
  Config off;
  off.preemption = false;
  EXPECT_THAT(CheckedPass(s, off).preemptions, IsEmpty());
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("preempt 2 victims=1 on n1 gpus=0,1,2,3",
                          "wait 2: preempting lower-priority job 1; starts on n1 once it stops"));
}

// A 2-node gang (job 5) needs V100:4 on each of two nodes; n1 holds job 1 (priority 0, 2 GPUs) and
// job 2 (priority 1, 2 GPUs); n2 holds job 3 (priority 0, a 2-node gang on n2 and n3, 4 GPUs each);
// n3 is otherwise empty. Node by node, n1 would cost jobs 1 and 2, and n2 job 3 — which also frees
// n3. So the gang evicts only job 3 and lands on n2 and n3; n1 is left alone.
TEST(PreemptionTest, GangVictimFreesSeveralNodes) {
  Snapshot s;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("n2", 8, 32, "V100", 4),
             MakeNode("n3", 8, 32, "V100", 4)};
  ASSERT_EQ(Hold(s, Running(1, 0, {{"n1", {0, 1}}})), "");
  ASSERT_EQ(Hold(s, Running(2, 1, {{"n1", {2, 3}}})), "");
  ASSERT_EQ(Hold(s, Running(3, 0, {{"n2", {0, 1, 2, 3}}, {"n3", {0, 1, 2, 3}}})), "");
  s.pending = {MakeJob(5, "V100:4", 5)};
  s.pending[0].num_nodes = 2;
  EXPECT_THAT(
      FormatDecisions(CheckedPass(s)),
      ElementsAre("preempt 5 victims=3 on n2 gpus=0,1,2,3 and n3 gpus=0,1,2,3",
                  "wait 5: preempting lower-priority job 3; starts on n2, n3 once it stops"));
}

// Preemption comes before reservation, and a job that starves reserves what it cannot get either
// way. n1 holds job 1 (priority 0, 2 of 4 GPUs), n2 job 2 (priority 4, no time limit), n3 job 3
// (priority 0). Jobs 10, 11 and 12 want a whole node and have waited 20 minutes. Job 10 (priority
// 5) evicts job 1, job 11 (priority 3) job 3; job 12 (priority 1) can evict nobody (n1 and n3 are
// held for the preemptors, job 2 has priority 4): it reserves n2, whose job has no time limit. Its
// reason starts as job 10's did: the first job of a shape gives the reason for all.
TEST(ReservationTest, AfterPreemption) {
  Snapshot s;
  s.now = 30 * 60 * 1000;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4), MakeNode("n2", 8, 32, "V100", 4),
             MakeNode("n3", 8, 32, "V100", 4)};
  RunningJob one = Running(1, 0, {{"n1", {0, 1}}});
  one.time_limit = 60 * 60 * 1000;
  ASSERT_EQ(Hold(s, one), "");
  ASSERT_EQ(Hold(s, Running(2, 4, {{"n2", {0, 1, 2, 3}}})), "");
  ASSERT_EQ(Hold(s, Running(3, 0, {{"n3", {0, 1, 2, 3}}})), "");
  s.pending = {MakeJob(10, "V100:4", 5), MakeJob(11, "V100:4", 3), MakeJob(12, "V100:4", 1)};
  for (JobRequest& j : s.pending) j.submitted_at = 10 * 60 * 1000;
  PassResult pass = CheckedPass(s);
  EXPECT_THAT(FormatDecisions(pass),
              ElementsAre("preempt 10 victims=1 on n1 gpus=0,1,2,3",
                          "preempt 11 victims=3 on n3 gpus=0,1,2,3",
                          "wait 10: preempting lower-priority job 1; starts on n1 once it stops",
                          "wait 11: preempting lower-priority job 3; starts on n3 once it stops",
                          "wait 12: waiting for resources: needs V100:4 on 1 node; most free on "
                          "one node: 2 V100 (n1); holds a reservation on n2 (when it frees is "
                          "unknown: a job there has no time limit)"));
}

// An exclusive job that starves reserves a whole domain. Racks r1 = {n1, n2} and r2 = {n3, n4}:
// job 1 (priority 9, limit 1h, started at 0) holds n1, job 2 (priority 9, no limit) n3. Job 10
// (exclusive, 2 nodes, waited 30 minutes) reserves r1, which empties at 1h. Job 11 (limit 10m, ends
// at 40m) may still use n2; job 12 (no limit) may not, and goes to n4.
TEST(ReservationTest, ExclusiveJobReservesTheDomainThatEmptiesFirst) {
  Snapshot s;
  s.now = 30 * 60 * 1000;
  for (const char* name : {"n1", "n2", "n3", "n4"})
    s.nodes.push_back(MakeNode(name, 8, 32, "V100", 4));
  s.nodes[0].labels["rack"] = s.nodes[1].labels["rack"] = "r1";
  s.nodes[2].labels["rack"] = s.nodes[3].labels["rack"] = "r2";
  RunningJob one = Running(1, 9, {{"n1", {0}}});
  one.time_limit = 60 * 60 * 1000;
  ASSERT_EQ(Hold(s, one), "");
  ASSERT_EQ(Hold(s, Running(2, 9, {{"n3", {0}}})), "");
  s.pending = {MakeJob(10, "V100:4"), MakeJob(11, "V100:4"), MakeJob(12, "V100:4")};
  s.pending[0].num_nodes = 2;
  s.pending[0].exclusive = "rack";
  s.pending[1].time_limit = 10 * 60 * 1000;
  for (JobRequest& j : s.pending) j.submitted_at = 0;
  EXPECT_THAT(
      FormatDecisions(CheckedPass(s)),
      ElementsAre("place 11 on n2 gpus=0,1,2,3", "place 12 on n4 gpus=0,1,2,3",
                  "wait 10: waiting for a free 'rack' domain: every one is in use (r1, r2); "
                  "holds a reservation on 'rack' domain r1 (expected free in 30m)"));
}

// A starving gang reserves the nodes that free soonest. n1's job ends at 20m, n2's at 50m, n3's at
// 30m, and n4's has no time limit. Job 10 (2 nodes, waited 15 minutes) reserves n1 and n3, free
// in 20 minutes (at 30m). Job 11 (limit 15m, ends at 25m) may use n1; job 12 (limit 25m) may not,
// and takes n2's free half instead.
TEST(ReservationTest, GangReservesTheNodesThatFreeSoonest) {
  constexpr TimeMs kMinute = 60 * 1000;
  Snapshot s;
  s.now = 10 * kMinute;
  for (const char* name : {"n1", "n2", "n3", "n4"}) {
    s.nodes.push_back(MakeNode(name, 8, 32, "V100", 4));
  }
  const std::pair<const char*, std::optional<TimeMs>> ends[] = {
      {"n1", 20 * kMinute}, {"n2", 50 * kMinute}, {"n3", 30 * kMinute}, {"n4", std::nullopt}};
  JobId id = 1;
  for (const auto& [node, end] : ends) {
    RunningJob r = Running(id++, 0, {{node, {0, 1}}});
    if (end) r.time_limit = *end;
    ASSERT_EQ(Hold(s, r), "");
  }
  s.pending = {MakeJob(10, "V100:4"), MakeJob(11, "V100:2"), MakeJob(12, "V100:2")};
  s.pending[0].num_nodes = 2;
  s.pending[0].submitted_at = -5 * kMinute;
  s.pending[1].time_limit = 15 * kMinute;
  s.pending[1].submitted_at = s.pending[2].submitted_at = s.now;
  s.pending[2].time_limit = 25 * kMinute;
  Config no_preemption;
  no_preemption.preemption = false;
  EXPECT_THAT(FormatDecisions(CheckedPass(s, no_preemption)),
              ElementsAre("place 11 on n1 gpus=2,3", "place 12 on n2 gpus=2,3",
                          "wait 10: waiting for resources: needs V100:4 on each of 2 nodes; most "
                          "free on one node: 2 V100 (n1); holds a reservation on n1, n3 (expected "
                          "free in 20m)"));
}

// Reservations are for jobs that waited longer than the bound: the same queue a minute earlier
// backfills freely.
TEST(ReservationTest, NoneBeforeTheBound) {
  Snapshot s;
  s.now = 9 * 60 * 1000;
  s.nodes = {MakeNode("n1", 8, 32, "V100", 4)};
  RunningJob one = Running(1, 0, {{"n1", {0}}});
  ASSERT_EQ(Hold(s, one), "");
  s.pending = {MakeJob(10, "V100:4"), MakeJob(11, "V100:1")};
  EXPECT_THAT(FormatDecisions(CheckedPass(s)),
              ElementsAre("place 11 on n1 gpus=1",
                          "wait 10: waiting for resources: needs V100:4 on "
                          "1 node; most free on one node: 3 V100 (n1)"));
  s.now = 11 * 60 * 1000;
  EXPECT_THAT(CheckedPass(s).placements, IsEmpty());
}

// No thrashing, over many passes: random clusters where jobs of random priorities come, are placed,
// preempted (stopping for a pass, then requeued) and finish. A job is never evicted by a job of
// equal or lower priority (CheckInvariants), so no pair of jobs ever evicts each other in turn: if
// A evicted B, B never evicts A.
TEST(PreemptionTest, NoJobEvictsItsEvictor) {
  std::mt19937 rng(31337);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int preemptions = 0;
  for (int round = 0; round < 60; ++round) {
    std::set<std::pair<JobId, JobId>> evicted;  // (preemptor, victim)
    Snapshot s;
    for (int n = 0; n < pick(1, 5); ++n) {
      s.nodes.push_back(MakeNode("n" + std::to_string(n), 8, 32, "V100", 4));
      s.nodes.back().labels["rack"] = "r" + std::to_string(n / 2);
    }
    JobId next = 1;
    for (int step = 0; step < 12; ++step) {
      s.now += 1000;
      for (int j = pick(0, 4); j > 0; --j) {
        JobRequest job = MakeJob(next++, "V100:" + std::to_string(1 << pick(0, 2)), pick(0, 4));
        job.num_nodes = pick(0, 5) == 0 ? 2 : 1;
        job.exclusive = pick(0, 5) == 0 ? "rack" : "";
        job.submitted_at = s.now;
        s.pending.push_back(job);
      }
      PassResult pass = CheckedPass(s);
      for (const PreemptDecision& d : pass.preemptions) {
        ++preemptions;
        for (JobId v : d.victims) {
          EXPECT_FALSE(evicted.count({v, d.preemptor})) << v << " and " << d.preemptor;
          evicted.insert({d.preemptor, v});
        }
      }
      // Jobs that were stopping are gone now (they come back as new submissions of their own).
      std::vector<JobId> stopped;
      for (const auto& r_view : s.running) {
        const RunningJob& r = *r_view;
        if (r.stopping) stopped.push_back(r.id);
      }
      for (JobId id : stopped) Finish(s, id);
      Apply(s, pass, PreemptMode::kStop);
      for (int f = pick(0, 2); f > 0 && !s.running.empty(); --f) {
        Finish(s,
               s.running[static_cast<size_t>(pick(0, static_cast<int>(s.running.size()) - 1))]->id);
      }
    }
  }
  EXPECT_GT(preemptions, 50);
}

}  // namespace
}  // namespace berth::sched
