// Scheduling: the passes that place pending jobs and preempt for them, and the fair-share rules
// and usage they weigh.
//
// Scheduling off the lock. RunPass() copies a snapshot under the lock (node views and pending
// requests come from the pass index, job_books.h), runs the pure scheduler (sched/) without the
// lock, then applies the decisions under the lock in chunks of `pass_commit_chunk`, each chunk one
// commit. A generation check drops decisions about jobs or nodes that changed meanwhile (a job
// cancelled, a node drained or re-registered, resources taken); they are retried in the next pass.
//
// Thread-safety: every public method is thread-safe; the private steps say which lock they need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/core/core_state.h"
#include "server/core/job_books.h"
#include "server/core/lifecycle.h"

namespace berth {

class Scheduling {
 public:
  Scheduling(CoreState& state, JobBooks& books, Lifecycle& life)
      : s_(state), books_(books), life_(life) {}

  void RequestPass() EXCLUDES(core_lock);
  // Waits up to `timeout_ms` for RequestPass(); true (and the request taken) when there was one,
  // or when a team's reclaim has left its rate-limit window since (a held job may reclaim now),
  // and the pacing after a pass that decided nothing is over (CoreOptions::fruitless_pass_pacing);
  // false with the request kept while that pacing lasts.
  bool WaitForPassRequest(DurationMs timeout_ms) EXCLUDES(core_lock);
  // One scheduling pass. Returns false when a commit failed (the rest is retried by a later pass).
  bool RunPass() EXCLUDES(core_lock);
  // Monotonic time the last pass that had pending jobs ended (0: none yet).
  int64_t last_pass_with_work() const { return s_.last_pass_with_work.load(); }

  // --- fair share ---
  // The users' caps and teams, as Accounts holds them; call at start and after every change.
  void SetShareRules(const std::vector<UserRow>& users, const std::vector<TeamRow>& teams)
      EXCLUDES(core_lock);
  // Rebuilds the decayed usage from the store's hourly rollup (after Core::Load).
  Status LoadUsage() EXCLUDES(core_lock);

  // Runs `hook` in every RunPass between the scheduler's decision and its application, without
  // the lock: lets a test change the state while a pass is deciding.
  void SetPassHookForTesting(std::function<void()> hook) EXCLUDES(core_lock);

 private:
  // A pass's input, taken under the lock: the snapshot and the generations it saw. The pending
  // jobs' requests are noted there as (id, request) only, and copied into snapshot.pending by
  // Expand once the lock is released: a request is immutable and shared by the jobs of a
  // submission, so that a submission waits for a pointer per pending job, not a copy of each
  // (100,000 of them took a third of a pass's time under the lock). Nodes likewise: a pointer to
  // each one's immutable view, with its generation, copied into snapshot.nodes and node_gens
  // after (10,000 nodes' views and their name-keyed generations took ~6 ms under the lock).
  struct PassInput {
    sched::Snapshot snapshot;
    std::vector<std::pair<int64_t, uint64_t>> job_gens;   // (id, gen), sorted by id
    std::unordered_map<std::string, uint64_t> node_gens;  // filled by Expand
    std::vector<std::pair<std::shared_ptr<const sched::NodeView>, uint64_t>> nodes;  // (view, gen)
    std::vector<std::pair<int64_t, const sched::JobRequest*>> pending;               // id order
    std::vector<std::shared_ptr<const sched::JobRequest>> keep;  // what `pending` points into
  };
  PassInput BuildPassInput(TimeMs now) REQUIRES(core_lock);
  // Fills in.snapshot.pending from in.pending, in.snapshot.nodes and in.node_gens from in.nodes
  // (and lets the pointers go). Needs no lock.
  static void Expand(PassInput& in);
  // The snapshot's users and teams: rules, decayed usage (running attempts included), reclaims.
  void AddShares(sched::Snapshot& snap) REQUIRES(core_lock);
  // Operators' reservations: each one's window at snap.now; notes when the next starts or ends.
  void AddReservedWindows(sched::Snapshot& snap) REQUIRES(core_lock);
  sched::Config PassConfig() const;
  // Whether the nodes of `placement` are as the pass saw them (else the decision is dropped).
  bool NodesUnchanged(const Placement& placement,
                      const std::unordered_map<std::string, uint64_t>& gens) REQUIRES(core_lock);
  void NoteNodeGens(const Placement& placement, std::unordered_map<std::string, uint64_t>& gens)
      REQUIRES(core_lock);
  // Whether job `id` is as the pass saw it (its generation in the snapshot).
  bool AsPassSaw(const PassInput& in, int64_t id) REQUIRES(core_lock);
  // RunPass's decisions, applied to `txn` if the state is still as the pass saw it (else false).
  bool ApplyPlacement(Txn& txn, const sched::PlaceDecision& d, PassInput& in, TimeMs now)
      REQUIRES(core_lock);
  bool ApplyPreemption(Txn& txn, const sched::PreemptDecision& d, PassInput& in, TimeMs now)
      REQUIRES(core_lock);

  CoreState& s_;
  JobBooks& books_;
  Lifecycle& life_;
};

}  // namespace berth
