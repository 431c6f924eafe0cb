// ActiveJob: a job as the server core holds it in memory while it is not over — its stored row, its
// spec and scheduler request (shared by the jobs of a submission), its ranks' states, and where the
// core's books count it (job counts, its group's tally). Kept in the JobTable (job_table.h).
//
// A plain value; not thread-safe (the core's state lock guards the table that holds it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/job_status.h"
#include "common/resources.h"
#include "sched/scheduler.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace berth {

// One rank of a job's current attempt, as its node reported it.
struct RankState {
  bool setting_up = false;
  bool running = false;
  bool exited = false;
  // An ended attempt held again after a restart (HoldEndedAttempts): this rank's grant is not
  // allocated, since no registration of its node has claimed it (yet).
  bool unheld = false;
  int exit_code = 0;
  std::optional<int64_t> peak_memory_bytes;  // what it used, as its exit reported
  std::optional<int64_t> cpu_ms;
};

struct ActiveJob {
  JobRow row;
  std::shared_ptr<const JobSpec> spec;
  // The scheduler's view while pending, but for its id: the same for every job of a submission,
  // so shared (one per submission rather than ~270 bytes per job).
  std::shared_ptr<const sched::JobRequest> request;
  int group_size = 0;            // BERTH_NUM_JOBS for bulk groups
  std::vector<RankState> ranks;  // per rank of the current attempt
  bool terminating = false;      // ended for the user; processes still being stopped
  TimeMs placed_at = 0;          // wall time the current attempt was placed
  int64_t running_since = 0;     // monotonic ms the current attempt started RUNNING (0: not yet)
  uint64_t gen = 0;              // bumped by every change
  TimeMs queued_at = 0;          // when it last entered the queue (submitted, or requeued)
  // What the current attempt's sampled GPUs did so far (Lifecycle::NoteGpuUse), for its usage.
  struct GpuUse {
    int attempt = 0;
    double mean_sm = 0;
    DurationMs idle_ms = 0;
  };
  std::optional<GpuUse> gpu_use;
  // A preemptor's launch waits until its victims' processes are gone: (job, attempt) of each.
  std::set<std::pair<int64_t, int>> launch_after;
  // Where the job is counted in counts_ (berth_jobs); none when it is not (ended).
  std::optional<std::pair<int, uint32_t>> counted;  // (status slot, count group)
  std::optional<uint32_t> count_group;              // its (pool, team) group, once looked up
  // The status its bulk group's tally counts it under (TallyJob); none when the group is not
  // tallied (or it is in no group).
  std::optional<JobStatus> tallied;

  // Whether every rank of the current attempt has exited (its processes are gone).
  bool AllRanksExited() const {
    for (const RankState& r : ranks) {
      if (!r.exited) return false;
    }
    return true;
  }
  MilliGpu gpu_milli_held() const { return TotalGpuMilli(row.resources, row.placement); }
  // The grants whose resources it holds: its placement but the ranks marked unheld.
  Placement HeldGrants() const;
};

}  // namespace berth
