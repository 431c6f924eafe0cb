// Scheduling passes: a snapshot copied under the lock, the pure scheduler run without it, and its
// decisions applied under the lock in chunks, each chunk one commit, with a generation check.
#include <fmt/format.h>

#include <chrono>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "server/core/core.h"

namespace berth {

Core::PassInput Core::BuildPassInput(TimeMs now) {
  PassInput in;
  sched::Snapshot& snap = in.snapshot;
  snap.now = now;
  snap.nodes.reserve(nodes_.size());
  for (auto& [name, node] : nodes_) {
    snap.nodes.push_back(NodeTable::ViewOf(node));
    in.node_gens.emplace(name, node.sched_gen);
  }
  std::map<int64_t, int> group_running;
  // This runs under the lock, so a submission waits for it: no reallocation of 100,000 requests,
  // no hash table of their generations (sorted by id, as jobs_ is, and searched).
  snap.pending.reserve(jobs_.size());
  in.job_gens.reserve(jobs_.size());
  for (auto& [id, job] : jobs_) {
    if (job.row.status == JobStatus::kPending) {
      job.running_view.reset();
      // Jobs waiting for dependencies or a backoff are not the scheduler's concern: they hold
      // nothing back, reserve nothing, and cost the pass nothing but this check.
      if (!Eligible(job, now)) continue;
      snap.pending.push_back(*job.request);
      snap.pending.back().id = id;
      in.job_gens.emplace_back(id, job.gen);
    } else if (IsActive(job.row.status) || job.terminating) {
      if (job.row.group && group_limits_.Limited(*job.row.group)) {
        ++group_running[*job.row.group];
      }
      snap.running.push_back(RunningView(job));
      in.job_gens.emplace_back(id, job.gen);
    }
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

// Every change of a job bumps its generation (MutJob), and an undo restores the job with the view
// it had: a view built at the job's current generation is still the job as it is.
std::shared_ptr<const sched::RunningJob> Core::RunningView(ActiveJob& job) {
  if (job.running_view && job.running_view_gen == job.gen) return job.running_view;
  auto r = std::make_shared<sched::RunningJob>();
  r->id = job.row.id;
  r->attempt = job.row.attempt;
  r->user = job.row.user;
  r->priority = job.row.priority;
  r->per_node = job.row.resources;
  r->exclusive = job.spec->exclusive;
  r->placement = job.row.placement;
  r->started_at = job.row.started_at.value_or(job.placed_at);
  r->time_limit = job.spec->time_limit;
  r->stopping = job.terminating;
  job.running_view = std::move(r);
  job.running_view_gen = job.gen;
  return job.running_view;
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
  PassInput in;
  std::function<void()> hook;
  {
    MutexLock lock(mu_);
    if (!counts_.AnyPending()) return true;  // without a walk of the running jobs
    in = BuildPassInput(clock_.Now());
    hook = pass_hook_;
  }

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
  size_t next = 0;
  bool dropped = false;
  while (next < total) {
    // Between chunks, requests waiting for the lock go first (a submission waits for at most one
    // chunk, not for the whole pass).
    for (int i = 0; i < 100 && handlers_waiting_.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    MutexLock lock(mu_);
    TimeMs now = clock_.Now();
    Plan plan;
    std::vector<int64_t> placed;
    size_t end = std::min(total, next + std::max<size_t>(1, options_.pass_commit_chunk));
    for (; next < end; ++next) {
      const bool applied =
          next < result.placements.size()
              ? ApplyPlacement(plan, result.placements[next], in, now)
              : ApplyPreemption(plan, result.preemptions[next - result.placements.size()], in, now);
      if (!applied) {
        dropped = true;
        continue;
      }
      placed.push_back(next < result.placements.size()
                           ? result.placements[next].job
                           : result.preemptions[next - result.placements.size()].preemptor);
    }
    if (placed.empty()) continue;
    LaunchUnblocked(plan);  // preemptors whose victims had nothing left running
    // Committed before anything is sent: an agent never runs an attempt the store does not know.
    plan.reap = true;
    Status st = Execute(plan);
    if (!st.ok()) {
      waiting_.Note(placed, "the server could not record its placement (" + st.message() +
                                "); it is retried");
      last_pass_with_work_ = clock_.Monotonic();
      return false;
    }
    waiting_.Placed(placed);
  }
  last_pass_with_work_ = clock_.Monotonic();
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

bool Core::ApplyPlacement(Plan& plan, const sched::PlaceDecision& d, PassInput& in, TimeMs now) {
  if (!AsPassSaw(in, d.job) || jobs_.at(d.job).row.status != JobStatus::kPending ||
      !NodesUnchanged(d.placement, in.node_gens)) {
    return false;
  }
  ActiveJob& job = jobs_.at(d.job);
  Place(plan, job, d.placement, "", now);
  SendLaunches(plan, job);
  NoteNodeGens(d.placement, in.node_gens);
  return true;
}

// The victims go back to the queue (or end PREEMPTED, as they asked) and are stopped; the
// preemptor is placed at once on what they free, so that nobody else can take it, but launched
// only when their processes are gone.
bool Core::ApplyPreemption(Plan& plan, const sched::PreemptDecision& d, PassInput& in, TimeMs now) {
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
    plan.events.preempted.push_back(d.reclaim ? "reclaim" : "priority");
    if (victim.spec->on_preemption == RecoveryAction::kRequeue) {
      ReturnToQueue(plan, victim, why + "; requeued", now, RequeueCause::kPreempted);
    } else {
      EndJob(plan, victim, JobStatus::kPreempted, why, std::nullopt, now);
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
  Place(plan, job, d.placement,
        (d.reclaim ? " by reclaiming its team's quota from job(s) " : " by preempting job(s) ") +
            Join(victims, ", "),
        now);
  if (d.reclaim) plan.reclaims.push_back(d.team);
  NoteNodeGens(d.placement, in.node_gens);
  job.launch_after = std::move(launch_after);
  SaveLaunchHeld(plan);
  launch_held_.insert(job.row.id);
  return true;
}

}  // namespace berth
