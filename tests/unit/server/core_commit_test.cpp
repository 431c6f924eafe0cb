// Commit, then apply, then send: for every kind of change, a store write that fails leaves the
// core exactly as it was (and equal to what a fresh server loads from the store), sends nothing,
// and answers Unavailable; the same call made again then works. Each test is named after what broke
// before the core was built this way.
#include <gtest/gtest.h>

#include <thread>

#include "core_fixture.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

// Node n1 has 2 V100s. Job 1 (priority 0) holds both and runs. Job 2 (priority 10) needs both: the
// pass preempts job 1 (requeued) and places job 2, to launch once job 1's process is gone. The
// first time, the pass's commit fails.
TEST_F(CoreTest, PassWithPreemptionWhoseCommitFailsLeavesVictimRunningAndSendsNothing) {
  Register("n1", 8, 2);
  int64_t low = Submit(Spec(1, 2, 0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", low);
  int64_t high = Submit(Spec(1, 2, 10));
  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();

  store_->FailWrites(1);
  EXPECT_FALSE(core_->scheduling().RunPass());
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent) << "a stop or launch left before the commit";
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  EXPECT_EQ(Stored(low).status, JobStatus::kRunning);
  EXPECT_EQ(Stored(high).attempt, 0);

  // Retried: job 1 is requeued and told to stop; job 2 is placed (attempt 1) but not launched.
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(low).status, JobStatus::kPending);
  EXPECT_EQ(Stored(high).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(high).attempt, 1);
  ASSERT_EQ(channel_.Stops("n1").size(), 1u);
  EXPECT_EQ(channel_.Stops("n1")[0].job, low);
  EXPECT_EQ(channel_.Stops("n1")[0].attempt, 1);
  EXPECT_EQ(channel_.Launches("n1").size(), 1u) << "only job 1's launch so far";

  // Job 1's process is gone: job 2 launches, attempt 1.
  ASSERT_TRUE(Report("n1", {Entry(low, 1, 0, ReportEvent::kExited, 143)}).ok());
  auto launches = channel_.Launches("n1");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].job, high);
  EXPECT_EQ(launches[1].attempt, 1);
}

// Job 1 runs on n1; its agent reports the exit, but the commit fails. Before, the job ended in
// memory only, and the agent's retry was told "already terminal": the store kept it RUNNING.
TEST_F(CoreTest, ReportBatchWhoseCommitFailsIsAppliedWhenRetried) {
  Register("n1");
  int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();

  store_->FailWrites(1);
  auto failed = Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 0)});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());

  auto retried = Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 0)});
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ((*retried)[0].action, proto::ReportAction::kOk);
  EXPECT_EQ(Stored(job).status, JobStatus::kSucceeded);
  EXPECT_EQ(Stored(job).exit_code, 0);
}

// A batch of three reports whose middle one cannot be read: before, the whole batch got a 400
// after the first report had already changed memory. Now the bad entry is answered on its own and
// the others are applied.
TEST_F(CoreTest, ReportBatchWithABadEntryAnswersItAndAppliesTheRest) {
  Register("n1");
  int64_t a = Submit(Spec());
  int64_t b = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", a);
  Run("n1", b);
  proto::ReportEntry bad{{b, 1, 0}, Status::Invalid("report: 'event' must be a string")};
  auto results = Report("n1", {Entry(a, 1, 0, ReportEvent::kExited, 0), bad,
                               Entry(b, 1, 0, ReportEvent::kExited, 3)});
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 3u);
  EXPECT_EQ((*results)[0].action, proto::ReportAction::kOk);
  EXPECT_EQ((*results)[1].action, proto::ReportAction::kError);
  EXPECT_EQ((*results)[1].error, "report: 'event' must be a string");
  EXPECT_EQ((*results)[2].action, proto::ReportAction::kOk);
  EXPECT_EQ(Stored(a).status, JobStatus::kSucceeded);
  EXPECT_EQ(Stored(b).status, JobStatus::kFailed);
}

// Cancelling a pending and a running job when the commit fails: both stay as they were, and the
// running job's agent is not told to stop it.
TEST_F(CoreTest, CancelWhoseCommitFailsStopsNothing) {
  Register("n1", 1);
  int64_t running = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", running);
  int64_t pending = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();

  store_->FailWrites(1);
  CancelRequest cancel;
  cancel.ids = {running, pending};
  cancel.user = "alice";
  auto failed = core_->admission().Cancel(cancel);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());

  auto done = core_->admission().Cancel(cancel);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->cancelled.size(), 2u);
  ASSERT_EQ(channel_.Stops("n1").size(), 1u);
  EXPECT_EQ(channel_.Stops("n1")[0].job, running);
}

