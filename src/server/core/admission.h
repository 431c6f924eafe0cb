// Admission: what users ask of the queue — submit, cancel, requeue, a group's max_running — and
// the checks that decide whether it is accepted: feasibility on this cluster, the user's
// max-pending-jobs, containers and mounts, dependencies that may be named.
//
// Submissions are group-committed: concurrent Submit() calls queue (submit_queue.h), the first one
// writes the whole queue in one store transaction (LevelDB's writer queue), without holding the
// state lock; memory follows the commit (ApplyGroupLocked). A cancel --all catches submissions in
// flight (CoreState::cancel), and a cancel of a job committed but not yet applied is owed to the
// apply (CoreState::owed_cancels).
//
// Thread-safety: every public method is thread-safe (it takes the state lock, core_state.h, or
// needs none); the private steps say which.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/core/core_state.h"
#include "server/core/job_books.h"
#include "server/core/lifecycle.h"

namespace berth {

struct SubmitRequest {
  JobSpec spec;
  std::string user;
  int count = 1;
  bool as_group = false;       // a bulk group: jobs get ranks 0..count-1
  bool depend_on_any = false;  // its dependencies may name other users' jobs (an operator)
  // The client's idempotency key ("": none; docs/api.md): a submission sent again with the same key
  // by the same user is answered with the jobs the first one made instead of making more.
  std::string key;
};

struct CancelRequest {
  std::vector<int64_t> ids;
  bool all = false;        // every job of `user`
  bool all_users = false;  // every job
  std::optional<int64_t> group;
  std::string user;         // who asks
  bool cancel_any = false;  // may cancel other users' jobs (an operator); else they are forbidden
  std::string why;          // said after "cancelled by USER: " ("local cluster stopped"); "" none
};

struct CancelAnswer {
  std::vector<int64_t> cancelled;
  std::vector<int64_t> already_finished;
  std::vector<int64_t> not_found;
  std::vector<int64_t> forbidden;  // other users' jobs, named by id, that the asker may not cancel
};

class Admission {
 public:
  Admission(CoreState& state, JobBooks& books, Lifecycle& life)
      : s_(state), books_(books), life_(life) {}

  // Checks feasibility, then records the jobs (group-committed with concurrent submissions).
  // Infeasible: the job can never run on this cluster; Unavailable: the store failed (nothing
  // kept).
  Result<SubmitAnswer> Submit(SubmitRequest request) EXCLUDES(core_lock);
  Result<CancelAnswer> Cancel(const CancelRequest& request) EXCLUDES(core_lock);
  // Stops the running attempt of `job` and puts it back in the queue (its next attempt starts
  // afresh), on the request of `user`; `any` lets them requeue other users' jobs (an operator).
  // Forbidden (not theirs), NotFound, Conflict (pending already, or ended), Unavailable.
  Status Requeue(int64_t job, const std::string& user, bool any) EXCLUDES(core_lock);
  // Sets (or, with nullopt, lifts) bulk group `group`'s max_running, on the request of `user`;
  // `any` lets them change other users' groups (an operator). NotFound, Forbidden, Unavailable.
  Status SetGroupLimit(int64_t group, std::optional<int> max_running, const std::string& user,
                       bool any) EXCLUDES(core_lock);
  // A group's max_running now (none: no limit).
  std::optional<int> GroupLimit(int64_t group) EXCLUDES(core_lock);

  // What the store says of a submission's dependencies, read before the state lock is taken (a
  // round trip each on PostgreSQL): the rows of the jobs it names, each group's owner and counts.
  struct DependencyRows {
    std::map<int64_t, JobRow> jobs;
    std::map<int64_t, Store::GroupInfo> groups;
    std::map<int64_t, std::map<JobStatus, int>> counts;
  };
  // The conditions of `spec`'s dependencies as they stand now (the store agrees with memory under
  // the lock). What `read` holds is used where it cannot have changed since it was read: an ended
  // job's row, a group none of whose jobs ended since; the rest is read from the store here.
  // InvalidArgument/NotFound/Forbidden name what is wrong. (Also Core::Load's, for the waiting
  // submissions it loads.)
  Result<std::vector<sched::DepCondition>> DependencyConditions(
      const JobSpec& spec, const std::string& user, bool any_owner,
      const DependencyRows* read = nullptr) REQUIRES(core_lock);

  // Submissions waiting in the group-commit queue (the one writing included).
  size_t QueuedSubmissionsForTesting();

