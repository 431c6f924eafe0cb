// Pipelines in the server core, against fakes: dependencies cancel and release their dependants
// (all or nothing when the commit fails), restarts go back to the queue and wait out their backoff,
// a gang restarts together, preemptions and lost supervisors do not use up restarts, and a group's
// max_running holds. Each state is compared with what a fresh server loads from the store.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core_fixture.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

Dependency After(DependencyKind kind, std::vector<int64_t> ids, bool groups = false) {
  return Dependency{kind, groups, std::move(ids)};
}

class PipelineCoreTest : public CoreTest {
 protected:
  // A bulk group of `count` jobs of `spec`; returns (group, ids).
  std::pair<int64_t, std::vector<int64_t>> SubmitGroup(JobSpec spec, int count,
                                                       const std::string& user = "alice") {
    SubmitRequest r;
    r.spec = std::move(spec);
    r.user = user;
    r.count = count;
    r.as_group = true;
    auto answer = core_->admission().Submit(std::move(r));
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    if (!answer.ok()) return {0, {}};
    return {*answer->group, answer->ids};
  }

  Result<SubmitAnswer> TrySubmit(JobSpec spec, const std::string& user = "alice") {
    SubmitRequest r;
    r.spec = std::move(spec);
    r.user = user;
    return core_->admission().Submit(std::move(r));
  }

  int Placed(const std::vector<int64_t>& jobs) {
    int n = 0;
    for (int64_t id : jobs) n += IsActive(Stored(id).status);
    return n;
  }
};

// prep runs; a sweep group waits for it (ok) and eval for the whole sweep. prep fails, and the
// first time the commit fails: nothing is cancelled, nothing sent. Then the cascade: every sweep
// job and eval end CANCELLED, naming the dependency.
TEST_F(PipelineCoreTest, AFailedDependencyCancelsTheChainAllOrNothing) {
  Register("n1", 8);
  int64_t prep = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", prep);
  JobSpec sweep_spec = Spec();
  sweep_spec.depends_on = {After(DependencyKind::kOk, {prep})};
  auto [sweep, sweep_jobs] = SubmitGroup(sweep_spec, 3);
  JobSpec eval_spec = Spec();
  eval_spec.depends_on = {After(DependencyKind::kOk, {sweep}, true)};
  int64_t eval = Submit(eval_spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Placed(sweep_jobs), 0) << "placed before its dependency held";
  EXPECT_EQ(core_->reads().WaitingReason(sweep_jobs[0]),
            fmt::format("waiting for job {} (RUNNING)", prep));
  EXPECT_EQ(core_->reads().WaitingReason(eval),
            fmt::format("waiting for group {} (0 of 3 jobs ended)", sweep));
  metrics::ExpositionWriter gauges;
  core_->reads().WriteGauges(gauges);
  EXPECT_NE(gauges.Take().find(R"(berth_pending_jobs{reason="dependency",user="",team=""} 4)"),
            std::string::npos);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());

  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();
  store_->FailWrites(1);
  ASSERT_FALSE(Report("n1", {Entry(prep, 1, 0, ReportEvent::kExited, 3)}).ok());
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());

  ASSERT_TRUE(Report("n1", {Entry(prep, 1, 0, ReportEvent::kExited, 3)}).ok());
  for (int64_t id : sweep_jobs) {
    EXPECT_EQ(Stored(id).status, JobStatus::kCancelled);
    EXPECT_EQ(Stored(id).reason, fmt::format("dependency {} failed", prep));
  }
  EXPECT_EQ(Stored(eval).status, JobStatus::kCancelled);
  EXPECT_EQ(Stored(eval).reason, fmt::format("dependency group {} failed (job {} was cancelled)",
                                             sweep, sweep_jobs.front()));
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// A dependency that succeeds releases its dependants, which a pass then places; a notok
// dependant of the same job is cancelled.
TEST_F(PipelineCoreTest, ASucceededDependencyReleasesOkAndCancelsNotOk) {
  Register("n1", 8);
  int64_t prep = Submit(Spec());
  JobSpec ok = Spec();
  ok.depends_on = {After(DependencyKind::kOk, {prep})};
  int64_t next = Submit(ok);
  JobSpec notok = Spec();
  notok.depends_on = {After(DependencyKind::kNotOk, {prep})};
  int64_t alarm = Submit(notok);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", prep);
  ASSERT_TRUE(Report("n1", {Entry(prep, 1, 0, ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(Stored(alarm).status, JobStatus::kCancelled);
  EXPECT_EQ(Stored(alarm).reason,
            fmt::format("dependency notok:{} can no longer hold: job {} succeeded", prep, prep));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kStarting);
}

// A dependency on jobs that ended long ago, and on a group whose jobs all ended: the store is read
// once, before the state lock (it was read under the lock twice, at the check and at the apply, a
// round trip each on PostgreSQL while every report and submission waited). The conditions are the
// same: the jobs are released at once.
TEST_F(PipelineCoreTest, DependenciesThatEndedAreReadBeforeTheLock) {
  Register("n1", 8);
  int64_t prep = Submit(Spec());
  auto [group, members] = SubmitGroup(Spec(), 2);
  ASSERT_TRUE(core_->scheduling().RunPass());
  for (int64_t id : {prep, members[0], members[1]}) {
    Run("n1", id);
    ASSERT_TRUE(Report("n1", {Entry(id, 1, 0, ReportEvent::kExited, 0)}).ok());
  }
  JobSpec after = Spec();
  after.depends_on = {After(DependencyKind::kOk, {prep}),
                      After(DependencyKind::kOk, {group}, /*groups=*/true)};
  const int reads = store_->get_jobs_calls();
  int64_t next = Submit(after);
  EXPECT_EQ(store_->get_jobs_calls() - reads, 1);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kStarting);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// Unknown jobs, other users' jobs and dependencies that can never hold are refused at submit.
TEST_F(PipelineCoreTest, SubmitRefusesDependenciesThatCannotWork) {
  Register("n1", 8);
  int64_t bobs = Submit(Spec(), "bob");
  JobSpec unknown = Spec();
  unknown.depends_on = {After(DependencyKind::kOk, {bobs + 100})};
  auto refused = TrySubmit(unknown);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kNotFound);
  EXPECT_NE(refused.status().message().find("does not exist"), std::string::npos);

  JobSpec theirs = Spec();
  theirs.depends_on = {After(DependencyKind::kAny, {bobs})};
  refused = TrySubmit(theirs);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kForbidden);
  EXPECT_NE(refused.status().message().find("belongs to bob"), std::string::npos);
  SubmitRequest operator_request;
  operator_request.spec = theirs;
  operator_request.user = "ops";
  operator_request.depend_on_any = true;
  EXPECT_TRUE(core_->admission().Submit(std::move(operator_request)).ok());

  CancelRequest cancel;
  cancel.ids = {bobs};
  cancel.user = "bob";
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  JobSpec never = Spec();
  never.depends_on = {After(DependencyKind::kOk, {bobs})};
  refused = TrySubmit(never, "bob");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            fmt::format("this job could never start: dependency {} was cancelled", bobs));
}

