// The scheduler loop: builds a snapshot, asks the pure scheduler for decisions, commits them
// (placement and new attempt, one transaction), then queues the launches for the agents. It never
// waits on an agent.
#include <fmt/format.h>

#include "common/log.h"
#include "server/server.h"

namespace berth {

void Server::SchedulerLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    sched_cv_.wait(lock, [this] { return pass_requested_ || stopping_; });
    if (stopping_) return;
    pass_requested_ = false;
    RunPass();
  }
}

std::vector<sched::NodeView> Server::NodeViews() const {
  std::vector<sched::NodeView> views;
  views.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    sched::NodeView v;
    v.name = name;
    v.schedulable = node.row.state == NodeState::kUp && !node.row.draining && !node.session.empty();
    v.pool = node.row.pool;
    v.labels = node.row.labels;
    v.cpus_total = node.row.cpus;
    v.cpus_free = std::max<MilliCpu>(0, node.row.cpus - node.cpus_used);
    v.memory_total = node.row.memory;
    v.memory_free = std::max<Mib>(0, node.row.memory - node.memory_used);
    for (const auto& d : node.row.gpus) {
      auto used = node.gpu_used.find(d.index);
      MilliGpu held = used == node.gpu_used.end() ? 0 : used->second;
      v.gpus.push_back({d.index, d.type, std::max<MilliGpu>(0, kMilliPerGpu - held)});
    }
    views.push_back(std::move(v));
  }
  return views;
}

sched::JobRequest Server::RequestFor(const ActiveJob& job) const {
  sched::JobRequest r;
  r.id = job.row.id;
  r.priority = job.row.priority;
  r.num_nodes = job.row.num_nodes;
  r.per_node = job.row.resources;
  r.pool = job.spec->pool;
  r.node_selector = job.spec->node_selector;
  r.exclusive = job.spec->exclusive;
  r.submitted_at = job.row.submitted_at;
  r.time_limit = job.spec->time_limit;
  return r;
}

sched::Snapshot Server::BuildSnapshot(TimeMs now) const {
  sched::Snapshot snap;
  snap.now = now;
  snap.nodes = NodeViews();
  for (const auto& [id, job] : jobs_) {
    if (job.row.status == JobStatus::kPending) {
      snap.pending.push_back(RequestFor(job));
    } else if (IsActive(job.row.status) || job.terminating) {
      sched::RunningJob r;
      r.id = id;
      r.priority = job.row.priority;
      r.per_node = job.row.resources;
      r.exclusive = job.spec->exclusive;
      r.placement = job.row.placement;
      r.started_at = job.row.started_at.value_or(job.placed_at);
      r.time_limit = job.spec->time_limit;
      r.stopping = job.terminating;
      snap.running.push_back(std::move(r));
    }
  }
  for (const auto& [key, dying] : dying_) {
    sched::RunningJob r;
    r.id = key.first;
    r.per_node = dying.per_node;
    r.placement = dying.placement;
    r.stopping = true;  // holds resources until its processes are gone; never a victim again
    snap.running.push_back(std::move(r));
  }
  return snap;
}

json::object Server::LaunchMessage(const ActiveJob& job, int rank) const {
  json::object m;
  m["type"] = "launch";
  m["job"] = job.row.id;
  m["attempt"] = job.row.attempt;
  m["rank"] = rank;
  m["num_nodes"] = job.row.num_nodes;
  m["spec_id"] = job.row.spec_id;
  m["name"] = job.row.name;
  m["user"] = job.row.user;
  json::array ips;
  json::array gpus;
  for (const auto& grant : job.row.placement) {
    auto it = nodes_.find(grant.node);
    ips.push_back(json::value(it == nodes_.end() ? std::string() : it->second.row.address));
    if (grant.rank == rank) {
      for (const auto& g : grant.gpus) gpus.push_back(g.index);
    }
  }
  m["node_ips"] = std::move(ips);
  m["gpus"] = std::move(gpus);
  m["gpus_per_node"] = job.row.resources.gpu_milli >= kMilliPerGpu
                           ? job.row.resources.gpu_milli / kMilliPerGpu
                           : (job.row.resources.gpu_milli > 0 ? 1 : 0);
  if (job.row.group) {
    m["group"] = *job.row.group;
    m["group_rank"] = job.row.rank.value_or(0);
    m["num_jobs"] = job.group_size;
  }
  m["kill_grace_ms"] = job.spec->kill_grace.value_or(options_.kill_grace_ms);
  return m;
}

