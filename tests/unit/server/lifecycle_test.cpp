// Lifecycle (server/core/lifecycle.h): time limits on monotonic time, interactive jobs' default
// time limit and idle limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "common/json_util.h"
#include "core_fixture.h"
#include "spec/idle_policy.h"
#include "spec/job_spec.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

// Job 1 has a 1-minute time limit. The wall clock jumps two hours: it keeps running. A minute of
// monotonic time later it is stopped, FAILED for its time limit.
TEST_F(CoreTest, TimeLimitsRunOnMonotonicTime) {
  Register("n1");
  JobSpec spec = Spec();
  spec.time_limit = 60'000;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.StepWall(2 * 3'600'000);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning);
  clock_.Advance(60'001);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kFailed);
  EXPECT_NE(Stored(job).reason.find("time limit"), std::string::npos);
  ASSERT_EQ(channel_.Stops("n1").size(), 1u);
}

// An interactive job without a time limit gets the server's default; one with its own keeps it,
// and a batch job gets none.
TEST_F(CoreTest, AnInteractiveJobGetsTheDefaultTimeLimit) {
  Register("n1");
  JobSpec shell = Spec();
  shell.interactive = true;
  int64_t defaulted = Submit(shell);
  shell.time_limit = 600'000;
  int64_t own = Submit(shell);
  int64_t batch = Submit(Spec());
  auto limit_of = [&](int64_t job) {
    auto row = core_->reads().ActiveJobRow(job);
    EXPECT_TRUE(row.has_value());
    auto spec = store_->inner().GetSpec(row->first.spec_id);
    EXPECT_TRUE(spec.ok());
    auto parsed = SpecFromJson(json::parse(*spec));
    EXPECT_TRUE(parsed.ok());
    return parsed.ok() ? parsed->time_limit : std::nullopt;
  };
  EXPECT_EQ(limit_of(defaulted), options_.interactive_time_limit_ms);
  EXPECT_EQ(options_.interactive_time_limit_ms, 24 * 3'600'000);
  EXPECT_EQ(limit_of(own), 600'000);
  EXPECT_EQ(limit_of(batch), std::nullopt);
}

// With --interactive-idle-limit 10m, a running interactive job ends once no session was seen for
// 10 minutes: not counting from before it ran, nor from before the caller began to watch (a server
// just started), and a session seen later starts the count again. Batch jobs never end for it.
TEST_F(CoreTest, AnInteractiveJobNobodyAttachesToEndsAfterTheIdleLimit) {
  options_.interactive_idle_limit_ms = 600'000;
  options_.interactive_time_limit_ms = 0;
  Restart();
  Register("n1");
  const int64_t watching_since = clock_.Monotonic();
  JobSpec spec = Spec();
  spec.interactive = true;
  int64_t idle = Submit(spec);
  int64_t attached = Submit(spec);
  int64_t batch = Submit(Spec());
  clock_.Advance(3'600'000);  // an hour pending counts for nothing
  ASSERT_TRUE(core_->scheduling().RunPass());
  for (int64_t job : {idle, attached, batch}) Run("n1", job);
  clock_.Advance(300'000);
  std::map<int64_t, int64_t> seen{{attached, clock_.Monotonic()}};
  clock_.Advance(300'001);
  core_->lifecycle().EndIdleInteractive(seen, watching_since);
  EXPECT_EQ(Stored(idle).status, JobStatus::kFailed);
  EXPECT_NE(Stored(idle).reason.find("idle limit 10m exceeded"), std::string::npos)
      << Stored(idle).reason;
  EXPECT_EQ(Stored(attached).status, JobStatus::kRunning) << "seen 5 minutes ago";
  clock_.Advance(300'000);
  // A server that began to watch a minute ago gives every job the whole limit.
  core_->lifecycle().EndIdleInteractive(seen, clock_.Monotonic() - 60'000);
  EXPECT_EQ(Stored(attached).status, JobStatus::kRunning);
  core_->lifecycle().EndIdleInteractive(seen, watching_since);
  EXPECT_EQ(Stored(attached).status, JobStatus::kFailed);
  EXPECT_EQ(Stored(batch).status, JobStatus::kRunning);
  ASSERT_EQ(channel_.Stops("n1").size(), 2u);
}

// What a job's sampled GPUs did (the last reading of its current attempt) reaches the usage rollup
// when the attempt ends, with or without an idle policy: `berth usage`'s GPU efficiency and idle
// GPU-hours. A reading of another attempt is not its own.
TEST_F(CoreTest, AJobsSampledGpuUseIsCountedInUsageWhenItEnds) {
  Register("n1", 8, 2);
  const int64_t job = Submit(Spec(1, 2));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  std::map<std::pair<int64_t, int>, IdleVerdict> told;
  using Reading = Lifecycle::GpuReading;
  core_->lifecycle().NoteGpuUse({Reading{job, 1, 0, 40, 3'000}}, told);
  core_->lifecycle().NoteGpuUse({Reading{job, 2, 0, 99, 9'000}}, told);  // not its attempt
  EXPECT_TRUE(told.empty());
  clock_.Advance(10'000);
  ASSERT_TRUE(Report("n1", {Entry(job, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  ASSERT_EQ(Stored(job).status, JobStatus::kSucceeded);
  auto usage = store_->inner().QueryUsage(UsageQuery{0, clock_.Now() + 3'600'000, false});
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 1u);
  const UsageRow& row = (*usage)[0];
  EXPECT_EQ(row.gpu_sampled_seconds, 2 * 10.0);  // 2 GPUs for 10 s
  EXPECT_EQ(row.gpu_busy_seconds, 0.4 * 2 * 10.0);
  EXPECT_EQ(row.idle_gpu_seconds, 2 * 3.0);
}

// The idle policy (docs/idle.md): a job whose GPUs stay idle gets one warning event per idle spell,
// then is requeued (or cancelled; or, with action none, reported once more); an attempt that is
// not the job's current one, and jobs without a policy, are left alone.
TEST_F(CoreTest, AJobWhoseGpusStayIdleIsWarnedOnceThenActedOn) {
  auto events_with = [&](int64_t job, const std::string& text) {
    auto events = store_->inner().GetEvents(job);
    EXPECT_TRUE(events.ok());
    return std::count_if(events->begin(), events->end(), [&](const JobEvent& e) {
      return e.reason.find(text) != std::string::npos;
    });
  };
  Register("n1");
  int64_t requeued = Submit(Spec());
  int64_t cancelled = Submit(Spec());
  int64_t reported = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  for (int64_t job : {requeued, cancelled, reported}) Run("n1", job);
  std::map<std::pair<int64_t, int>, IdleVerdict> told;
  using Idle = Lifecycle::GpuReading;
  // No policy: nothing happens.
  core_->lifecycle().NoteGpuUse({Idle{requeued, 1, 3'600'000, 0.5}}, told);
  EXPECT_EQ(Stored(requeued).status, JobStatus::kRunning);
  EXPECT_TRUE(told.empty());

  options_.idle_policies.cluster =
      ParseIdlePolicy("below=5,warn=10m,act=30m,action=requeue", 10'000).value();
  Restart();
  const std::vector<Idle> warned{{requeued, 1, 600'000, 0.5}, {requeued, 7, 3'600'000, 0}};
  core_->lifecycle().NoteGpuUse(warned, told);
  core_->lifecycle().NoteGpuUse(warned, told);  // told once per spell
  EXPECT_EQ(events_with(requeued,
                        "idle GPUs: below 5% SM (mean 0.5% so far) for 10m; it will be "
                        "requeued once idle for 30m"),
            1);
  EXPECT_EQ(Stored(requeued).status, JobStatus::kRunning) << "attempt 7 is not its attempt";
  core_->lifecycle().NoteGpuUse({Idle{requeued, 1, 1'800'000, 0.5}}, told);
  EXPECT_EQ(Stored(requeued).status, JobStatus::kPending);
  EXPECT_NE(Stored(requeued).reason.find(
                "idle GPUs: below 5% SM (mean 0.5% so far) for 30m; requeued (--idle-policy "
                "below=5,warn=10m,act=30m,action=requeue"),
            std::string::npos)
      << Stored(requeued).reason;
  EXPECT_FALSE(told.count({requeued, 1}));

  options_.idle_policies.cluster->action = IdleAction::kCancel;
  Restart();
  core_->lifecycle().NoteGpuUse({Idle{cancelled, 1, 1'800'000, 0}}, told);
  EXPECT_EQ(Stored(cancelled).status, JobStatus::kCancelled);

  options_.idle_policies.cluster->action = IdleAction::kNone;
  Restart();
  for (DurationMs idle : {600'000, 900'000, 1'800'000, 2'400'000}) {
    core_->lifecycle().NoteGpuUse({Idle{reported, 1, idle, 0}}, told);
  }
  EXPECT_EQ(Stored(reported).status, JobStatus::kRunning);
  EXPECT_EQ(events_with(reported, "; it will be reported once idle for 30m"), 1);
  EXPECT_EQ(events_with(reported, "; reported only (action none)"), 1);
}

// A pool's idle policy comes before the cluster's: an idle job on a node of pool "interactive"
// (policy none there) runs on, the same job on a node of the default pool is requeued.
TEST_F(CoreTest, APoolsIdlePolicyComesBeforeTheClusters) {
  options_.idle_policies.cluster =
      ParseIdlePolicy("warn=10m,act=30m,action=requeue", 10'000).value();
  ASSERT_TRUE(AddScopedIdlePolicy("interactive=none", "--pool-idle-policy", 10'000,
                                  options_.idle_policies.pools)
                  .ok());
  Restart();
  proto::RegisterRequest node = Registration("i1", 1);  // room for one job
  node.pool = "interactive";
  auto answer = core_->agents().Register(node, "127.0.0.1");
  ASSERT_TRUE(answer.ok());
  sessions_["i1"] = answer->session;
  Register("n1");
  JobSpec in_pool = Spec();
  in_pool.pool = "interactive";
  const int64_t spared = Submit(in_pool);
  const int64_t requeued = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("i1", spared);
  Run("n1", requeued);
  std::map<std::pair<int64_t, int>, IdleVerdict> told;
  core_->lifecycle().NoteGpuUse({Lifecycle::GpuReading{spared, 1, 3'600'000, 0},
                                 Lifecycle::GpuReading{requeued, 1, 3'600'000, 0}},
                                told);
  EXPECT_EQ(Stored(spared).status, JobStatus::kRunning);
  EXPECT_EQ(Stored(requeued).status, JobStatus::kPending);
}

// A GPU job's launch carries its idle policy's threshold, which its agent judges its GPUs by; a
// job without GPUs, or without a policy, gets none.
TEST_F(CoreTest, ALaunchCarriesItsIdlePolicysThreshold) {
  options_.idle_policies.cluster = ParseIdlePolicy("below=20,action=none", 10'000).value();
  Restart();
  Register("n1", 8, 2);
  const int64_t gpu = Submit(Spec(1, 1));
  const int64_t cpu = Submit(Spec(1, 0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  std::map<int64_t, int> below;
  for (const proto::LaunchMessage& m : channel_.Launches("n1")) below[m.job] = m.idle_below;
  EXPECT_EQ(below[gpu], 20);
  EXPECT_EQ(below[cpu], 0);
}

// An exemption counts only where the policy that applies allows it: a job exempted under the
// cluster's policy that lands in a pool whose policy allows none is acted on, the event naming that
// pool's policy.
TEST_F(CoreTest, AnExemptionCountsOnlyWhereThePolicyAllowsIt) {
  options_.idle_policies.cluster =
      ParseIdlePolicy("warn=10m,act=30m,action=requeue", 10'000).value();
  ASSERT_TRUE(AddScopedIdlePolicy("strict=warn=10m,act=30m,action=cancel,exempt=no",
                                  "--pool-idle-policy", 10'000, options_.idle_policies.pools)
                  .ok());
  Restart();
  proto::RegisterRequest node = Registration("s1");
  node.pool = "strict";
  auto answer = core_->agents().Register(node, "127.0.0.1");
  ASSERT_TRUE(answer.ok());
  sessions_["s1"] = answer->session;
  JobSpec spec = Spec();
  spec.idle_ok = "data prep";
  const int64_t job = Submit(spec);  // (it asks for no pool: the cluster's policy allows it)
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("s1", job);
  std::map<std::pair<int64_t, int>, IdleVerdict> told;
  core_->lifecycle().NoteGpuUse({Lifecycle::GpuReading{job, 1, 3'600'000, 0}}, told);
  EXPECT_EQ(Stored(job).status, JobStatus::kCancelled);
  EXPECT_NE(Stored(job).reason.find("; cancelled (--pool-idle-policy strict=below=5,"),
            std::string::npos)
      << Stored(job).reason;
}

// A job exempted from the idle policy (`idle_ok`, docs/idle.md) is reported, never acted on, and
// its exemption is in the audit log once it counts; where the policy allows no exemptions, such a
// job is refused at submission.
TEST_F(CoreTest, AnExemptJobIsOnlyReportedAndAudited) {
  options_.idle_policies.cluster =
      ParseIdlePolicy("warn=10m,act=30m,action=cancel", 10'000).value();
  Restart();
  Register("n1");
  JobSpec spec = Spec();
  spec.idle_ok = "data prep";
  int64_t exempt = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", exempt);
  std::map<std::pair<int64_t, int>, IdleVerdict> told;
  for (DurationMs idle : {600'000, 1'800'000, 3'600'000}) {
    core_->lifecycle().NoteGpuUse({Lifecycle::GpuReading{exempt, 1, idle, 0}}, told);
  }
  EXPECT_EQ(Stored(exempt).status, JobStatus::kRunning);
  auto events = store_->inner().GetEvents(exempt);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> idle_events;
  for (const JobEvent& e : *events) {
    if (e.reason.starts_with("idle GPUs")) idle_events.push_back(e.reason);
  }
  EXPECT_EQ(idle_events,
            (std::vector<std::string>{
                "idle GPUs: below 5% SM (mean 0.0% so far) for 10m; it will be reported once idle "
                "for 30m (exempt: data prep)",
                "idle GPUs: below 5% SM (mean 0.0% so far) for 30m; reported only (exempt: data "
                "prep)"}));
  auto audit = store_->inner().ListAudit(100);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(std::count_if(audit->begin(), audit->end(),
                          [&](const AuditRow& a) {
                            return a.action == "idle exempt" && a.by == "alice" &&
                                   a.target == "job " + std::to_string(exempt) &&
                                   a.detail == "data prep";
                          }),
            1);

  options_.idle_policies.cluster->exempt = false;
  Restart();
  SubmitRequest r;
  r.spec = spec;
  r.user = "alice";
  auto refused = core_->admission().Submit(std::move(r));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "idle_ok: the idle policy here allows no exemptions "
            "(below=5,warn=10m,act=30m,action=cancel,interactive_warn=10m,interactive_act=30m,"
            "exempt=no)");
}

}  // namespace
}  // namespace berth::testing