// A restart whose commit fails leaves the job as it was; retried, the job is PENDING again with
// one restart counted, its attempt recorded FAILED with the exit code, and it waits out the
// backoff before a pass places attempt 2.
TEST_F(PipelineCoreTest, ARestartWaitsOutItsBackoffAndAFailedCommitKeepsNothing) {
  Register("n1", 8);
  JobSpec spec = Spec();
  spec.retry.max_restarts = 2;
  spec.retry.on_exit_codes = {75};
  spec.retry.backoff = 30'000;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  std::string before = core_->reads().DebugState();
  store_->FailWrites(1);
  ASSERT_FALSE(Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 75)}).ok());
  EXPECT_EQ(core_->reads().DebugState(), before);

  ASSERT_TRUE(Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 75)}).ok());
  JobRow row = Stored(job);
  EXPECT_EQ(row.status, JobStatus::kPending);
  EXPECT_EQ(row.restarts, 1);
  EXPECT_EQ(row.not_before, clock_.Now() + 30'000);
  auto attempts = store_->inner().GetAttempts(job);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].outcome, JobStatus::kFailed);
  EXPECT_EQ((*attempts)[0].exit_code, 75);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());

  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kPending) << "placed during its backoff";
  clock_.Advance(30'001);
  EXPECT_TRUE(core_->scheduling().WaitForPassRequest(0))
      << "the end of the backoff asks for a pass";
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(job).attempt, 2);

  // Another code is not retried; the job ends FAILED.
  Run("n1", job, 2);
  ASSERT_TRUE(Report("n1", {Entry(job, 2, 0, ReportEvent::kExited, 1)}).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kFailed);
  EXPECT_EQ(Stored(job).restarts, 1);
}