 private:
  // A submission in the queue (CoreState::submits), with what admission needs to record it.
  struct SubmitWriter : SubmitQueue::Entry {
    SubmitRequest* request = nullptr;
    uint64_t received_at_seq = 0;       // cancel.seq when it arrived
    std::string spec_json;              // the spec as stored
    int64_t reserved_pending = 0;       // jobs it holds in reserved_pending until it is applied
    DependencyRows dependencies;        // read before the lock, for the checks made under it
    std::vector<std::string> warnings;  // SubmitAnswer::warnings, found at admission
  };

  // Submit's steps. The checks that need no state, and the server's defaults in the spec.
  Status PrepareSubmission(SubmitRequest& request) const;
  DependencyRows ReadDependencyRows(const JobSpec& spec) EXCLUDES(core_lock);
  // The checks against the cluster and the user's limits; reserves the jobs under max-pending-jobs.
  Status AdmitLocked(SubmitWriter& writer) REQUIRES(core_lock);
  // The warning for a job whose request some of `candidates` (NodesThatCouldHold) would not
  // enforce: nodes whose agent isolates nothing (RegisterRequest::isolation "none: ..."); "" when
  // every one enforces it.
  std::string UnenforcedLimits(const std::vector<std::string>& candidates,
                               const JobSpec& spec) const REQUIRES(core_lock);
  // A submission of a container job that no node of its pool can run, saying why by the fields
  // the user wrote: no node runs containers (when `feasible` is false), or none allows its
  // container.mounts. Ok otherwise.
  Status CheckContainerPlacement(const JobSpec& spec, bool feasible) REQUIRES(core_lock);
  // A group's owner and its jobs per status, from `read` when still true, else from the store.
  // NotFound for an unknown group; Unavailable when the store failed.
  Result<std::pair<std::string, std::map<JobStatus, int>>> GroupCounts(int64_t group,
                                                                       const DependencyRows* read)
      REQUIRES(core_lock);
  // Records an admitted submission in one store commit with those queued beside it; its answer.
  Result<SubmitAnswer> CommitInGroup(SubmitWriter& writer) EXCLUDES(core_lock);
  static std::vector<Submission> SubmissionsOf(const std::vector<SubmitQueue::Entry*>& writing,
                                               TimeMs now);
  // Memory after the group's commit (or its failure): reservations released, jobs added.
  void ApplyGroupLocked(const std::vector<SubmitQueue::Entry*>& group,
                        const std::vector<SubmitQueue::Entry*>& writing,
                        const Result<std::vector<SubmitResult>>& stored, TimeMs now)
      REQUIRES(core_lock);
  // A committed submission into memory: its jobs (AddSubmittedJobs), its group's limit, the cancels
  // that caught it in flight (CancelOnArrival) and its dependencies; those cancels are committed,
  // or owed when that fails.
  void ApplySubmitted(SubmitWriter& writer, const SubmitResult& stored, TimeMs now)
      REQUIRES(core_lock);
  void AddSubmittedJobs(const SubmitRequest& request, const SubmitResult& stored,
                        const std::shared_ptr<const JobSpec>& shared, TimeMs now)
      REQUIRES(core_lock);
  // Ends the jobs `ids` just applied that a cancel promised to end: a cancel of their id between
  // their commit and now (owed_cancels), or all of them when a cancel --all caught them in flight.
  // Returns (job, why) of each.
  std::vector<std::pair<int64_t, std::string>> CancelOnArrival(Txn& txn,
                                                               const std::vector<int64_t>& ids,
                                                               bool cancelled_in_flight, TimeMs now)
      REQUIRES(core_lock);

  // Cancel's steps. The jobs a cancel names: its ids, then those its filter (all, all users,
  // group) selects now; each once.
  std::vector<int64_t> CancelTargets(const CancelRequest& request) REQUIRES(core_lock);
  // The jobs a cancel did not find in memory: unknown, ended, or committed by a submission not yet
  // applied (those are cancelled now, or owed to the apply). Unavailable when the store could not
  // say which (what was cancelled stays cancelled).
  Status CancelUnknown(const CancelRequest& request, const std::vector<int64_t>& unknown,
                       CancelAnswer& answer) EXCLUDES(core_lock);

  CoreState& s_;
  JobBooks& books_;
  Lifecycle& life_;
};

}  // namespace berth
