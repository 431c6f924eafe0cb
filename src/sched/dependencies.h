// Dependencies: which waiting submissions' dependencies hold, can no longer hold, or still wait,
// as the jobs they name end (Slurm's --dependency with kill_invalid_depend).
//
// A waiter is one submission (the server keys it by spec id: every job of a bulk group shares its
// dependencies). Each of its conditions names targets, a job or a whole bulk group, and holds:
//   ok     when every target job succeeded; fails as soon as one ends otherwise;
//   notok  when every target job has ended and at least one did not succeed; fails when all
//          succeeded;
//   any    when every target job has ended, however.
// A waiter is met when all of its conditions hold, failed as soon as one fails.
//
// Cost: a job's end touches only the waiters that name it or its group (two hash lookups), never
// the waiting jobs themselves, so that jobs whose dependencies are unmet cost nothing.
//
// Pure (no I/O, no clock). Not thread-safe: the server guards it with its state lock. Waiters are
// plain values, so that a caller can save one before a change and put it back (Save/Restore) when
// the change is not committed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/job_status.h"

namespace berth::sched {

enum class DepKind { kOk, kNotOk, kAny };

struct DepTarget {
  bool group = false;
  int64_t id = 0;  // the job, or the group
  int total = 1;   // jobs it stands for (a group: its size)
  int ended = 0;   // of them, ended for good
  int not_ok = 0;  // of those, not SUCCEEDED
  // How the first that did not succeed ended, for messages: "failed" (a job), "job 57 failed" (a
  // group).
  std::string first_not_ok;
};

struct DepCondition {
  DepKind kind = DepKind::kOk;
  std::vector<DepTarget> targets;
};

enum class DepState { kWaiting, kMet, kFailed };

class Dependencies {
 public:
  using Key = int64_t;
  struct Waiter {
    std::vector<DepCondition> conditions;
    DepState state = DepState::kWaiting;
    std::string why;  // when failed: "dependency 10 failed"
  };
  struct Change {
    Key key = 0;
    DepState state = DepState::kWaiting;
    std::string why;
  };

  // Adds (or replaces) a waiter whose targets' counts say how they stand now. Returns its state.
  DepState Add(Key key, std::vector<DepCondition> conditions);
  // A job ended for good with `status`: the waiters whose state this changes.
  std::vector<Change> JobEnded(int64_t job, std::optional<int64_t> group, JobStatus status);

  const Waiter* Find(Key key) const;
  // The waiters still waiting that name `job` or `group`: those JobEnded(job, group, ...) would
  // touch (to save them first), and those whose reason names the job's status.
  std::vector<Key> Watching(int64_t job, std::optional<int64_t> group) const;
  std::optional<Waiter> Save(Key key) const;
  void Restore(Key key, std::optional<Waiter> saved);
  // Forgets a waiter (its jobs are all gone).
  void Remove(Key key);
  size_t size() const { return waiters_.size(); }

  // "dependency 10 failed", "dependency group 3 failed (job 57 failed)", "dependency notok:10
  // can no longer hold: job 10 succeeded" — for a failed condition.
  static std::string FailureText(const DepCondition& c, const DepTarget& t);
  // How a job that did not succeed ended, as the texts say it: "failed", "was cancelled".
  static std::string EndedText(JobStatus status);

 private:
  static DepState Evaluate(Waiter& w);
  std::unordered_map<Key, Waiter> waiters_;
  std::unordered_multimap<int64_t, Key> by_job_;
  std::unordered_multimap<int64_t, Key> by_group_;
};

}  // namespace berth::sched