// An attempt the kernel killed for its memory limit (the supervisor's reason says so) ends FAILED
// with a reason naming the rank, node and limit, and is counted; it is not restarted although
// on_exit_codes lists 137 (it would only run out again), unless the task sets retry.on_oom.
TEST_F(PipelineCoreTest, OutOfMemoryIsAnOutcomeRestartedOnlyWithOnOom) {
  Register("n1", 8);
  auto oom_exit = [&](int64_t job, int attempt) {
    proto::ReportEntry e = Entry(job, attempt, 0, ReportEvent::kExited, 137);
    e.report->reason =
        "out of memory: reached its limit of 256 MiB (resources.memory); the kernel killed it";
    return e;
  };
  JobSpec spec = Spec();
  spec.retry.max_restarts = 2;
  spec.retry.on_exit_codes = {137};
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  ASSERT_TRUE(Report("n1", {oom_exit(job, 1)}).ok());
  JobRow row = Stored(job);
  EXPECT_EQ(row.status, JobStatus::kFailed);
  EXPECT_EQ(row.restarts, 0);
  EXPECT_EQ(row.exit_code, 137);
  EXPECT_EQ(row.reason,
            "out of memory: rank 0 on n1 reached its limit of 256 MiB (resources.memory); the "
            "kernel killed it (exit code 137); not restarted: retry.on_oom is not set");
  EXPECT_TRUE(IsOutOfMemory(row.reason));
  EXPECT_EQ(core_->metrics().out_of_memory.Value({}), 1);

  spec.retry.on_oom = true;
  int64_t again = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", again);
  ASSERT_TRUE(Report("n1", {oom_exit(again, 1)}).ok());
  EXPECT_EQ(Stored(again).status, JobStatus::kPending);
  EXPECT_EQ(Stored(again).restarts, 1);
  EXPECT_EQ(core_->metrics().out_of_memory.Value({}), 2);
}

// What the ranks used, as their exits reported it, lands on the attempt: the highest peak memory of
// a rank and the CPU time of all ranks.
TEST_F(PipelineCoreTest, AnAttemptKeepsWhatItsRanksUsed) {
  Register("n1", 4);
  Register("n2", 4);
  int64_t job = Submit(Spec(4, 0, 0, 2));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job, 1, 0);
  Run("n2", job, 1, 1);
  auto exit = [&](int rank, int64_t peak, int64_t cpu) {
    proto::ReportEntry e = Entry(job, 1, rank, ReportEvent::kExited, 0);
    e.report->peak_memory_bytes = peak;
    e.report->cpu_ms = cpu;
    return e;
  };
  clock_.Advance(10'000);
  ASSERT_TRUE(Report("n1", {exit(0, 300 << 20, 1200)}).ok());
  ASSERT_TRUE(Report("n2", {exit(1, 500 << 20, 800)}).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kSucceeded);
  auto attempts = store_->inner().GetAttempts(job);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].peak_memory_bytes, 500 << 20);
  EXPECT_EQ((*attempts)[0].cpu_ms, 2000);
  // ... and in the usage rollup, for `berth usage`'s efficiency.
  auto usage = store_->inner().QueryUsage(UsageQuery{0, clock_.Now() + 3'600'000, false});
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].used_cpu_seconds, 2.0);
  EXPECT_EQ((*usage)[0].measured_cpu_seconds, 4 * 2 * 10.0);  // 4 CPUs on each of 2 nodes, 10 s
}

// A gang's rank 1 fails: rank 0 is told to stop, the job goes back to the queue, and its
// resources stay held until rank 0 is gone; then both ranks start again as attempt 2.
TEST_F(PipelineCoreTest, AGangRestartsEveryRankTogether) {
  Register("n1", 4);
  Register("n2", 4);
  JobSpec spec = Spec(4, 0, 0, 2);
  spec.retry.max_restarts = 1;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job, 1, 0);
  Run("n2", job, 1, 1);
  ASSERT_TRUE(Report("n2", {Entry(job, 1, 1, ReportEvent::kExited, 9)}).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);
  ASSERT_EQ(channel_.Stops("n1").size(), 1u);
  EXPECT_EQ(channel_.Stops("n1")[0].attempt, 1);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kPending) << "placed while rank 0 still runs";
  ASSERT_TRUE(Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 143)}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  JobRow row = Stored(job);
  EXPECT_EQ(row.status, JobStatus::kStarting);
  EXPECT_EQ(row.attempt, 2);
  EXPECT_EQ(row.placement.size(), 2u);
}

