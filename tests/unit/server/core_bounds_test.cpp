// The core's memory tracks live work, not history (issue "Bounded and least-privilege"): nothing
// is kept per submission once its jobs have ended.
#include <variant>
#include <vector>

#include "core_fixture.h"

namespace berth::testing {
namespace {

// 1,000 submissions, each cancelled: the core remembered every one's spec for its lifetime (13 KB
// per finished submission measured through the API). Now it keeps only specs some job still holds,
// and the expired entries are swept once they outnumber the live ones.
TEST_F(CoreTest, SpecsOfEndedSubmissionsAreForgotten) {
  Register("n1", 8);
  int64_t blocker = Submit(Spec(/*cpus=*/8));
  ASSERT_TRUE(core_->RunPass());
  Run("n1", blocker);
  int64_t live = Submit(Spec(/*cpus=*/8));  // waits for the blocker, holding its spec
  for (int i = 0; i < 1000; ++i) {
    int64_t id = Submit(Spec());
    CancelRequest cancel;
    cancel.ids = {id};
    cancel.user = "alice";
    ASSERT_TRUE(core_->Cancel(cancel).ok());
  }
  EXPECT_LE(core_->RememberedSpecsForTesting(), 130u);

  // The live job's spec is still at hand: placed once the blocker ended, it is sent with its
  // launch.
  ASSERT_TRUE(Report("n1", {Entry(blocker, 1, 0, proto::ReportEvent::kExited, 0)}).ok());
  ASSERT_TRUE(core_->RunPass());
  EXPECT_EQ(Stored(live).status, JobStatus::kStarting);
  bool spec_sent = false;
  for (const auto& s : channel_.sent()) {
    if (const auto* spec = std::get_if<proto::SpecMessage>(&s.message)) {
      spec_sent |= spec->id == Stored(live).spec_id;
    }
  }
  EXPECT_TRUE(spec_sent);
}

// 500 submissions wait at once, then are cancelled: their entries outlive them until the map has
// doubled again, pinning heap pages (bench/README.md, session 26). The sweep before an idle heap
// trim forgets them; the running job's spec stays.
TEST_F(CoreTest, TheIdleSweepForgetsTheSpecsOfABurst) {
  Register("n1", 8);
  int64_t blocker = Submit(Spec(/*cpus=*/8));
  ASSERT_TRUE(core_->RunPass());
  Run("n1", blocker);
  std::vector<int64_t> burst;
  for (int i = 0; i < 500; ++i) burst.push_back(Submit(Spec()));
  CancelRequest cancel;
  cancel.ids = burst;
  cancel.user = "alice";
  ASSERT_TRUE(core_->Cancel(cancel).ok());
  EXPECT_GT(core_->RememberedSpecsForTesting(), 500u);
  core_->ForgetUnheldSpecs();
  EXPECT_EQ(core_->RememberedSpecsForTesting(), 1u);  // the blocker's
}

// A spec the core forgot is read from the store again when a job needs it (a restart's jobs).
TEST_F(CoreTest, AForgottenSpecIsReadAgainFromTheStore) {
  Register("n1", 8);
  int64_t id = Submit(Spec());
  Restart();
  Register("n1", 8);
  ASSERT_TRUE(core_->RunPass());
  EXPECT_EQ(Stored(id).status, JobStatus::kStarting);
  EXPECT_GE(core_->RememberedSpecsForTesting(), 1u);
}

}  // namespace
}  // namespace berth::testing

namespace berth::testing {
namespace {

// `cancel --all` of 100,000 jobs was one commit under the state lock (0.8 s, with reports,
// heartbeats and submissions waiting). It is chunked as passes are: 250 jobs in chunks of 100 are
// three commits. A chunk whose commit fails ends the call (Unavailable, saying how many were
// cancelled); the same cancel again does the rest.
TEST_F(CoreTest, CancelAllIsCommittedInChunks) {
  options_.pass_commit_chunk = 100;
  Restart();
  Register("n1", 8);
  SubmitRequest sweep{.spec = Spec(), .user = "alice", .count = 250, .as_group = true};
  ASSERT_TRUE(core_->Submit(std::move(sweep)).ok());
  const int writes = store_->writes();
  CancelRequest all{.all = true, .user = "alice"};
  store_->FailWriteNumber(2);
  auto partial = core_->Cancel(all);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.status().code(), Code::kUnavailable);
  EXPECT_NE(partial.status().message().find("100 job(s) were cancelled"), std::string::npos)
      << partial.status().message();
  EXPECT_EQ(core_->DurableState(), FreshDurableState());
  auto rest = core_->Cancel(all);
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  EXPECT_EQ(rest->cancelled.size(), 150u);
  EXPECT_EQ(store_->writes() - writes, 2 + 2);  // two chunks, one failed; then two chunks
  auto rows = store_->inner().ListJobs(JobQuery{.all = true, .limit = 1000});
  ASSERT_TRUE(rows.ok());
  for (const JobRow& row : *rows) EXPECT_EQ(row.status, JobStatus::kCancelled) << row.id;
  EXPECT_EQ(core_->DurableState(), FreshDurableState());
}

}  // namespace
}  // namespace berth::testing
