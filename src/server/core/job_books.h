// JobBooks: the core's own books per job, kept by watching the job table (job_table.h). Whatever
// enters, changes, is restored or leaves CoreState::jobs is counted (JobCounts: berth_jobs, the
// dashboard's totals, max-pending-jobs), tallied in its bulk group (GroupTallies), filed in the
// pass index (the pending and the resource-holding jobs a snapshot walks) and in NodeJobs — here,
// and nowhere by hand. It subscribes to the job table first, before the other observers.
//
// Thread-safety: every method runs under the state lock (core_state.h); the observer calls come
// from the job table with it held; the ...ForTesting checks take it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/core/core_state.h"
#include "server/core/pass_mirror.h"

namespace berth {

class JobBooks final : public JobTable::Observer {
 public:
  explicit JobBooks(CoreState& state) : s_(state) {}

  // --- JobTable::Observer ---
  void Entered(ActiveJob& job) override;
  void Left(ActiveJob& job) override;
  void Edited(const ActiveJob& job) override;
  void Restored(ActiveJob* was, ActiveJob& job) override;

  // --- counts ---
  // Counts a job where it belongs now (moving it from where it was counted); UncountJob takes it
  // out (it leaves the table).
  void CountJob(ActiveJob& job) REQUIRES(core_lock);
  void UncountJob(ActiveJob& job) REQUIRES(core_lock);
  // Adds the job where `job.counted` says it is counted (CountJob, and an undo restoring a job).
  void AddToCounts(const ActiveJob& job) REQUIRES(core_lock);
  // Counts every job afresh (the teams changed).
  void RecountAllJobs() REQUIRES(core_lock);
  // The count group of (pool, user's team); a job's, looked up once and kept with it.
  uint32_t CountGroup(const std::string& pool, const std::string& user) REQUIRES(core_lock);
  uint32_t CountGroupOf(ActiveJob& job) REQUIRES(core_lock);

  // --- group tallies ---
  // Notes the job's move in its group's tally to its status now, for once `txn` is committed
  // (Lifecycle::Transition calls it).
  void TallyJob(Txn& txn, ActiveJob& job) REQUIRES(core_lock);
  // Starts the tallies of the groups of the jobs just loaded, from the store's counts.
  Status LoadGroupTallies() REQUIRES(core_lock);

  // --- the pass index ---
  // Notes that job `id` was added, changed or removed; RefreshPassIndex brings the index up to
  // date with the touched jobs.
  void Touch(int64_t id) REQUIRES(core_lock);
  void RefreshPassIndex() REQUIRES(core_lock);
  // Whether the index equals a walk of every job (checked before each snapshot in debug builds).
  bool PassIndexConsistent() REQUIRES(core_lock);
  // Brings the index up to date and returns what changed in it since the last call (all of it,
  // the first time and after a rebuild), for the scheduler thread's copy (pass_mirror.h).
  PassDelta TakePassDelta() REQUIRES(core_lock);
  // An index entry as the pass mirror keeps it.
  static MirroredPending Mirrored(const PendingView& p);
  static MirroredHeld Mirrored(const HeldView& h);
  // The ids of the jobs in memory that may be placed on `node` (NodeJobs: check each one's
  // placement), rebuilding that index first when it is due.
  std::vector<int64_t> JobsOn(const std::string& node) REQUIRES(core_lock);

  // --- for tests ---
  // Whether the job counts kept for /metrics (CountJob) equal a count of every active job now.
  bool JobCountsConsistentForTesting() EXCLUDES(core_lock);
  // Whether the pass index, brought up to date, equals a walk of every job.
  bool PassIndexConsistentForTesting() EXCLUDES(core_lock);
  // Whether every group tally equals the store's counts of the group, and its jobs in memory are
  // those counted as there (group_tallies.h). False when the store cannot be read.
  bool GroupTalliesConsistentForTesting() EXCLUDES(core_lock);
  // How many times the pass index was rebuilt from every job (the first snapshot is one).
  int PassIndexRebuildsForTesting() EXCLUDES(core_lock);
  // The last TakePassDelta's: whether it was full, and how many jobs it held.
  std::pair<bool, size_t> LastPassDeltaForTesting() EXCLUDES(core_lock);

 private:
  // Job `id`'s entry for held_index if it holds resources (`job` null: erased; `was`: its entry
  // before, reused while the job's generation is the same).
  std::optional<HeldView> IndexJob(int64_t id, ActiveJob* job, std::optional<HeldView> was)
      REQUIRES(core_lock);
  // Its entry for pending_index.
  static PendingView PendingViewOf(ActiveJob& job);

  CoreState& s_;
  std::pair<bool, size_t> last_delta_ GUARDED_BY(core_lock);  // for tests
};

}  // namespace berth