// A preemption requeues without using a restart; a lost supervisor ends the job without one.
TEST_F(PipelineCoreTest, PreemptionsAndLostSupervisorsAreNotRestarts) {
  Register("n1", 8, 2);
  JobSpec low = Spec(1, 2, 0);
  low.retry.max_restarts = 3;
  int64_t victim = Submit(low);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", victim);
  int64_t high = Submit(Spec(1, 2, 10));
  ASSERT_TRUE(core_->scheduling().RunPass());
  JobRow row = Stored(victim);
  EXPECT_EQ(row.status, JobStatus::kPending);
  EXPECT_EQ(row.restarts, 0);
  EXPECT_EQ(row.preemptions, 1);
  ASSERT_TRUE(Report("n1", {Entry(victim, 1, 0, ReportEvent::kExited, 143)}).ok());
  Run("n1", high);
  ASSERT_TRUE(Report("n1", {Entry(high, 1, 0, ReportEvent::kExited, 0)}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", victim, 2);
  ASSERT_TRUE(Report("n1", {Entry(victim, 2, 0, ReportEvent::kExited, 137, "supervisor")}).ok());
  row = Stored(victim);
  EXPECT_EQ(row.status, JobStatus::kFailed);
  EXPECT_EQ(row.restarts, 0);
}

// `retry: never`: a preempted job ends PREEMPTED rather than going back to the queue, although its
// recovery says requeue (the default).
TEST_F(PipelineCoreTest, RetryNeverEndsAPreemptedJob) {
  Register("n1", 8, 2);
  JobSpec low = Spec(1, 2, 0);
  low.retry.never = true;
  int64_t victim = Submit(low);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", victim);
  Submit(Spec(1, 2, 10));
  ASSERT_TRUE(core_->scheduling().RunPass());
  JobRow row = Stored(victim);
  EXPECT_EQ(row.status, JobStatus::kPreempted);
  EXPECT_EQ(row.preemptions, 0);
}

// time_limit_scope: job counts the running time of earlier attempts.
TEST_F(PipelineCoreTest, AJobScopedTimeLimitSumsItsAttempts) {
  Register("n1", 8);
  JobSpec spec = Spec();
  spec.time_limit = 10'000;
  spec.time_limit_scope = TimeLimitScope::kJob;
  spec.retry.max_restarts = 5;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.Advance(6'000);
  ASSERT_TRUE(Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 1)}).ok());
  EXPECT_EQ(Stored(job).run_ms, 6'000);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job, 2);
  auto launches = channel_.Launches("n1");
  ASSERT_EQ(launches.size(), 2u);
  clock_.Advance(3'000);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning) << "9 s of 10";
  clock_.Advance(1'500);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kFailed);
  EXPECT_EQ(Stored(job).reason, "time limit 10s exceeded (over 2 attempts)");
}

// The warning signal's delay is what is left of the limit minus `before`.
TEST_F(PipelineCoreTest, TheLaunchCarriesTheWarningSignal) {
  Register("n1", 8);
  JobSpec spec = Spec();
  spec.time_limit = 60'000;
  spec.signal = WarnSignal{10, "USR1", 15'000};
  Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  auto launches = channel_.Launches("n1");
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].warn_signal, 10);
  EXPECT_EQ(launches[0].warn_after_ms, 45'000);
}

// A group capped at 2: passes place 2; raising the cap (whose first commit fails, changing
// nothing) lets 2 more start; the cap survives a restart.
TEST_F(PipelineCoreTest, MaxRunningCapsAGroupAndCanBeRaised) {
  Register("n1", 16);
  JobSpec spec = Spec();
  spec.max_running = 2;
  auto [group, jobs] = SubmitGroup(spec, 6);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Placed(jobs), 2);
  EXPECT_EQ(core_->reads().WaitingReason(jobs[5]),
            fmt::format("waiting: group {} is at its max_running (2 of its jobs placed, at most 2)",
                        group));
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());

  std::string before = core_->reads().DebugState();
  store_->FailWrites(1);
  EXPECT_EQ(core_->admission().SetGroupLimit(group, 4, "alice", false).code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(core_->admission().SetGroupLimit(group, 4, "bob", false).code(), Code::kForbidden);
  ASSERT_TRUE(core_->admission().SetGroupLimit(group, 4, "alice", false).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Placed(jobs), 4);
  EXPECT_EQ(core_->admission().GroupLimit(group), 4);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

}  // namespace
}  // namespace berth::testing

namespace berth::testing {
namespace {

// Review findings, each a test. After a restart, a job that ran once (its dependency met) and goes
// back to the queue is placed again: the fresh server keeps no waiter for it.
TEST_F(PipelineCoreTest, ADependantRequeuedAfterARestartRunsAgain) {
  Register("n1", 8);
  int64_t prep = Submit(Spec());
  JobSpec spec = Spec();
  spec.depends_on = {After(DependencyKind::kOk, {prep})};
  spec.retry.max_restarts = 1;
  int64_t next = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", prep);
  ASSERT_TRUE(Report("n1", {Entry(prep, 1, 0, ReportEvent::kExited, 0)}).ok());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", next);

  Restart();
  Register("n1", 8);
  Run("n1", next);
  ASSERT_TRUE(Report("n1", {Entry(next, 1, 0, ReportEvent::kExited, 2)}).ok());
  EXPECT_EQ(Stored(next).status, JobStatus::kPending);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(next).attempt, 2);
}

// A server starts and finds a waiting job whose dependency has failed (its cancel was never
// recorded); the commit of that cancel fails too. The job stays pending and waits, and the next
// housekeeping cancels it.
TEST_F(PipelineCoreTest, CancelsThatCouldNotBeCommittedAreRetried) {
  Register("n1", 8);
  int64_t prep = Submit(Spec());
  JobSpec spec = Spec();
  spec.depends_on = {After(DependencyKind::kOk, {prep})};
  int64_t next = Submit(spec);
  // prep failed, as the store has it, without the cascade (as a crash between the two would).
  JobRow failed = Stored(prep);
  failed.status = JobStatus::kFailed;
  failed.ended_at = clock_.Now();
  Batch batch;
  batch.jobs.push_back(failed);
  ASSERT_TRUE(store_->inner().Commit(batch).ok());

  store_->FailWrites(1);
  Restart();
  EXPECT_EQ(Stored(next).status, JobStatus::kPending);
  Register("n1", 8);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(next).status, JobStatus::kPending) << "placed although its dependency failed";
  core_->lifecycle().RetryFailedCancels();
  EXPECT_EQ(Stored(next).status, JobStatus::kCancelled);
  EXPECT_EQ(Stored(next).reason, fmt::format("dependency {} failed", prep));
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// A chain of 3,000 jobs, each waiting for the one before: the head fails, and the whole chain is
// cancelled in one commit without recursing once per link.
TEST_F(PipelineCoreTest, ALongChainIsCancelledWithoutDeepRecursion) {
  Register("n1", 8);
  int64_t head = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", head);
  int64_t last = head;
  for (int i = 0; i < 3000; ++i) {
    JobSpec spec = Spec();
    spec.depends_on = {After(DependencyKind::kOk, {last})};
    last = Submit(spec);
  }
  ASSERT_TRUE(Report("n1", {Entry(head, 1, 0, ReportEvent::kExited, 1)}).ok());
  EXPECT_EQ(Stored(last).status, JobStatus::kCancelled);
  EXPECT_EQ(Stored(last).reason, fmt::format("dependency {} was cancelled", last - 1));
}

// A group's limit is forgotten with its last job, and a limit set on a finished group is only
// stored.
TEST_F(PipelineCoreTest, AGroupLimitGoesWithTheGroup) {
  Register("n1", 8);
  JobSpec spec = Spec();
  spec.max_running = 1;
  auto [group, jobs] = SubmitGroup(spec, 1);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", jobs[0]);
  EXPECT_EQ(core_->admission().GroupLimit(group), 1);
  ASSERT_TRUE(Report("n1", {Entry(jobs[0], 1, 0, ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(core_->admission().GroupLimit(group), std::nullopt);
  ASSERT_TRUE(core_->admission().SetGroupLimit(group, 5, "alice", false).ok());
  EXPECT_EQ(core_->admission().GroupLimit(group), std::nullopt);
  EXPECT_EQ(core_->reads().DebugState().find("group "), std::string::npos);
}

}  // namespace
}  // namespace berth::testing
