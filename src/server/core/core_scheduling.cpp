// Scheduling passes: a snapshot copied under the lock, the pure scheduler run without it, and its
// decisions applied under the lock in chunks, each chunk one commit, with a generation check.
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "server/core/core.h"

namespace berth {
namespace {

// The pass index's vectors are sorted by id.
template <class T>
auto FindEntry(std::vector<std::pair<int64_t, T>>& index, int64_t id) {
  return std::lower_bound(index.begin(), index.end(), id,
                          [](const auto& entry, int64_t key) { return entry.first < key; });
}

// Merges `changes` (sorted by id; a value is an entry to add, nullopt one to remove) into `index`.
// Entries added past the last one (a submission's new jobs) are appended in place.
template <class T>
void MergeChanges(std::vector<std::pair<int64_t, T>>& index,
                  std::vector<std::pair<int64_t, std::optional<T>>>& changes) {
  if (changes.empty()) return;
  auto change = changes.begin();
  if (index.empty() || changes.front().first > index.back().first) {
    for (; change != changes.end() && change->second; ++change) {
      index.emplace_back(change->first, std::move(*change->second));
    }
    if (change == changes.end()) return;
  }
  std::vector<std::pair<int64_t, T>> out;
  out.reserve(index.size() + changes.size());
  auto add_before = [&](int64_t id) {
    for (; change != changes.end() && change->first < id; ++change) {
      out.emplace_back(change->first, std::move(*change->second));  // only additions come first
    }
  };
  for (auto& entry : index) {
    add_before(entry.first);
    if (change != changes.end() && change->first == entry.first) {
      ++change;  // removed
      continue;
    }
    out.push_back(std::move(entry));
  }
  add_before(std::numeric_limits<int64_t>::max());
  index = std::move(out);
}

}  // namespace

Core::PassInput Core::BuildPassInput(TimeMs now) {
  RefreshPassIndex();
  assert(PassIndexConsistent());
  PassInput in;
  sched::Snapshot& snap = in.snapshot;
  snap.now = now;
  snap.nodes.reserve(nodes_.size());
  for (auto& [name, node] : nodes_) {
    snap.nodes.push_back(NodeTable::ViewOf(node));
    in.node_gens.emplace(name, node.sched_gen);
  }
  std::map<int64_t, int> group_running;
  // This runs under the lock, so a submission waits for it: no copy or reallocation of 100,000
  // requests (ExpandPending copies them after), no hash table of their generations (sorted by id,
  // as both indexes are: merged, then searched). The snapshot's vector of requests is reserved
  // first, as the biggest block: allocated after the smaller ones it no longer fits the scheduler
  // thread's heap, and every pass mapped a fresh one and faulted ~30 MB in (measured).
  snap.pending.reserve(pending_index_.size());
  in.pending.reserve(pending_index_.size());
  snap.running.reserve(held_index_.size() + dying_.size());
  in.job_gens.reserve(pending_index_.size() + held_index_.size());
  auto pending = pending_index_.begin();
  auto held = held_index_.begin();
  while (pending != pending_index_.end() || held != held_index_.end()) {
    if (held == held_index_.end() ||
        (pending != pending_index_.end() && pending->first < held->first)) {
      const PendingView& job = pending->second;
      // Jobs waiting for dependencies or a backoff are not the scheduler's concern: they hold
      // nothing back, reserve nothing, and cost the pass nothing but this check.
      if (Eligible(pending->first, job, now)) {
        in.pending.emplace_back(pending->first, job.request);
        // A submission's jobs share their request and sit together in id order: one reference
        // each, mostly.
        if (in.keep.empty() || in.keep.back().get() != job.request) {
          in.keep.push_back(job.job->request);
        }
        in.job_gens.emplace_back(pending->first, job.gen);
      }
      ++pending;
      continue;
    }
    const HeldView& h = held->second;
    if (h.group && group_limits_.Limited(*h.group)) ++group_running[*h.group];
    snap.running.push_back(h.view);
    in.job_gens.emplace_back(held->first, h.gen);
    ++held;
  }
  for (const auto& [key, dying] : dying_) {
    // An earlier attempt still stopping counts against its group's max_running: it holds resources.
    if (!group_limits_.limits().empty()) {
      auto job = jobs_.find(key.first);
      if (job != jobs_.end() && job->second.row.group &&
          group_limits_.Limited(*job->second.row.group)) {
        ++group_running[*job->second.row.group];
      }
    }
    auto r = std::make_shared<sched::RunningJob>();
    r->id = key.first;
    r->attempt = key.second;
    r->per_node = dying.per_node;
    r->placement = dying.placement;
    r->stopping = true;  // holds resources until its processes are gone; never a victim again
    snap.running.push_back(std::move(r));
  }
  for (const auto& [group, limit] : group_limits_.limits()) {
    auto running = group_running.find(group);
    snap.group_caps[group] = {limit, running == group_running.end() ? 0 : running->second};
  }
  AddShares(snap);
  return in;
}

void Core::ExpandPending(PassInput& in) {
  std::vector<sched::JobRequest>& out = in.snapshot.pending;
  out.reserve(out.size() + in.pending.size());
  for (const auto& [id, request] : in.pending) {
    out.push_back(*request);
    out.back().id = id;
  }
  in.pending = {};
  in.keep = {};
}

// --- The pass index ---
// Every change of a job goes through MutJob (which touches it), and every job added to or erased
// from jobs_ is touched where that happens; an undo touches the jobs it restores. A touched job is
// looked at again before the next snapshot: only then is its view rebuilt, and only if its
// generation moved (an undo restores the generation a view was built at, and the job as it was).

void Core::Touch(int64_t id) {
  if (rebuild_index_) return;
  touched_.insert(id);
  if (touched_.size() > jobs_.size() / 8 + 64) {
    // Changes to more than an eighth of the jobs since the last snapshot (a pass that placed many,
    // or many ended while nothing was pending): one walk of jobs_ in order, reusing the views of
    // the unchanged jobs, costs less than looking each change up (measured: a refresh of 100,000
    // changes took 62-99 ms that way).
    rebuild_index_ = true;
    touched_.clear();
  }
}

void Core::RefreshPassIndex() {
  if (rebuild_index_) {
    std::vector<std::pair<int64_t, HeldView>> out;
    out.reserve(held_index_.size());
    auto was = held_index_.begin();  // views of unchanged jobs are kept
    pending_index_.clear();
    for (auto& [id, job] : jobs_) {
      if (job.row.status == JobStatus::kPending) {
        pending_index_.emplace_back(id, PendingViewOf(job));
        continue;
      }
      while (was != held_index_.end() && was->first < id) ++was;
      std::optional<HeldView> before;
      if (was != held_index_.end() && was->first == id) before = std::move(was++->second);
      if (auto h = IndexJob(id, &job, std::move(before))) out.emplace_back(id, std::move(*h));
    }
    held_index_ = std::move(out);
    rebuild_index_ = false;
    ++index_rebuilds_;
    touched_.clear();
    return;
  }
  // A touched job filed before and after is updated in place; the entries to add or remove (sorted
  // by id, as touched_ is) are merged in with one pass over each vector.
  std::vector<std::pair<int64_t, std::optional<PendingView>>> pending_changes;
  std::vector<std::pair<int64_t, std::optional<HeldView>>> held_changes;
  for (int64_t id : touched_) {
    auto found = jobs_.find(id);
    ActiveJob* job = found == jobs_.end() ? nullptr : &found->second;
    auto was = FindEntry(pending_index_, id);
    const bool was_pending = was != pending_index_.end() && was->first == id;
    std::optional<PendingView> p;
    if (job != nullptr && job->row.status == JobStatus::kPending) p = PendingViewOf(*job);
    if (was_pending && p) {
      was->second = *p;
    } else if (was_pending || p) {
      pending_changes.emplace_back(id, p);  // nullopt: remove
    }
    auto at = FindEntry(held_index_, id);
    const bool present = at != held_index_.end() && at->first == id;
    std::optional<HeldView> h =
        IndexJob(id, job, present ? std::optional<HeldView>(std::move(at->second)) : std::nullopt);
    if (present && h) {
      at->second = std::move(*h);
    } else if (present || h) {
      held_changes.emplace_back(id, std::move(h));  // nullopt: remove
    }
  }
  touched_.clear();
  MergeChanges(pending_index_, pending_changes);
  MergeChanges(held_index_, held_changes);
}

Core::PendingView Core::PendingViewOf(ActiveJob& job) {
  return PendingView{&job, job.request.get(), job.gen, job.row.not_before,
                     !job.spec->depends_on.empty() && job.row.attempt == 0};
}

std::optional<Core::HeldView> Core::IndexJob(int64_t id, ActiveJob* job,
                                             std::optional<HeldView> was) {
  if (job == nullptr || job->row.status == JobStatus::kPending ||
      (!IsActive(job->row.status) && !job->terminating)) {
    return std::nullopt;
  }
  if (was && was->gen == job->gen) return was;
  auto r = std::make_shared<sched::RunningJob>();
  r->id = id;
  r->attempt = job->row.attempt;
  r->user = job->row.user;
  r->priority = job->row.priority;
  r->per_node = job->row.resources;
  r->exclusive = job->spec->exclusive;
  r->placement = job->row.placement;
  r->started_at = job->row.started_at.value_or(job->placed_at);
  r->time_limit = job->spec->time_limit;
  r->stopping = job->terminating;
  const bool time_limited = !job->terminating && job->spec->time_limit.has_value();
  const bool holds_gpus = !job->terminating && job->row.resources.gpu_milli > 0;
  return HeldView{std::move(r), job->gen, job->row.group, time_limited, holds_gpus, job->placed_at};
}

bool Core::PassIndexConsistentForTesting() {
  MutexLock lock(mu_);
  RefreshPassIndex();
  return PassIndexConsistent();
}

int Core::PassIndexRebuildsForTesting() {
  MutexLock lock(mu_);
  return index_rebuilds_;
}

bool Core::PassIndexConsistent() {
  if (!touched_.empty() || rebuild_index_) return false;
  size_t pending = 0;
  size_t held = 0;
  for (auto& [id, job] : jobs_) {
    if (job.row.status == JobStatus::kPending) {
      auto it = FindEntry(pending_index_, id);
      if (it == pending_index_.end() || it->first != id || !(it->second == PendingViewOf(job))) {
        return false;
      }
      ++pending;
    } else if (IsActive(job.row.status) || job.terminating) {
      auto it = FindEntry(held_index_, id);
      if (it == held_index_.end() || it->first != id || it->second.gen != job.gen) return false;
      const sched::RunningJob& r = *it->second.view;
      if (r.attempt != job.row.attempt || r.placement != job.row.placement ||
          r.stopping != job.terminating || r.user != job.row.user ||
          r.started_at != job.row.started_at.value_or(job.placed_at) ||
          it->second.time_limited != (!job.terminating && job.spec->time_limit.has_value()) ||
          it->second.holds_gpus != (!job.terminating && job.row.resources.gpu_milli > 0) ||
          it->second.placed_at != job.placed_at) {
        return false;
      }
      ++held;
    }
  }
  return pending == pending_index_.size() && held == held_index_.size();
}

bool Core::NodesUnchanged(const Placement& placement,
                          const std::unordered_map<std::string, uint64_t>& gens) {
  for (const auto& grant : placement) {
    auto node = nodes_.find(grant.node);
    auto seen = gens.find(grant.node);
    if (node == nodes_.end() || seen == gens.end() || node->second.sched_gen != seen->second) {
      return false;
    }
  }
  return true;
}

void Core::NoteNodeGens(const Placement& placement,
                        std::unordered_map<std::string, uint64_t>& gens) {
  for (const auto& grant : placement) {
    auto node = nodes_.find(grant.node);
    if (node != nodes_.end()) gens[grant.node] = node->second.sched_gen;
  }
}

bool Core::RunPass() {
  const int64_t began = clock_.Monotonic();
  PassInput in;
  std::function<void()> hook;
  {
    MutexLock lock(mu_);
    if (!counts_.AnyPending()) {
      pass_not_before_ = 0;
      return true;  // without a walk of the running jobs
    }
    in = BuildPassInput(clock_.Now());
    hook = pass_hook_;
  }
  ExpandPending(in);

  // The scheduler runs on the copy, without the lock: submissions, reports and cancels go on.
  const auto pass_start = std::chrono::steady_clock::now();
  sched::PassResult result = sched::Schedule(in.snapshot, PassConfig());
  metrics_.pass_seconds.Observe(
      {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count());
  if (hook) hook();
  { waiting_.NewPass(std::make_shared<const sched::Waiting>(std::move(result.waiting))); }

  // Placements first, then preemptions; in chunks, each chunk one commit under one hold of the
  // lock, so that a pass placing 100,000 jobs never holds the lock for long.
  size_t total = result.placements.size() + result.preemptions.size();
  metrics_.passes.Add({total > 0 ? "decided" : "nothing"});
  size_t next = 0;
  bool dropped = false;
  while (next < total) {
    // Between chunks, requests waiting for the lock go first (a submission waits for at most one
    // chunk, not for the whole pass).
    LetWaitingHandlersIn();
    MutexLock lock(mu_);
    TimeMs now = clock_.Now();
    Txn txn;
    std::vector<int64_t> placed;
    size_t end = std::min(total, next + std::max<size_t>(1, options_.pass_commit_chunk));
    for (; next < end; ++next) {
      const bool applied =
          next < result.placements.size()
              ? ApplyPlacement(txn, result.placements[next], in, now)
              : ApplyPreemption(txn, result.preemptions[next - result.placements.size()], in, now);
      if (!applied) {
        dropped = true;
        continue;
      }
      placed.push_back(next < result.placements.size()
                           ? result.placements[next].job
                           : result.preemptions[next - result.placements.size()].preemptor);
    }
    if (placed.empty()) continue;
    LaunchUnblocked(txn);  // preemptors whose victims had nothing left running
    // Committed before anything is sent: an agent never runs an attempt the store does not know.
    txn.out.reap = true;
    Status st = Execute(txn);
    if (!st.ok()) {
      waiting_.Note(placed, "the server could not record its placement (" + st.message() +
                                "); it is retried");
      last_pass_with_work_ = clock_.Monotonic();
      return false;
    }
    waiting_.Placed(placed);
  }
  const int64_t ended = clock_.Monotonic();
  last_pass_with_work_ = ended;
  // A pass that decided nothing paces the next (CoreOptions::fruitless_pass_pacing): until
  // something changes that lets a job start, every pass over a deep queue finds the same, and
  // each submission asks for one.
  pass_not_before_ =
      total > 0 ? 0
                : ended + std::min<int64_t>(options_.max_pass_pacing_ms,
                                            (ended - began) * options_.fruitless_pass_pacing);
  if (dropped) {
    MutexLock lock(mu_);
    RequestPassLocked();  // what changed under the pass is decided again on a fresh snapshot
  }
  return true;
}

sched::Config Core::PassConfig() const {
  sched::Config config;
  config.starvation_bound = options_.starvation_ms;
  config.admission_charge_s = options_.admission_charge_s;
  config.gpu_weights = options_.usage.gpu_weights;
  config.reclaim_limit = options_.reclaim_limit;
  config.reclaim_window = options_.reclaim_window;
  return config;
}

// A decision is applied only on the state the pass saw: the job (and every victim) has the
// generation of the snapshot, and the nodes it uses have not changed since (except by this pass's
// own earlier decisions).
bool Core::AsPassSaw(const PassInput& in, int64_t id) {
  auto it = jobs_.find(id);
  auto seen =
      std::lower_bound(in.job_gens.begin(), in.job_gens.end(), std::make_pair(id, uint64_t{0}));
  return it != jobs_.end() && seen != in.job_gens.end() && seen->first == id &&
         it->second.gen == seen->second;
}

bool Core::ApplyPlacement(Txn& txn, const sched::PlaceDecision& d, PassInput& in, TimeMs now) {
  if (!AsPassSaw(in, d.job) || jobs_.at(d.job).row.status != JobStatus::kPending ||
      !NodesUnchanged(d.placement, in.node_gens)) {
    return false;
  }
  ActiveJob& job = jobs_.at(d.job);
  Place(txn, job, d.placement, "", now);
  SendLaunches(txn, job);
  NoteNodeGens(d.placement, in.node_gens);
  return true;
}

// The victims go back to the queue (or end PREEMPTED, as they asked) and are stopped; the
// preemptor is placed at once on what they free, so that nobody else can take it, but launched
// only when their processes are gone.
bool Core::ApplyPreemption(Txn& txn, const sched::PreemptDecision& d, PassInput& in, TimeMs now) {
  bool valid = AsPassSaw(in, d.preemptor) &&
               jobs_.at(d.preemptor).row.status == JobStatus::kPending &&
               NodesUnchanged(d.placement, in.node_gens);
  for (int64_t v : d.victims) valid = valid && AsPassSaw(in, v);
  if (!valid) return false;
  ActiveJob& job = jobs_.at(d.preemptor);
  std::vector<std::string> victims;
  for (int64_t victim_id : d.victims) {
    ActiveJob& victim = jobs_.at(victim_id);
    if (!IsActive(victim.row.status) || victim.terminating) continue;
    std::string why =
        d.reclaim ? fmt::format("reclaimed by team {} for job {} (its quota)",
                                d.team.empty() ? "(default)" : d.team, job.row.id)
                  : fmt::format("preempted by job {} (priority {})", job.row.id, job.row.priority);
    txn.out.events.preempted.push_back(d.reclaim ? "reclaim" : "priority");
    if (victim.spec->on_preemption == RecoveryAction::kRequeue) {
      ReturnToQueue(txn, victim, why + "; requeued", now, RequeueCause::kPreempted);
    } else {
      EndJob(txn, victim, JobStatus::kPreempted, why, std::nullopt, now);
    }
    victims.push_back(std::to_string(victim_id));
  }
  // The launch waits for every attempt named by the decision (victims, and jobs already stopping
  // whose resources the placement also uses) that still has processes running.
  std::set<AttemptKey> launch_after;
  for (const auto& a : d.launch_after) {
    AttemptKey key{a.job, a.attempt};
    auto t = jobs_.find(a.job);
    bool stopping = t != jobs_.end() && t->second.terminating && t->second.row.attempt == a.attempt;
    if (dying_.count(key) || stopping) launch_after.insert(key);
  }
  Place(txn, job, d.placement,
        (d.reclaim ? " by reclaiming its team's quota from job(s) " : " by preempting job(s) ") +
            Join(victims, ", "),
        now);
  if (d.reclaim) txn.out.reclaims.push_back(d.team);
  NoteNodeGens(d.placement, in.node_gens);
  job.launch_after = std::move(launch_after);
  SaveLaunchHeld(txn);
  launch_held_.insert(job.row.id);
  return true;
}

}  // namespace berth