void Server::Place(ActiveJob& job, const Placement& placement, const std::string& how, TimeMs now,
                   Batch& batch) {
  job.row.attempt += 1;
  job.row.placement = placement;
  job.row.started_at.reset();
  job.row.ended_at.reset();
  job.row.exit_code.reset();
  job.ranks.assign(static_cast<size_t>(job.row.num_nodes), RankState{});
  job.placed_at = now;
  {
    std::lock_guard lock(waiting_mu_);
    waiting_.erase(job.row.id);
  }
  std::vector<std::string> where;
  for (const auto& g : placement) {
    where.push_back(g.gpus.empty() ? g.node
                                   : fmt::format("{} (GPU {})", g.node, CudaVisibleDevices(g)));
  }
  Transition(job, JobStatus::kStarting, "placed on " + Join(where, ", ") + how, now, batch);
  AttemptRow attempt;
  attempt.attempt = job.row.attempt;
  attempt.placement = job.row.placement;
  attempt.placed_at = now;
  batch.attempts.push_back({job.row.id, attempt});
  Allocate(job.row, +1);
}

void Server::RunPass() {
  TimeMs now = clock_.Now();
  bool any_pending = false;
  for (const auto& [id, job] : jobs_)
    any_pending = any_pending || job.row.status == JobStatus::kPending;
  if (!any_pending) return;

  sched::Config config;
  config.starvation_bound = options_.starvation_ms;
  sched::PassResult result = sched::Schedule(BuildSnapshot(now), config);

  Batch batch;
  std::vector<int64_t> placed;
  for (const auto& decision : result.placements) {
    auto it = jobs_.find(decision.job);
    if (it == jobs_.end()) continue;
    ActiveJob& job = it->second;
    Place(job, decision.placement, "", now, batch);
    placed.push_back(job.row.id);
  }
  // Preemptions: the victims go back to the queue (or end PREEMPTED, as they asked) and are
  // stopped; the preemptor is placed at once on what they free, so that nobody else can take it,
  // but launched only when their processes are gone.
  std::vector<int64_t> held;
  for (const auto& decision : result.preemptions) {
    auto it = jobs_.find(decision.preemptor);
    if (it == jobs_.end()) continue;
    ActiveJob& job = it->second;
    std::vector<std::string> victims;
    for (int64_t victim_id : decision.victims) {
      auto v = jobs_.find(victim_id);
      if (v == jobs_.end() || !IsActive(v->second.row.status) || v->second.terminating) continue;
      ActiveJob& victim = v->second;
      std::string why =
          fmt::format("preempted by job {} (priority {})", job.row.id, job.row.priority);
      std::pair<int64_t, int> key{victim.row.id, victim.row.attempt};
      if (victim.spec->on_preemption == RecoveryAction::kRequeue) {
        Requeue(victim, why + "; requeued", now, batch);
        if (dying_.count(key)) job.launch_after.insert(key);
      } else {
        EndJob(victim, JobStatus::kPreempted, why, std::nullopt, now, batch);
        if (victim.terminating) job.launch_after.insert(key);
      }
      victims.push_back(std::to_string(victim_id));
    }
    // Jobs already stopping whose resources this placement also uses must be gone first, too.
    for (int64_t stopping : decision.waits_for) {
      for (const auto& [key, dying] : dying_) {
        if (key.first == stopping) job.launch_after.insert(key);
      }
      auto t = jobs_.find(stopping);
      if (t != jobs_.end() && t->second.terminating)
        job.launch_after.insert({stopping, t->second.row.attempt});
    }
    launch_held_.insert(job.row.id);
    Place(job, decision.placement, " by preempting job(s) " + Join(victims, ", "), now, batch);
    held.push_back(job.row.id);
  }
  {
    std::lock_guard lock(waiting_mu_);
    for (auto& [id, reason] : result.waiting) waiting_[id] = std::move(reason);
  }
  if (placed.empty() && held.empty()) return;
  // Committed before anything is sent: an agent never runs an attempt the store does not know.
  Status st = CommitLocked(batch);
  if (!st.ok()) {
    LogError("committing placements failed, undoing them: {}", st.message());
    for (int64_t id : placed) {
      ActiveJob& job = jobs_.at(id);
      Allocate(job.row, -1);
      job.row.attempt -= 1;
      job.row.placement.clear();
      job.row.status = JobStatus::kPending;
      std::lock_guard lock(waiting_mu_);
      waiting_[id] = "the server could not record its placement: " + st.message();
    }
    return;
  }
  for (int64_t id : placed) {
    const ActiveJob& job = jobs_.at(id);
    for (const auto& grant : job.row.placement) {
      auto node = nodes_.find(grant.node);
      if (node != nodes_.end()) SendToNode(node->second, LaunchMessage(job, grant.rank));
    }
  }
  ReapFinished();
  LaunchUnblocked();  // preemptors whose victims had nothing left running
}

}  // namespace berth
