// DependencyWaiters: the submissions whose jobs wait for dependencies (docs/task-yaml.md
// "depends_on"), keyed by spec id — each one's conditions as they stand (sched::Dependencies, which
// decides when they are met or can no longer be), its jobs (a submission's jobs have consecutive
// ids, first..last; `live` of them are in the core's memory, and the waiter is forgotten with the
// last: it counts them by watching the job table, job_table.h), and the waiters whose jobs must be
// cancelled (their dependencies failed) but whose cancellation could not be committed yet: retried
// until it is.
//
// Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/dependencies.h"
#include "server/core/job_table.h"

namespace berth {

class DependencyWaiters final : public JobTable::Observer {
 public:
  using Key = sched::Dependencies::Key;
  using Waiter = sched::Dependencies::Waiter;
  using Snapshot = std::optional<Waiter>;  // a Txn's undo journal (txn.h) saves waiters by key
  struct Jobs {
    int64_t first = 0;
    int64_t last = 0;
    int live = 0;  // of its jobs, those in the core's memory
  };

  // Registers submission `key`'s waiter and its jobs; the state its conditions are in now.
  sched::DepState Add(Key key, std::vector<sched::DepCondition> conditions, Jobs jobs);
  const Waiter* Find(Key key) const { return conditions_.Find(key); }
  const Jobs* JobsOf(Key key) const;
  // A job came into memory: one more live job of its submission's waiter (an ended job whose
  // processes still run, held after a restart); nothing when the submission has no waiter (yet:
  // loaded and submitted jobs are there before their waiter is added, with its count).
  void Entered(ActiveJob& job) override;
  // A job left memory: one fewer; the waiter is forgotten with its last (TakeGone says which).
  void Left(ActiveJob& job) override;
  // The waiters forgotten since the last call, as their last job left.
  std::vector<Key> TakeGone() { return std::exchange(gone_, {}); }
  size_t size() const { return conditions_.size(); }

  // A job ended: what changed for the waiters that watch it (sched::Dependencies::JobEnded).
  std::vector<sched::Dependencies::Change> JobEnded(int64_t job, std::optional<int64_t> group,
                                                    JobStatus status) {
    return conditions_.JobEnded(job, group, status);
  }
  // The waiters watching a job (or its group).
  std::vector<Key> Watching(int64_t job, std::optional<int64_t> group) const {
    return conditions_.Watching(job, group);
  }
  // A waiter's conditions, saved before a change and put back if its commit failed.
  std::optional<Waiter> Save(Key key) const { return conditions_.Save(key); }
  void Restore(Key key, std::optional<Waiter> saved) { conditions_.Restore(key, std::move(saved)); }

  // Waiters whose jobs' cancellation (their dependencies failed) could not be committed: retried.
  void RetryCancel(Key key) { cancel_retries_.insert(key); }
  const std::set<Key>& cancel_retries() const { return cancel_retries_; }
  void CancelRetriesDone() { cancel_retries_.clear(); }

  // Every waiter's jobs (for DebugState).
  const std::unordered_map<Key, Jobs>& jobs() const { return jobs_; }

 private:
  sched::Dependencies conditions_;
  std::unordered_map<Key, Jobs> jobs_;
  std::set<Key> cancel_retries_;
  std::vector<Key> gone_;  // forgotten since TakeGone; taken after every reap and undo
};

}  // namespace berth
