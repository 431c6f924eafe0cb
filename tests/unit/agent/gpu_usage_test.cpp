// GPU utilisation per job: nvidia-smi's CSV read (agent/gpu_sampler.h), the samples
// attributed to the jobs holding the devices (agent/gpu_usage.h) and the node's sampler loop
// (agent/gpu_watch.h), with a sampler scripted per GPU.
#include "agent/gpu_usage.h"

#include <gtest/gtest.h>

#include <thread>

#include "agent/gpu_sampler.h"
#include "agent/gpu_watch.h"
#include "fakes/fake_clock.h"
#include "fakes/fake_gpu_sampler.h"
#include "fakes/fake_health.h"

namespace berth {
namespace {

using testing::FakeClock;
using testing::FakeCommandRunner;
using testing::FakeGpuSampler;

TEST(GpuSampler, ReadsNvidiaSmisCsvWithoutUnits) {
  // Two whole GPUs and one in MIG mode (no utilisation of its own), as nvidia-smi prints them.
  Result<std::vector<GpuReading>> r = ParseGpuQuery(
      "1, GPU-7a1c2b3d-0000-1111-2222-333344445555, 0, 1\n"
      "0, GPU-5f0e9d8c-aaaa-bbbb-cccc-ddddeeeeffff, 87, 40231\n"
      "2, GPU-11112222-3333-4444-5555-666677778888, [N/A], 3071\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].index, 0);
  EXPECT_EQ((*r)[0].sm_percent, 87);
  EXPECT_EQ((*r)[0].memory_mib, 40231);
  EXPECT_EQ((*r)[1].sm_percent, 0);
  EXPECT_EQ((*r)[2].sm_percent, std::nullopt);
  ASSERT_TRUE(AddComputeApps("GPU-5f0e9d8c-aaaa-bbbb-cccc-ddddeeeeffff, 4242, 40200\n"
                             "GPU-5f0e9d8c-aaaa-bbbb-cccc-ddddeeeeffff, 17, 10\n"
                             "GPU-unknown, 99, 1\n",
                             *r)
                  .ok());
  EXPECT_EQ((*r)[0].pids, (std::vector<pid_t>{17, 4242}));
  EXPECT_TRUE((*r)[1].pids.empty());
}

TEST(GpuSampler, BadOutputNamesTheLine) {
  EXPECT_EQ(ParseGpuQuery("0, GPU-a, 5, 1\n0, GPU-b, 5\n").status().message(),
            "line 2: expected 4 fields (index, uuid, utilization.gpu, memory.used), got 3");
  EXPECT_EQ(ParseGpuQuery("x, GPU-a, 5, 1\n").status().message(),
            "line 1: GPU index 'x' is not a number");
  EXPECT_EQ(ParseGpuQuery("0, GPU-a, 5%, 1\n").status().message(),
            "line 1: utilization.gpu '5%' is not a number");
  std::vector<GpuReading> none;
  EXPECT_EQ(AddComputeApps("GPU-a, pid, 1\n", none).message(), "line 1: pid 'pid' is not a number");
}

TEST(GpuSampler, AsksNvidiaSmiExactlyTwoQuestionsWithATimeout) {
  FakeClock clock;
  FakeCommandRunner runner;
  std::vector<std::vector<std::string>> asked;
  runner.On("nvidia-smi", [&](const TimedCommand& c) {
    asked.push_back(c.argv);
    EXPECT_EQ(c.timeout, 5'000);
    if (c.argv[1].starts_with("--query-gpu="))
      return FakeCommandRunner::Exit(0, "0, GPU-a, 3, 9\n");
    return FakeCommandRunner::Exit(0, "GPU-a, 77, 9\n");
  });
  NvidiaSmiSampler sampler(runner, clock, 5'000);
  Result<GpuSample> s = sampler.Sample();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->at, clock.Now());
  ASSERT_EQ(s->gpus.size(), 1u);
  EXPECT_EQ(s->gpus[0].pids, (std::vector<pid_t>{77}));
  EXPECT_EQ(asked, (std::vector<std::vector<std::string>>{
                       {"nvidia-smi", "--query-gpu=index,uuid,utilization.gpu,memory.used",
                        "--format=csv,noheader,nounits"},
                       {"nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                        "--format=csv,noheader,nounits"}}));
  // A hung nvidia-smi: the sample fails, saying so.
  runner.On("nvidia-smi", [](const TimedCommand&) { return FakeCommandRunner::TimedOut(5'000); });
  Result<GpuSample> hung = sampler.Sample();
  ASSERT_FALSE(hung.ok());
  EXPECT_NE(hung.status().message().find("timed out"), std::string::npos)
      << hung.status().message();
}

class GpuUsageTest : public ::testing::Test {
 protected:
  // Every 10 seconds a sample, attributed.
  void Tick(int samples = 1) {
    for (int k = 0; k < samples; ++k) {
      clock_.Advance(10'000);
      book_.Record(sampler_.Sample(), clock_.Now());
    }
  }

  FakeClock clock_;
  FakeGpuSampler sampler_{clock_};
  GpuUsageBook book_{5};
};

TEST_F(GpuUsageTest, AJobAtZeroIsIdleItsBusyNeighbourIsNot) {
  const GpuUsageBook::Key idle{1, 0, 0}, busy{2, 0, 0};
  book_.Hold(idle, {0, 1});
  book_.Hold(busy, {2});
  sampler_.Set(0, 0, {100}, 500);  // a process that holds memory and computes nothing
  sampler_.Set(1, 3, {100}, 700);
  sampler_.Set(2, 90, {200}, 30'000);
  Tick();
  const TimeMs first = clock_.Now();
  Tick(6);
  EXPECT_EQ(book_.Of(idle)->idle_since, first);
  EXPECT_EQ(book_.Of(idle)->IdleFor(clock_.Now()), 60'000);
  EXPECT_EQ(book_.Of(idle)->idle_ms, 60'000);
  EXPECT_EQ(book_.Of(idle)->peak_memory_mib, 1'200);
  EXPECT_EQ(book_.Of(idle)->P95Sm(), 1);  // the mean of 0 and 3, rounded down
  EXPECT_EQ(book_.Of(busy)->IdleFor(clock_.Now()), 0);
  EXPECT_EQ(book_.Of(busy)->MeanSm(), 90.0);
  EXPECT_EQ(book_.Of(busy)->idle_ms, 0);
  // Work resumes on one of its GPUs: the spell ends, the idle time stays counted.
  sampler_.Set(1, 60, {100});
  Tick();
  EXPECT_EQ(book_.Of(idle)->IdleFor(clock_.Now()), 0);
  EXPECT_EQ(book_.Of(idle)->idle_ms, 60'000);
}

// A rank held with its policy's own threshold (the launch's idle_below) is judged by it.
TEST_F(GpuUsageTest, ARanksOwnThresholdJudgesIt) {
  const GpuUsageBook::Key strict{1, 0, 0}, usual{2, 0, 0};
  book_.Hold(strict, {0}, 50);
  book_.Hold(usual, {1});
  sampler_.Set(0, 30, {100});
  sampler_.Set(1, 30, {200});
  Tick(3);
  EXPECT_GT(book_.Of(strict)->idle_ms, 0);  // 30 % is below 50
  EXPECT_EQ(book_.Of(usual)->idle_ms, 0);   // but not below 5
}

TEST_F(GpuUsageTest, NoProcessIsIdleWhateverTheGpuReports) {
  const GpuUsageBook::Key job{1, 0, 0};
  book_.Hold(job, {0});
  sampler_.Set(0, 40, {});  // another node's traffic, a display: no process of the job
  Tick(3);
  EXPECT_EQ(book_.Of(job)->IdleFor(clock_.Now()), 20'000);
}

TEST_F(GpuUsageTest, WhatWasNotSeenIsNeverIdle) {
  const GpuUsageBook::Key job{1, 0, 0};
  book_.Hold(job, {0, 3});
  sampler_.Set(0, 0, {});
  sampler_.Set(3, 0, {});
  Tick(3);
  EXPECT_GT(book_.Of(job)->IdleFor(clock_.Now()), 0);
  // nvidia-smi hangs: utilisation unknown, the spell is over.
  sampler_.Fail("nvidia-smi --query-gpu: timed out after 10s");
  Tick();
  EXPECT_FALSE(book_.Of(job)->known);
  EXPECT_EQ(book_.Of(job)->IdleFor(clock_.Now()), 0);
  sampler_.Heal();
  Tick();
  EXPECT_TRUE(book_.Of(job)->known);
  EXPECT_EQ(book_.Of(job)->IdleFor(clock_.Now()), 0);  // a new spell starts at this sample
  // A sample that lacks one of its GPUs is as unknown.
  GpuSample partial;
  partial.at = clock_.Now() + 10'000;
  partial.gpus.push_back({.index = 0, .uuid = "GPU-fake-0", .sm_percent = 0});
  book_.Record(partial, partial.at);
  EXPECT_FALSE(book_.Of(job)->known);
}

TEST_F(GpuUsageTest, AMigGpuWithAProcessIsBusyAndOutOfTheStatistics) {
  const GpuUsageBook::Key job{1, 0, 0};
  book_.Hold(job, {0});
  sampler_.Set(0, std::nullopt, {55});
  Tick(3);
  EXPECT_EQ(book_.Of(job)->IdleFor(clock_.Now()), 0);
  EXPECT_EQ(book_.Of(job)->samples, 0);
  EXPECT_TRUE(book_.Of(job)->known);
}

TEST_F(GpuUsageTest, MeanAndP95OverTheSamples) {
  const GpuUsageBook::Key job{1, 0, 0};
  book_.Hold(job, {0});
  for (int sm = 1; sm <= 20; ++sm) {
    sampler_.Set(0, sm * 5, {1});
    Tick();
  }
  EXPECT_EQ(book_.Of(job)->samples, 20);
  EXPECT_DOUBLE_EQ(book_.Of(job)->MeanSm(), 52.5);
  EXPECT_EQ(book_.Of(job)->P95Sm(), 95);  // 19 of the 20 samples at or below it
  book_.Drop(job);
  EXPECT_EQ(book_.Of(job), nullptr);
  EXPECT_EQ(book_.size(), 0u);
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

// The node's sampler loop (agent/gpu_watch.h): ranks held get their use into the heartbeat.
TEST(GpuWatch, HeldRanksAreSampledAndReported) {
  testing::FakeClock clock;
  auto sampler = std::make_unique<testing::FakeGpuSampler>(clock);
  testing::FakeGpuSampler& script = *sampler;
  GpuWatch watch(clock, 10'000, 5);
  const proto::AttemptRank idle{7, 1, 0}, busy{8, 2, 1};
  watch.Hold(idle, {0});  // no sampler yet: not held
  EXPECT_TRUE(watch.Usage().empty());
  watch.SampleOnce();
  EXPECT_EQ(script.samples(), 0);
  watch.SetSampler(std::move(sampler));
  watch.SampleOnce();
  EXPECT_EQ(script.samples(), 0) << "nobody to attribute to: nvidia-smi is not asked";
  watch.Hold(idle, {0});
  watch.Hold(busy, {1});
  watch.Hold({9, 1, 0}, {});  // a rank without GPUs is not held
  script.Set(0, 0, {});
  script.Set(1, 75, {4242}, 2'048);
  for (int k = 0; k < 4; ++k) {
    clock.Advance(10'000);
    watch.SampleOnce();
  }
  std::vector<proto::GpuUsage> usage = watch.Usage();
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0].id, idle);
  EXPECT_TRUE(usage[0].known);
  EXPECT_EQ(usage[0].idle_for_ms, 30'000);
  EXPECT_EQ(usage[0].idle_ms, 30'000);
  EXPECT_EQ(usage[1].id, busy);
  EXPECT_EQ(usage[1].mean_sm_tenths, 750);
  EXPECT_EQ(usage[1].p95_sm, 75);
  EXPECT_EQ(usage[1].peak_memory_mib, 2'048);
  EXPECT_EQ(usage[1].idle_for_ms, 0);
  // The node's GPUs as the last sample saw them (the dashboard's shading), until it is stale.
  EXPECT_EQ(watch.GpusNow(), (std::vector<proto::GpuNow>{{0, 0, 0}, {1, 75, 2'048}}));
  clock.Advance(30'001);
  EXPECT_TRUE(watch.GpusNow().empty());
  watch.Release(idle);
  ASSERT_EQ(watch.Usage().size(), 1u);
  EXPECT_EQ(watch.Usage()[0].id, busy);
}

// A rank's hold as kept in its job dir, for an agent that restarts: read back as written; anything
// else (a MIG slice's UUID, a damaged file) is no hold.
TEST(GpuWatch, AHoldIsKeptAsTextAndReadBack) {
  EXPECT_EQ(GpuWatch::HoldText({0, 3}, 20), "0,3 20\n");
  auto back = GpuWatch::ParseHold(GpuWatch::HoldText({0, 3}, 20));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->first, (std::vector<int>{0, 3}));
  EXPECT_EQ(back->second, 20);
  for (const char* bad : {"", "0,3", "MIG-4f1c 5", "0,-1 5", "0 101", "0,,1 5", "x y z"}) {
    EXPECT_FALSE(GpuWatch::ParseHold(bad)) << bad;
  }
}

TEST(GpuWatch, TheLoopEndsWhenStopped) {
  testing::FakeClock clock;
  GpuWatch watch(clock, 60'000, 5);
  std::thread loop([&] { watch.Loop(); });
  watch.Stop();
  loop.join();  // (a hang here is the failure)
}

}  // namespace
}  // namespace berth
