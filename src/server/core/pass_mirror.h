// PassMirror: the scheduler thread's own copy of the pass index (core_state.h), kept from one pass
// to the next, so that a snapshot holds the state lock in proportion to what changed since the last
// one, not to the queue. Under the lock a pass takes only a PassDelta: the index entries of the
// jobs touched since the last delta (JobBooks::TakePassDelta). Without the lock it merges the delta
// into the mirror and walks the mirror for the snapshot's pending and running jobs. A million
// pending jobs walked under the lock held it ~60 ms a pass (bench/README.md, "Ten thousand nodes
// with a realistic mix"); a delta of a 10,000-job submission is ~1 % of that.
//
// Entries hold what a pass reads of a job by value or by shared pointer (a request, a running
// job's view: both immutable), never a pointer into the job table, so that the mirror may be read
// while the table changes.
//
// Thread-safety: not thread-safe; one thread (the pass's) owns it. A PassDelta is built under the
// state lock and handed over by value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "sched/scheduler.h"

namespace berth {

// A pending job as the mirror keeps it (from its PendingView at generation `gen`).
struct MirroredPending {
  std::shared_ptr<const sched::JobRequest> request;
  uint64_t gen = 0;
  std::optional<TimeMs> not_before;    // a restart's backoff
  std::optional<int64_t> awaits_spec;  // never placed, and its submission has dependencies
  bool operator==(const MirroredPending&) const = default;
};

// A job holding resources as the mirror keeps it (from its HeldView).
struct MirroredHeld {
  std::shared_ptr<const sched::RunningJob> view;
  uint64_t gen = 0;
  std::optional<int64_t> group;
  bool operator==(const MirroredHeld&) const = default;
};

// The entries of the jobs changed since the last delta, sorted by id; nullopt: the job is not (or
// no longer) pending, or not holding resources. `full`: the entries are every job's, and replace
// the mirror (the first pass, and after the index was rebuilt from every job).
struct PassDelta {
  bool full = false;
  std::vector<std::pair<int64_t, std::optional<MirroredPending>>> pending;
  std::vector<std::pair<int64_t, std::optional<MirroredHeld>>> held;
};

class PassMirror {
 public:
  using PendingEntries = std::vector<std::pair<int64_t, MirroredPending>>;
  using HeldEntries = std::vector<std::pair<int64_t, MirroredHeld>>;

  // Brings the mirror up to date with `delta` (a full one replaces it).
  void Apply(PassDelta delta);

  // Sorted by id.
  const PendingEntries& pending() const { return pending_; }
  const HeldEntries& held() const { return held_; }
  // The distinct submissions (spec ids) whose dependencies some mirrored pending job awaits.
  std::vector<int64_t> AwaitedSpecs() const;

 private:
  void Count(const std::optional<int64_t>& spec, int by);

  PendingEntries pending_;
  HeldEntries held_;
  std::map<int64_t, int> awaited_;  // spec id -> pending entries awaiting it
};

// Whether a pending job is the scheduler's concern at `now`: not in a restart's backoff, owed no
// cancel, and, if it awaits dependencies, its submission's are met (`met_specs`).
bool PassEligible(int64_t id, const MirroredPending& job, TimeMs now,
                  const std::set<int64_t>& owed_cancels, const std::set<int64_t>& met_specs);

}  // namespace berth
