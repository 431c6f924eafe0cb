// Per-job bookkeeping is one observer of the job table (server/core/job_table.h): one added here
// hears every job enter and leave the core's memory — submitted, loaded at a restart, held again
// after one, undone when a commit fails, reaped once over — without any other change to the core.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core_fixture.h"

namespace berth::testing {
namespace {

// Counts each job's entries and exits; the jobs in memory are those in more often than out.
class Ledger : public JobTable::Observer {
 public:
  void Entered(ActiveJob& job) override { ++in[job.row.id]; }
  void Left(ActiveJob& job) override { ++out[job.row.id]; }
  std::set<int64_t> InMemory() const {
    std::set<int64_t> ids;
    for (const auto& [id, n] : in) {
      auto gone = out.find(id);
      EXPECT_LE(n - (gone == out.end() ? 0 : gone->second), 1) << "job " << id;
      if (n > (gone == out.end() ? 0 : gone->second)) ids.insert(id);
    }
    return ids;
  }
  std::map<int64_t, int> in, out;
};

TEST_F(CoreTest, AnObserverHearsEveryJobEnterAndLeaveAcrossSubmitLoadUndoAndReap) {
  Ledger first;
  core_->AddJobObserver(&first);
  Register("n1", 8);
  const int64_t runs = Submit(Spec(/*cpus=*/8));
  const int64_t waits = Submit(Spec(/*cpus=*/8));
  const int64_t quick = Submit(Spec(/*cpus=*/1));
  EXPECT_EQ(first.InMemory(), (std::set<int64_t>{runs, waits, quick}));  // submitted
  CancelRequest cancel_waiting{.ids = {waits, quick}, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel_waiting).ok());
  EXPECT_EQ(first.InMemory(), (std::set<int64_t>{runs})) << "reaped once over";
  EXPECT_EQ(first.out[waits], 1);
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", runs);
  CancelRequest cancel{.ids = {runs}, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  EXPECT_EQ(first.InMemory(), (std::set<int64_t>{runs})) << "still stopping: still in memory";
  const int64_t later = Submit(Spec(/*cpus=*/1));

  // A restart: the new core loads the pending job, not the one over; then n1 says it still runs
  // that one. The first registration's commit fails: it enters, and leaves with the undo.
  core_ = std::make_unique<Core>(options_, *store_, clock_, channel_);
  Ledger second;
  core_->AddJobObserver(&second);
  ASSERT_TRUE(core_->Load().ok());
  EXPECT_EQ(second.InMemory(), (std::set<int64_t>{later})) << "loaded";
  proto::RegisterRequest r = Registration("n1", 8, 0, {{runs, 1, 0}});
  store_->FailWrites(1);
  ASSERT_FALSE(core_->agents().Register(r, "127.0.0.1").ok());
  EXPECT_EQ(second.in[runs], 1);
  EXPECT_EQ(second.out[runs], 1) << "the undo took it out again";
  Register("n1", 8, 0, {{runs, 1, 0}});
  EXPECT_EQ(second.InMemory(), (std::set<int64_t>{runs, later})) << "held again";

  // Its processes end: reaped.
  ASSERT_TRUE(Report("n1", {Entry(runs, 1, 0, proto::ReportEvent::kExited, 143)}).ok());
  EXPECT_EQ(second.InMemory(), (std::set<int64_t>{later}));
  EXPECT_EQ(second.out[runs], 2);
}

}  // namespace
}  // namespace berth::testing
