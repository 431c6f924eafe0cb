// HealthBook: when a probe's finding opens a fault and when clean runs close it (never a timer).
#include "agent/health_book.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

ProbeRun Clean(const std::string& name) { return ProbeRun{.name = name}; }
ProbeRun Found(const std::string& name, int gpu, const std::string& reason) {
  return ProbeRun{.name = name, .findings = {{gpu, reason}}};
}

TEST(HealthBook, AFaultClosesOnlyAfterTwoCleanRunsInARow) {
  HealthBook book(2);
  EXPECT_TRUE(book.Record(Found("health.d/scratch", -1, "scratch is read-only"), 100));
  EXPECT_TRUE(book.NodeFaulty());
  EXPECT_FALSE(book.Record(Clean("health.d/scratch"), 200));
  EXPECT_TRUE(book.NodeFaulty()) << "one clean run is not enough";
  // A finding in between starts the count again.
  EXPECT_FALSE(book.Record(Found("health.d/scratch", -1, "scratch is read-only"), 300));
  EXPECT_FALSE(book.Record(Clean("health.d/scratch"), 400));
  EXPECT_TRUE(book.NodeFaulty());
  // Other probes' clean runs do not count for it.
  EXPECT_FALSE(book.Record(Clean("disk"), 450));
  EXPECT_FALSE(book.Record(Clean("disk"), 460));
  EXPECT_TRUE(book.NodeFaulty());
  EXPECT_TRUE(book.Record(Clean("health.d/scratch"), 500));
  EXPECT_FALSE(book.NodeFaulty());
  EXPECT_TRUE(book.Health().faults.empty());
}

TEST(HealthBook, AFaultKeepsWhenItWasFirstFoundAndTheLatestWords) {
  HealthBook book(2);
  book.Record(Found("ecc", 1, "ecc: 3 uncorrected ECC errors on GPU 1"), 100);
  book.Record(Found("ecc", 1, "ecc: 5 uncorrected ECC errors on GPU 1"), 200);
  auto health = book.Health();
  ASSERT_EQ(health.faults.size(), 1u);
  EXPECT_EQ(health.faults[0].since_ms, 100);
  EXPECT_EQ(health.faults[0].reason, "ecc: 5 uncorrected ECC errors on GPU 1");
  EXPECT_EQ(health.faults[0].gpu, 1);
}

TEST(HealthBook, GpuFaultsLeaveTheNodeUpAndCloseOnTheirOwn) {
  HealthBook book(2);
  ProbeRun run{.name = "ecc", .findings = {{1, "ecc on GPU 1"}, {3, "ecc on GPU 3"}}};
  book.Record(run, 100);
  EXPECT_FALSE(book.NodeFaulty());
  EXPECT_EQ(book.Health().FaultyGpus(), (std::set<int>{1, 3}));
  // GPU 3 is found again, GPU 1 not: only GPU 1 counts clean runs.
  book.Record(Found("ecc", 3, "ecc on GPU 3"), 200);
  book.Record(Found("ecc", 3, "ecc on GPU 3"), 300);
  EXPECT_EQ(book.Health().FaultyGpus(), (std::set<int>{3}));
}

TEST(HealthBook, StickyFaultsStayThroughCleanRunsUntilReset) {
  HealthBook book(1);
  EXPECT_TRUE(book.AddSticky("prolog", -1, "prolog/10-scratch: exit code 3", 100));
  EXPECT_FALSE(book.AddSticky("prolog", -1, "prolog/10-scratch: exit code 3", 150));
  for (int i = 0; i < 5; ++i) book.Record(Clean("prolog"), 200 + i);
  EXPECT_TRUE(book.NodeFaulty());
  ASSERT_EQ(book.StickyFaults().size(), 1u);
  EXPECT_EQ(book.StickyFaults()[0].since_ms, 100);
  book.Reset();
  EXPECT_FALSE(book.NodeFaulty());
  EXPECT_TRUE(book.StickyFaults().empty());
}

TEST(HealthBook, ResultsCountFailuresAndTimeouts) {
  HealthBook book(2);
  book.Record(Found("health.d/dcgm", -1, "health.d/dcgm: timed out after 1s"), 100);
  ProbeRun timed_out = Found("health.d/dcgm", -1, "health.d/dcgm: timed out after 1s");
  timed_out.timed_out = true;
  timed_out.duration_ms = 1000;
  book.Record(timed_out, 200);
  book.Record(Clean("health.d/dcgm"), 300);
  auto health = book.Health();
  ASSERT_EQ(health.probes.size(), 1u);
  const proto::ProbeResult& r = health.probes[0];
  EXPECT_TRUE(r.ok);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.failures, 2);
  EXPECT_EQ(r.timeouts, 1);
  EXPECT_EQ(r.at_ms, 300);
  EXPECT_EQ(health.faults.size(), 1u) << "still open after one clean run";
}

}  // namespace
}  // namespace berth
