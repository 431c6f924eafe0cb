// Scheduling: the passes (snapshot under the lock, decide without it, apply in chunks) and fair
// share.
#include "server/core/scheduling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/json_util.h"
#include "common/log.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "net/tls.h"
#include "server/core/mig_changes.h"

namespace berth {

Scheduling::PassInput Scheduling::BuildPassInput(TimeMs now) {
  PassInput in;
  // What changed in the pass index since the last pass: the lock is held in proportion to that,
  // not to the queue (pass_mirror.h). Expand walks the mirror after the lock is released.
  in.delta = books_.TakePassDelta();
  assert(books_.PassIndexConsistent());
  sched::Snapshot& snap = in.snapshot;
  snap.now = now;
  in.nodes.reserve(s_.nodes.size());
  for (auto& [name, node] : s_.nodes) {
    NodeTable::ViewOf(node);
    in.nodes.emplace_back(node.view, node.sched_gen);
  }
  // What decides, at the mirror's walk, whether a pending job is the scheduler's concern (jobs
  // waiting for dependencies or a backoff hold nothing back and reserve nothing).
  for (const auto& [id, why] : s_.owed_cancels) in.owed_cancels.insert(id);
  auto met = [&](int64_t spec) {
    s_.AssertHeld();
    const sched::Dependencies::Waiter* w = s_.waiters.Find(spec);
    // No waiter: its dependencies could not be read at start-up; it waits rather than run early.
    if (w != nullptr && w->state == sched::DepState::kMet) in.met_specs.insert(spec);
  };
  for (int64_t spec : mirror_.AwaitedSpecs()) met(spec);
  for (const auto& [id, p] : in.delta.pending) {
    if (p && p->awaits_spec) met(*p->awaits_spec);
  }
  in.group_limits = s_.group_limits.limits();
  for (const auto& [key, dying] : s_.dying) {
    // An earlier attempt still stopping counts against its group's max_running: it holds resources.
    if (!in.group_limits.empty()) {
      auto job = s_.jobs.find(key.first);
      if (job != s_.jobs.end() && job->second.row.group &&
          s_.group_limits.Limited(*job->second.row.group)) {
        ++in.group_running[*job->second.row.group];
      }
    }
    auto r = std::make_shared<sched::RunningJob>();
    r->id = key.first;
    r->attempt = key.second;
    r->per_node = dying.per_node;
    r->placement = dying.placement;
    r->stopping = true;  // holds resources until its processes are gone; never a victim again
    in.dying.push_back(std::move(r));
  }
  AddShares(snap);
  AddReservedWindows(snap);
  return in;
}

void Scheduling::AddReservedWindows(sched::Snapshot& snap) {
  TimeMs next = 0;  // the soonest start or end after now
  for (const auto& [name, r] : s_.reservations) {
    std::optional<Window> w = WindowOf(r, snap.now);
    if (!w) continue;
    snap.reserved.push_back(ViewOf(r, *w));
    for (TimeMs at : {w->start, w->end}) {
      if (at > snap.now && (next == 0 || at < next)) next = at;
    }
  }
  s_.next_window_change = next;
}

void Scheduling::Expand(PassInput& in) {
  in.snapshot.nodes.reserve(in.nodes.size());
  in.node_gens.reserve(in.nodes.size());
  for (const auto& [view, gen] : in.nodes) {
    in.snapshot.nodes.push_back(*view);
    in.node_gens.emplace(view->name, gen);
  }
  in.nodes = {};
  mirror_.Apply(std::move(in.delta));
  const PassMirror::PendingEntries& pending = mirror_.pending();
  const PassMirror::HeldEntries& held = mirror_.held();
  sched::Snapshot& snap = in.snapshot;
  // The requests are shared, not copied (copying 755,621 of them made this take 1-1.9 s a pass).
  snap.shared_pending.reserve(pending.size());
  snap.running.reserve(held.size() + in.dying.size());
  in.job_gens.reserve(pending.size() + held.size());
  auto p = pending.begin();
  auto h = held.begin();
  while (p != pending.end() || h != held.end()) {
    if (h == held.end() || (p != pending.end() && p->first < h->first)) {
      const auto& [id, job] = *p++;
      if (!PassEligible(id, job, snap.now, in.owed_cancels, in.met_specs)) continue;
      snap.shared_pending.push_back({id, job.request});
      in.job_gens.emplace_back(id, job.gen);
      continue;
    }
    const auto& [id, job] = *h++;
    if (job.group && in.group_limits.count(*job.group)) ++in.group_running[*job.group];
    snap.running.push_back(job.view);
    in.job_gens.emplace_back(id, job.gen);
  }
  for (auto& r : in.dying) snap.running.push_back(std::move(r));
  in.dying = {};
  for (const auto& [group, limit] : in.group_limits) {
    auto running = in.group_running.find(group);
    snap.group_caps[group] = {limit, running == in.group_running.end() ? 0 : running->second};
  }
}

bool Scheduling::NodesUnchanged(const Placement& placement,
                                const std::unordered_map<std::string, uint64_t>& gens) {
  for (const auto& grant : placement) {
    auto node = s_.nodes.find(grant.node);
    auto seen = gens.find(grant.node);
    if (node == s_.nodes.end() || seen == gens.end() || node->second.sched_gen != seen->second) {
      return false;
    }
  }
  return true;
}

void Scheduling::NoteNodeGens(const Placement& placement,
                              std::unordered_map<std::string, uint64_t>& gens) {
  for (const auto& grant : placement) {
    auto node = s_.nodes.find(grant.node);
    if (node != s_.nodes.end()) gens[grant.node] = node->second.sched_gen;
  }
}

namespace {

// Observes, when it goes, how long its scope held the state lock: declare it just after the
// CoreLock.
class LockHoldTimer {
 public:
  LockHoldTimer(metrics::HistogramFamily& family, const char* phase)
      : family_(family), phase_(phase), start_(std::chrono::steady_clock::now()) {}
  ~LockHoldTimer() {
    family_.Observe(
        {phase_}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  LockHoldTimer(const LockHoldTimer&) = delete;
  LockHoldTimer& operator=(const LockHoldTimer&) = delete;

 private:
  metrics::HistogramFamily& family_;
  const char* phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

bool Scheduling::RunPass() {
  MutexLock pass(pass_mu_);  // one pass at a time: the mirror is the pass's
  const int64_t began = s_.clock.Monotonic();
  PassInput in;
  std::function<void()> hook;
  {
    CoreLock lock(s_);
    if (!s_.counts.AnyPending()) {
      s_.pass_not_before = 0;
      return true;  // without a walk of the running jobs
    }
    LockHoldTimer hold(s_.metrics.pass_lock_hold_seconds, "snapshot");
    in = BuildPassInput(s_.clock.Now());
    hook = s_.pass_hook;
  }
  Expand(in);

  // The scheduler runs on the copy, without the lock: submissions, reports and cancels go on.
  const auto pass_start = std::chrono::steady_clock::now();
  sched::PassResult result = sched::Schedule(in.snapshot, PassConfig());
  s_.metrics.pass_seconds.Observe(
      {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count());
  if (hook) hook();
  { s_.waiting.NewPass(std::make_shared<const sched::Waiting>(std::move(result.waiting))); }

  // Placements first, then preemptions; in chunks, each chunk one commit under one hold of the
  // lock, so that a pass placing 100,000 jobs never holds the lock for long.
  size_t total = result.placements.size() + result.preemptions.size();
  s_.metrics.passes.Add({total > 0 ? "decided" : "nothing"});
  size_t next = 0;
  bool dropped = false;
  while (next < total) {
    // Between chunks, requests waiting for the lock go first (a submission waits for at most one
    // chunk, not for the whole pass).
    s_.LetWaitingHandlersIn();
    CoreLock lock(s_);
    LockHoldTimer hold(s_.metrics.pass_lock_hold_seconds, "commit");
    TimeMs now = s_.clock.Now();
    Txn txn;
    std::vector<int64_t> placed;
    size_t end = std::min(total, next + std::max<size_t>(1, s_.options.pass_commit_chunk));
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
    life_.LaunchUnblocked(txn);  // preemptors whose victims had nothing left running
    // Committed before anything is sent: an agent never runs an attempt the store does not know.
    txn.out.reap = true;
    Status st = s_.Execute(txn);
    if (!st.ok()) {
      s_.waiting.Note(placed, "the server could not record its placement (" + st.message() +
                                  "); it is retried");
      s_.last_pass_with_work = s_.clock.Monotonic();
      return false;
    }
    s_.waiting.Placed(placed);
  }
  PlanMigChanges(s_, in.snapshot);  // slices no free one offers: an idle GPU re-sliced?
  const int64_t ended = s_.clock.Monotonic();
  s_.last_pass_with_work = ended;
  // A pass that decided nothing paces the next (CoreOptions::fruitless_pass_pacing): until
  // something changes that lets a job start, every pass over a deep queue finds the same, and
  // each submission asks for one.
  s_.pass_not_before =
      total > 0 ? 0
                : ended + std::min<int64_t>(s_.options.max_pass_pacing_ms,
                                            (ended - began) * s_.options.fruitless_pass_pacing);
  if (dropped) {
    CoreLock lock(s_);
    s_.RequestPassLocked();  // what changed under the pass is decided again on a fresh snapshot
  }
  return true;
}

sched::Config Scheduling::PassConfig() const {
  sched::Config config;
  config.starvation_bound = s_.options.starvation_ms;
  config.admission_charge_s = s_.options.admission_charge_s;
  config.gpu_weights = s_.options.usage.gpu_weights;
  config.reclaim_limit = s_.options.reclaim_limit;
  config.reclaim_window = s_.options.reclaim_window;
  config.topology_levels = s_.options.topology_levels;
  return config;
}

// A decision is applied only on the state the pass saw: the job (and every victim) has the
// generation of the snapshot, and the nodes it uses have not changed since (except by this pass's
// own earlier decisions).
bool Scheduling::AsPassSaw(const PassInput& in, int64_t id) {
  auto it = s_.jobs.find(id);
  auto seen =
      std::lower_bound(in.job_gens.begin(), in.job_gens.end(), std::make_pair(id, uint64_t{0}));
  return it != s_.jobs.end() && seen != in.job_gens.end() && seen->first == id &&
         it->second.gen == seen->second;
}

bool Scheduling::ApplyPlacement(Txn& txn, const sched::PlaceDecision& d, PassInput& in,
                                TimeMs now) {
  if (!AsPassSaw(in, d.job) || s_.jobs.at(d.job).row.status != JobStatus::kPending ||
      !NodesUnchanged(d.placement, in.node_gens)) {
    return false;
  }
  ActiveJob& job = s_.jobs.at(d.job);
  life_.Place(txn, job, d.placement, "", now);
  life_.SendLaunches(txn, job);
  NoteNodeGens(d.placement, in.node_gens);
  return true;
}

// The victims go back to the queue (or end PREEMPTED, as they asked) and are stopped; the
// preemptor is placed at once on what they free, so that nobody else can take it, but launched
// only when their processes are gone.
bool Scheduling::ApplyPreemption(Txn& txn, const sched::PreemptDecision& d, PassInput& in,
                                 TimeMs now) {
  bool valid = AsPassSaw(in, d.preemptor) &&
               s_.jobs.at(d.preemptor).row.status == JobStatus::kPending &&
               NodesUnchanged(d.placement, in.node_gens);
  for (int64_t v : d.victims) valid = valid && AsPassSaw(in, v);
  if (!valid) return false;
  ActiveJob& job = s_.jobs.at(d.preemptor);
  std::vector<std::string> victims;
  for (int64_t victim_id : d.victims) {
    ActiveJob& victim = s_.jobs.at(victim_id);
    if (!IsActive(victim.row.status) || victim.terminating) continue;
    std::string why =
        d.reclaim ? fmt::format("reclaimed by team {} for job {} (its quota)",
                                d.team.empty() ? "(default)" : d.team, job.row.id)
                  : fmt::format("preempted by job {} (priority {})", job.row.id, job.row.priority);
    txn.out.events.preempted.push_back(d.reclaim ? "reclaim" : "priority");
    if (victim.spec->on_preemption == RecoveryAction::kRequeue) {
      life_.ReturnToQueue(txn, victim, why + "; requeued", now,
                          Lifecycle::RequeueCause::kPreempted);
    } else {
      life_.EndJob(txn, victim, JobStatus::kPreempted, why, std::nullopt, now);
    }
    victims.push_back(std::to_string(victim_id));
  }
  // The launch waits for every attempt named by the decision (victims, and jobs already stopping
  // whose resources the placement also uses) that still has processes running.
  std::set<AttemptKey> launch_after;
  for (const auto& a : d.launch_after) {
    AttemptKey key{a.job, a.attempt};
    auto t = s_.jobs.find(a.job);
    bool stopping =
        t != s_.jobs.end() && t->second.terminating && t->second.row.attempt == a.attempt;
    if (s_.dying.count(key) || stopping) launch_after.insert(key);
  }
  life_.Place(
      txn, job, d.placement,
      (d.reclaim ? " by reclaiming its team's quota from job(s) " : " by preempting job(s) ") +
          Join(victims, ", "),
      now);
  if (d.reclaim) txn.out.reclaims.push_back(d.team);
  NoteNodeGens(d.placement, in.node_gens);
  job.launch_after = std::move(launch_after);
  s_.SaveLaunchHeld(txn);
  s_.launch_held.insert(job.row.id);
  return true;
}

void Scheduling::RequestPass() {
  CoreLock lock(s_);
  s_.RequestPassLocked();
}

bool Scheduling::WaitForPassRequest(DurationMs timeout_ms) {
  CoreLock lock(s_);
  if (!s_.backoffs.empty()) {
    // A restart's backoff ends: wake for it (wall time, as stored).
    timeout_ms =
        std::clamp<DurationMs>(s_.backoffs.begin()->first - s_.clock.Now() + 1, 0, timeout_ms);
  }
  if (!s_.pass_requested && !s_.shutdown && timeout_ms > 0) s_.pass_cv.WaitFor(s_.mu, timeout_ms);
  for (TimeMs now = s_.clock.Now(); !s_.backoffs.empty() && s_.backoffs.begin()->first <= now;) {
    s_.backoffs.erase(s_.backoffs.begin());
    s_.pass_requested = true;
  }
  if (!s_.shutdown && !s_.pass_requested && s_.next_window_change > 0 &&
      s_.clock.Now() >= s_.next_window_change) {
    s_.pass_requested = true;  // a reservation's window starts or ends (docs/reservations.md)
  }
  if (!s_.shutdown && !s_.pass_requested) {
    // A reclaim leaving its team's rate-limit window may let a job held by the limit reclaim now;
    // nothing else would start a pass for it (no job or node changed).
    if (s_.shares.ExpireReclaims(s_.clock.Now())) s_.pass_requested = true;
  }
  if (s_.shutdown || !s_.pass_requested) return false;
  if (int64_t paced = s_.pass_not_before - s_.clock.Monotonic(); paced > 0) {
    // Woken early only by Shutdown: further requests do not signal while one is pending.
    if (timeout_ms > 0) s_.pass_cv.WaitFor(s_.mu, std::min(paced, timeout_ms));
    if (s_.shutdown || s_.clock.Monotonic() < s_.pass_not_before) return false;
  }
  s_.pass_requested = false;
  return true;
}

void Scheduling::SetShareRules(const std::vector<UserRow>& users,
                               const std::vector<TeamRow>& teams) {
  CoreLock lock(s_);
  s_.shares.SetRules(users, teams);
  books_.RecountAllJobs();  // users may have changed teams
  s_.RequestPassLocked();   // a new quota or cap may let jobs start, or hold them
}

Status Scheduling::LoadUsage() {
  const TimeMs now = s_.clock.Now();
  // Ten half-lives back: what is older weighs less than a thousandth.
  auto buckets = s_.store.LoadUsageBuckets(now - 10 * s_.options.usage.half_life_ms);
  if (!buckets.ok()) return buckets.status();
  CoreLock lock(s_);
  for (const UsageBucket& b : *buckets) s_.shares.AddBucket(b);
  LogInfo("loaded {} hours of usage for fair share", buckets->size());
  return Status::Ok();
}

void Scheduling::AddShares(sched::Snapshot& snap) {
  // Running attempts count for what they used so far (the admission charge is the pass's).
  // From the pass index (current: BuildPassInput refreshed it), without looking each job up.
  std::vector<FairShare::Running> running;
  for (const auto& [id, held] : s_.held_index) {
    if (!held.holds_gpus) continue;
    const sched::RunningJob& r = *held.view;
    running.push_back(
        {r.user, s_.shares.RunningUse(r.per_node.gpu_type, TotalGpuMilli(r.per_node, r.placement),
                                      held.placed_at, snap.now)});
  }
  s_.shares.AddTo(snap, running);
}

bool Scheduling::MirrorMatchesIndexForTesting() {
  MutexLock pass(pass_mu_);
  CoreLock lock(s_);
  mirror_.Apply(books_.TakePassDelta());
  auto same = [](const auto& index, const auto& mirror, auto mirrored) {
    return std::equal(index.begin(), index.end(), mirror.begin(), mirror.end(),
                      [&](const auto& a, const auto& b) {
                        return a.first == b.first && mirrored(a.second) == b.second;
                      });
  };
  return same(s_.pending_index, mirror_.pending(),
              [](const PendingView& p) { return JobBooks::Mirrored(p); }) &&
         same(s_.held_index, mirror_.held(),
              [](const HeldView& h) { return JobBooks::Mirrored(h); });
}

void Scheduling::SetPassHookForTesting(std::function<void()> hook) {
  CoreLock lock(s_);
  s_.pass_hook = std::move(hook);
}

}  // namespace berth
