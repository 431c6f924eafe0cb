// The core's own per-job books, kept by watching the job table (core.h, JobBooks): whatever enters,
// changes, is restored or leaves jobs_ is counted, tallied and indexed here, and nowhere by hand.
#include "server/core/core.h"

namespace berth {

void Core::JobBooks::Entered(ActiveJob& job) {
  core_->mu_.AssertHeld();
  // A job of a tallied group entering memory again (held after a restart) is counted there under
  // its status already; a submitted one arrives tallied with its group's new tally.
  if (job.row.group && !job.tallied && core_->tallies_.Enter(*job.row.group)) {
    job.tallied = job.row.status;
  }
  core_->CountJob(job);
  core_->node_jobs_.Add(job.row.id, job.row.placement);
  core_->Touch(job.row.id);
}

void Core::JobBooks::Left(ActiveJob& job) {
  core_->mu_.AssertHeld();
  core_->UncountJob(job);
  if (job.tallied) core_->tallies_.Leave(*job.row.group);  // counted under its final status still
  core_->Touch(job.row.id);
}

void Core::JobBooks::Edited(const ActiveJob& job) {
  core_->mu_.AssertHeld();
  core_->Touch(job.row.id);
}

void Core::JobBooks::Restored(ActiveJob* was, ActiveJob& job) {
  core_->mu_.AssertHeld();
  // The counts go back with the job: the job as it had become leaves them, the job as it was is
  // counted again where it was then. (The group tallies were not moved: that waits for the commit,
  // Outbox::tally_moves.)
  if (was != nullptr) core_->UncountJob(*was);
  core_->AddToCounts(job);
  // A placement put back may be one a rebuild during the txn no longer had.
  core_->node_jobs_.MarkStale();
  core_->Touch(job.row.id);
}

}  // namespace berth
