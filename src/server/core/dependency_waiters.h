// DependencyWaiters: the submissions whose jobs wait for dependencies (docs/task-yaml.md
// "depends_on"), keyed by spec id — each one's conditions as they stand (sched::Dependencies, which
// decides when they are met or can no longer be), its jobs (a submission's jobs have consecutive
// ids, first..last; `live` of them are in the core's memory, and the waiter is forgotten with the
// last), and the waiters whose jobs must be cancelled (their dependencies failed) but whose
// cancellation could not be committed yet: retried until it is.
//
// Not thread-safe; the Core guards it with its state lock.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "sched/dependencies.h"

namespace berth {

class DependencyWaiters {
 public:
  using Key = sched::Dependencies::Key;
  using Waiter = sched::Dependencies::Waiter;
  struct Jobs {
    int64_t first = 0;
    int64_t last = 0;
    int live = 0;  // of its jobs, those in the core's memory
  };

  // Registers submission `key`'s waiter and its jobs; the state its conditions are in now.
  sched::DepState Add(Key key, std::vector<sched::DepCondition> conditions, Jobs jobs);
  const Waiter* Find(Key key) const { return conditions_.Find(key); }
  const Jobs* JobsOf(Key key) const;
  // One job of submission `key` left memory; true when it was the last (the waiter is forgotten).
  bool JobGone(Key key);
  // One job of submission `key` came back into memory (an ended job whose processes still run,
  // held after a restart); nothing when the submission has no waiter.
  void JobBack(Key key);
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
};

}  // namespace berth
