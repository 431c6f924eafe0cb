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
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/core/core_state.h"
#include "server/core/job_books.h"
#include "server/core/lifecycle.h"
#include "server/core/pass_mirror.h"

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
  // Brings the pass's mirror up to date (as a pass would) and says whether it equals the pass
  // index, entry for entry.
  bool MirrorMatchesIndexForTesting() EXCLUDES(core_lock);

 private:
  // A pass's input, taken under the lock: the snapshot's users, teams and reservations, the
  // nodes, and what changed in the pass index since the last pass (`delta`), with what Expand needs
  // to walk the mirror without the lock (which pending jobs are eligible; bulk groups' limits).
  // Nodes are noted as a pointer to each one's immutable view, with its generation, and copied
  // into snapshot.nodes and node_gens after (10,000 nodes' views and their name-keyed generations
  // took ~6 ms under the lock).
  struct PassInput {
    sched::Snapshot snapshot;
    std::vector<std::pair<int64_t, uint64_t>> job_gens;   // (id, gen), sorted by id; by Expand
    std::unordered_map<std::string, uint64_t> node_gens;  // filled by Expand
    std::vector<std::pair<std::shared_ptr<const sched::NodeView>, uint64_t>> nodes;  // (view, gen)
    PassDelta delta;
    std::set<int64_t> owed_cancels;  // never placed while their cancel is owed
    std::set<int64_t> met_specs;     // submissions whose dependencies are met
    std::map<int64_t, int> group_limits;
    std::map<int64_t, int> group_running;  // dying attempts' here, the held jobs' added by Expand
    std::vector<std::shared_ptr<sched::RunningJob>> dying;
  };
  PassInput BuildPassInput(TimeMs now) REQUIRES(core_lock, pass_mu_);
  // Merges in.delta into the mirror and fills the snapshot's pending and running jobs from it,
  // job_gens and the group caps; the nodes and node_gens from in.nodes. Needs no state lock.
  void Expand(PassInput& in) REQUIRES(pass_mu_);
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
  // Held by RunPass throughout (before the state lock): passes run one at a time.
  Mutex pass_mu_;
  PassMirror mirror_ GUARDED_BY(pass_mu_);
};

}  // namespace berth
