// The core's memory tracks live work, not history (issue "Bounded and least-privilege"): nothing
// is kept per submission once its jobs have ended.
#include <variant>

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