// `cancel --all` bumps the cancel epoch that catches in-flight submissions; a failed commit must
// not leave it bumped (or a later submission of the user would be cancelled at once).
TEST_F(CoreTest, CancelAllWhoseCommitFailsCancelsNoLaterSubmission) {
  Register("n1");
  Submit(Spec());
  store_->FailWrites(1);
  CancelRequest cancel;
  cancel.all = true;
  cancel.user = "alice";
  ASSERT_FALSE(core_->admission().Cancel(cancel).ok());
  int64_t later = Submit(Spec());
  EXPECT_EQ(Stored(later).status, JobStatus::kPending);
}

// A submission is committed but not yet applied when its owner cancels it by id: the cancel
// found it in the store only and answered "already finished", and the job ran. Now it is
// cancelled: the cancel is owed to the submission's apply.
TEST_F(CoreTest, ACancelOfAJustCommittedSubmissionIsHonoured) {
  Register("n1");
  store_->HoldAfterSubmit(true);
  Result<SubmitAnswer> submitted = Status::Internal("not run");
  std::thread submitter(
      [&] { submitted = core_->admission().Submit({.spec = Spec(), .user = "alice"}); });
  while (store_->held_after_submit() < 1) std::this_thread::yield();
  auto rows = store_->inner().ListJobs(JobQuery{.all = true});
  ASSERT_TRUE(rows.ok() && rows->size() == 1u);
  const int64_t id = rows->front().id;
  CancelRequest cancel{.ids = {id}, .user = "bob"};  // not his: refused as ever
  auto refused = core_->admission().Cancel(cancel);
  ASSERT_TRUE(refused.ok()) << refused.status().message();
  EXPECT_EQ(refused->forbidden, std::vector<int64_t>{id});
  cancel.user = "alice";
  auto answer = core_->admission().Cancel(cancel);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer->cancelled, std::vector<int64_t>{id});
  EXPECT_TRUE(answer->already_finished.empty());
  store_->HoldAfterSubmit(false);
  submitter.join();
  ASSERT_TRUE(submitted.ok());
  EXPECT_EQ(Stored(id).status, JobStatus::kCancelled);
  EXPECT_EQ(Stored(id).reason, "cancelled by alice");
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_TRUE(channel_.Launches("n1").empty());
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// A submission in flight when its user ran `cancel --all` is cancelled by a second commit. That
// commit failed and was only logged: the jobs then ran although the user was told all were
// cancelled. Now the cancel is owed: the job is never placed, and the cancel is retried (by the
// housekeeping tick) until it is committed.
TEST_F(CoreTest, AnInFlightSubmissionsCancelWhoseCommitFailsIsRetriedUntilCommitted) {
  Register("n1");
  store_->HoldWrites(true);
  Result<SubmitAnswer> submitted = Status::Internal("not run");
  std::thread submitter(
      [&] { submitted = core_->admission().Submit({.spec = Spec(), .user = "alice"}); });
  while (store_->held_writes() < 1) std::this_thread::yield();
  CancelRequest all{.all = true, .user = "alice"};
  ASSERT_TRUE(
      core_->admission().Cancel(all).ok());  // writes nothing (no job yet), so it is not held
  store_->FailWriteNumber(2);  // the submission commits; the cancel that follows fails
  store_->HoldWrites(false);
  submitter.join();
  ASSERT_TRUE(submitted.ok()) << submitted.status().message();
  const int64_t id = submitted->ids.front();
  EXPECT_EQ(Stored(id).status, JobStatus::kPending);
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_TRUE(channel_.Launches("n1").empty()) << "an owed cancel's job was placed";
  EXPECT_NE(core_->reads().DebugState().find("owed cancels: " + std::to_string(id)),
            std::string::npos);
  store_->FailWrites(1);
  core_->lifecycle().RetryFailedCancels();  // the retry fails too: still owed
  EXPECT_EQ(Stored(id).status, JobStatus::kPending);
  core_->lifecycle().RetryFailedCancels();
  EXPECT_EQ(Stored(id).status, JobStatus::kCancelled);
  EXPECT_NE(core_->reads().DebugState().find("owed cancels:\n"), std::string::npos);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

TEST_F(CoreTest, DrainWhoseCommitFailsLeavesTheNodeSchedulable) {
  Register("n1");
  std::string before = core_->reads().DebugState();
  store_->FailWrites(1);
  auto failed = core_->agents().Drain("n1", true);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
}

// An agent re-registers (new session) but the commit fails: the old session stays valid, nothing
// was opened or resent, and the node's row is unchanged.
TEST_F(CoreTest, RegisterWhoseCommitFailsKeepsTheOldSession) {
  std::string session = Register("n1", 8);
  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();
  store_->FailWrites(1);
  proto::RegisterRequest again;
  again.name = "n1";
  again.node_id = "node-id-of-n1";
  again.cpus_milli = 16'000;  // it says it grew
  again.memory_mib = 1024;
  auto failed = core_->agents().Register(again, "127.0.0.1");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent);
  EXPECT_TRUE(core_->agents().Heartbeat("n1", session).ok());
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// n1's lease runs out while job 1 runs there; recording that fails. The node stays up (in memory
// as in the store) and the job running; the next check records both.
TEST_F(CoreTest, LeaseExpiryWhoseCommitFailsIsRecordedAtTheNextCheck) {
  Register("n1");
  int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.Advance(options_.lease_ms + 1);
  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();
  store_->FailWrites(1);
  core_->agents().CheckLeases();
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  core_->agents().CheckLeases();
  EXPECT_EQ(Stored(job).status, JobStatus::kLost);
  EXPECT_EQ(channel_.closes(), std::vector<std::string>{"n1"});
}

// Job 1's time limit passes; recording its end fails. It keeps running (in memory as in the store),
// nothing is sent, and the next check ends it.
TEST_F(CoreTest, TimeLimitCheckWhoseCommitFailsIsRecordedAtTheNextCheck) {
  Register("n1");
  JobSpec spec = Spec();
  spec.time_limit = 60'000;
  int64_t job = Submit(spec);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  clock_.Advance(60'001);
  std::string before = core_->reads().DebugState();
  size_t sent = channel_.count();
  store_->FailWrites(1);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(channel_.count(), sent) << "a stop left before the commit";
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning);
  core_->lifecycle().CheckTimeLimits();
  EXPECT_EQ(Stored(job).status, JobStatus::kFailed);
  EXPECT_EQ(channel_.Stops("n1").size(), 1u);
}

// Job 1 was cancelled on n1 and its process was still stopping when the server restarted. n1's
// agent registers, still running it: the new server holds the job's resources until it is gone.
// The first registration's commit fails: nothing is held and no session opened; the retry holds.
TEST_F(CoreTest, ARegistrationThatHoldsEndedAttemptsWhoseCommitFailsHoldsNothing) {
  Register("n1", 8);
  int64_t job = Submit(Spec(/*cpus=*/8));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  CancelRequest cancel{.ids = {job}, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  Restart();
  std::string before = core_->reads().DebugState();
  proto::RegisterRequest r;
  r.name = "n1";
  r.node_id = "node-id-of-n1";
  r.cpus_milli = 8000;
  r.memory_mib = 64 * 1024;
  r.running = {{job, 1, 0}};
  store_->FailWrites(1);
  auto failed = core_->agents().Register(r, "127.0.0.1");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_EQ(core_->reads().DebugState(), before);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  ASSERT_TRUE(core_->agents().Register(r, "127.0.0.1").ok());
  EXPECT_EQ(core_->reads().Nodes().front().cpus_used, 8000) << "the stopping job's CPUs are held";
  EXPECT_EQ(Stored(job).status, JobStatus::kCancelled);
}

TEST_F(CoreTest, SubmitWhoseCommitFailsKeepsNothing) {
  Register("n1");
  store_->FailWrites(1);
  SubmitRequest r;
  r.spec = Spec();
  r.user = "alice";
  auto failed = core_->admission().Submit(std::move(r));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  auto listed = store_->inner().ListJobs(JobQuery{.all = true});
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
}

// A pass whose first chunk commits and whose second fails: the first chunk's jobs are placed and
// launched, the second's stay pending with a reason, and nothing of the second was sent.
TEST_F(CoreTest, PassCommitsInChunksAndAFailedChunkLeavesItsJobsPending) {
  options_.pass_commit_chunk = 2;
  core_ = std::make_unique<Core>(options_, *store_, clock_, channel_);
  ASSERT_TRUE(core_->Load().ok());
  Register("n1", 8);
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(Submit(Spec(1)));
  store_->FailWriteNumber(2);
  EXPECT_FALSE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(jobs[0]).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(jobs[1]).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(jobs[2]).status, JobStatus::kPending);
  EXPECT_EQ(Stored(jobs[3]).status, JobStatus::kPending);
  EXPECT_EQ(channel_.Launches().size(), 2u);
  EXPECT_NE(core_->reads().WaitingReason(jobs[2]).find("could not record"), std::string::npos);
  EXPECT_EQ(core_->reads().DurableState(), FreshDurableState());
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(channel_.Launches().size(), 4u);
}

}  // namespace
}  // namespace berth::testing
