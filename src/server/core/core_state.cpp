// CoreState: the one transaction (commit, then apply, then send) and the specs.
#include "server/core/core_state.h"

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
#include "common/resources.h"
#include "common/strings.h"
#include "net/tls.h"
#include "server/core/notices.h"

namespace berth {

bool GoneForGood(const NodeRow& row, TimeMs now, DurationMs retention) {
  if (retention <= 0 || row.state != NodeState::kDown) return false;
  return row.down_since.value_or(row.last_seen) < now - retention;
}

CoreState::CoreState(CoreOptions options_in, Store& store_in, const Clock& clock_in,
                     AgentChannel& channel_in)
    : options(std::move(options_in)),
      store(store_in),
      clock(clock_in),
      channel(channel_in),
      shares(options.usage, options.reclaim_window) {}

sched::JobRequest CoreState::RequestFor(const JobRow& row, const JobSpec& spec) const {
  sched::JobRequest r;
  r.id = row.id;
  r.user = row.user;
  r.priority = row.priority;
  r.num_nodes = row.num_nodes;
  r.per_node = row.resources;
  r.pool = spec.pool;
  r.node_selector = spec.node_selector;
  // Only nodes whose agent found a container runtime run a job with an image.
  if (spec.container) {
    r.node_selector.emplace(kContainerRuntimeLabel, "podman");
    // ... and allow what it mounts, where some nodes do and some do not.
    for (const std::string& mount : spec.container->mounts) {
      r.container_mounts.push_back(mount.substr(0, mount.find(':')));
    }
  }
  r.exclusive = spec.exclusive;
  // Levels by their index in the cluster's (a name it no longer defines: the job waits, saying so).
  auto level = [&](const std::string& name) {
    if (name.empty()) return -1;
    const auto& levels = options.topology_levels;
    auto it = std::find(levels.begin(), levels.end(), name);
    return it == levels.end() ? sched::kUndefinedLevel : static_cast<int>(it - levels.begin());
  };
  r.topology = {level(spec.topology_required), level(spec.topology_preferred)};
  r.submitted_at = row.submitted_at;
  r.time_limit = spec.time_limit;
  r.group = row.group;
  r.reservation = spec.reservation;
  return r;
}

std::shared_ptr<const JobSpec> CoreState::SpecFor(int64_t spec_id) {
  if (auto spec = specs.Find(spec_id)) return spec;
  std::shared_ptr<const JobSpec> shared = ReadSpec(spec_id);
  if (shared) RememberSpec(spec_id, shared);
  return shared;
}

std::shared_ptr<const JobSpec> CoreState::ReadSpec(int64_t spec_id) {
  auto text = store.GetSpec(spec_id);
  if (!text.ok()) return nullptr;
  auto value = ParseJson(*text, "stored spec");
  if (!value.ok()) return nullptr;
  auto spec = SpecFromJson(*value);
  if (!spec.ok()) return nullptr;
  // Not make_shared: a weak reference left in specs_ must not keep the spec's memory.
  return std::shared_ptr<const JobSpec>(new JobSpec(std::move(*spec)));
}

void CoreState::RememberSpec(int64_t spec_id, const std::shared_ptr<const JobSpec>& spec) {
  specs.Remember(spec_id, spec);
}

ActiveJob& CoreState::MutJob(Txn& txn, ActiveJob& job) { return jobs.Edit(txn, job); }

void CoreState::SaveDying(Txn& txn, const AttemptKey& key) { txn.journal.Save(dying, key); }

void CoreState::SaveLaunchHeld(Txn& txn) { txn.journal.SaveValue(launch_held); }

Status CoreState::Execute(Txn& txn) {
  if (!txn.notice_groups.empty()) AddGroupSummaries(*this, txn, clock.Now());
  if (!txn.batch.empty()) {
    const auto start = std::chrono::steady_clock::now();
    Status st = store.Commit(txn.batch);
    metrics.commit_seconds.Observe(
        {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!st.ok()) {
      Undo(txn);
      LogError("a change could not be recorded and was dropped: {}", st.message());
      return Status::Unavailable("the server could not record the change (" + st.message() +
                                 "); nothing was changed, try again");
    }
  }
  CountCommitted(txn);
  SendCommitted(txn);
  return Status::Ok();
}

void CoreState::CountCommitted(const Txn& txn) {
  for (const auto& [group, from, to] : txn.out.tally_moves) tallies.Move(group, from, to);
  for (const UsageRecord& u : txn.batch.usage) {
    shares.AddEnded(u);
    const double seconds = static_cast<double>(u.ended_at - u.placed_at) / 1000;
    if (u.gpu_milli > 0) {
      const double gpu_seconds = seconds * static_cast<double>(u.gpu_milli) / kMilliPerGpu;
      metrics.user_gpu_seconds.Add({u.user, u.team, u.gpu_type}, gpu_seconds);
      const std::optional<SliceShare> slice = SliceShareOf(u.gpu_type);
      metrics.user_whole_gpu_seconds.Add({u.user, u.team, slice ? slice->gpu_type : u.gpu_type},
                                         slice ? gpu_seconds * slice->sevenths / 7 : gpu_seconds);
    }
    metrics.user_cpu_seconds.Add({u.user, u.team},
                                 seconds * static_cast<double>(u.cpu_milli) / kMilliPerCpu);
  }
  for (const auto& [status, run] : txn.out.events.finished) {
    metrics.jobs_finished.Add({status});
    if (run >= 0) metrics.job_run_seconds.Observe({status}, run);
  }
  for (const auto& [team, waited] : txn.out.events.placed) {
    metrics.launches.Add({});
    metrics.admission_wait_seconds.Observe({team}, waited);
  }
  for (const std::string& reason : txn.out.events.preempted) metrics.preemptions.Add({reason});
  if (txn.out.events.lease_expiries > 0)
    metrics.lease_expiries.Add({}, txn.out.events.lease_expiries);
  if (txn.out.events.out_of_memory > 0) metrics.out_of_memory.Add({}, txn.out.events.out_of_memory);
  for (const std::string& team : txn.out.reclaims) shares.Reclaimed(team, clock.Now());
  for (const auto& hint : txn.out.backoffs) backoffs.insert(hint);
}

void CoreState::SendCommitted(const Txn& txn) {
  if (!txn.out.deps_changed.empty()) WriteDependencyReasons(txn.out.deps_changed);
  for (const auto& [node, session] : txn.out.opens) {
    channel.Open(node, session);
    specs.SessionChanged(node);  // a new session: the agent may have restarted
  }
  for (const auto& node : txn.out.closes) {
    channel.Close(node);
    specs.SessionChanged(node);
  }
  for (const auto& [node, message] : txn.out.sends) {
    if (const auto* launch = std::get_if<proto::LaunchMessage>(&message)) {
      SendSpecOnce(node, launch->spec_id);
    }
    channel.Send(node, message);
  }
  for (int64_t job : txn.out.wake_logs) WakeLogWaiters(job);
  if (txn.out.reap) ReapFinished(txn);
  if (txn.out.kick) RequestPassLocked();
  if (txn.out.notices && notice_bell) notice_bell();
}

void CoreState::SendSpecOnce(const std::string& node, int64_t spec_id) {
  auto spec = specs.Find(spec_id);
  if (!spec) return;  // the agent fetches it
  if (!specs.NeedsSending(node, spec_id)) return;
  channel.Send(node, proto::SpecMessage{spec_id, SerializeJson(SpecToJson(*spec))});
}

void CoreState::Undo(Txn& txn) {
  // The job table goes first: its restores tell the observers (JobBooks, group limits, waiters),
  // whose own saved entries are then put back over what those notices changed.
  txn.journal.Undo();
  waiters.TakeGone();  // a waiter forgotten by an undone entry is not one the board forgets
  // Generations are restored with their entries: the state is again exactly what any pass in
  // flight saw, so its decisions stay valid.
}

void CoreState::ReapFinished(const Txn& txn) {
  // Only a job the txn changed can have become finished (every change goes through
  // JobTable::Edit, which saves it in the journal): look at those, not at every job (a chunked
  // cancel of 100,000 jobs walked all of them once per chunk).
  const auto* changed = txn.journal.Saved(jobs);
  if (changed == nullptr) return;
  std::vector<int64_t> reaped;
  for (const auto& [id, before] : *changed) {
    auto it = jobs.find(id);
    if (it == jobs.end()) continue;
    const ActiveJob& job = it->second;
    if (!IsTerminal(job.row.status) || job.terminating) continue;
    reaped.push_back(id);
    // Its books (counts, tally, group limit, waiter, pass index) hear it leave.
    jobs.Leave(it);
  }
  // A group's limit, and a submission's dependencies, are forgotten with their last job.
  std::vector<sched::Dependencies::Key> waiters_gone = waiters.TakeGone();
  if (!reaped.empty()) waiting.Forget(reaped, waiters_gone);
}

void CoreState::RequestPassLocked() {
  if (pass_requested) return;  // the scheduler thread is not waiting for one: nobody to wake
  pass_requested = true;
  pass_cv.SignalAll();
}

void CoreState::WakeLogWaiters(int64_t job) { log_followers.Wake(job); }

void CoreState::LetWaitingHandlersIn() {
  for (int i = 0; i < 100 && handlers_waiting.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string CoreState::DependencyReason(sched::Dependencies::Key key) const {
  const sched::Dependencies::Waiter* w = waiters.Find(key);
  if (w == nullptr || w->state != sched::DepState::kWaiting) return "";
  std::vector<std::string> named;
  std::vector<std::string> groups;
  for (const sched::DepCondition& c : w->conditions) {
    for (const sched::DepTarget& t : c.targets) {
      if (t.ended >= t.total) continue;
      if (t.group) {
        groups.push_back(fmt::format("group {} ({} of {} jobs ended)", t.id, t.ended, t.total));
        continue;
      }
      auto it = jobs.find(t.id);
      std::string status =
          it == jobs.end() ? "ended" : std::string(JobStatusName(it->second.row.status));
      named.push_back(fmt::format("{} ({})", t.id, status));
    }
  }
  std::vector<std::string> parts;
  if (!named.empty()) parts.push_back((named.size() == 1 ? "job " : "jobs ") + Join(named, ", "));
  parts.insert(parts.end(), groups.begin(), groups.end());
  if (parts.empty()) return "waiting for its dependencies";
  return "waiting for " + Join(parts, " and ");
}

void CoreState::WriteDependencyReasons(const std::set<sched::Dependencies::Key>& keys) {
  std::vector<std::pair<sched::Dependencies::Key, std::string>> texts;
  for (auto key : keys) texts.emplace_back(key, DependencyReason(key));
  for (auto& [key, text] : texts) {
    const DependencyWaiters::Jobs* range = waiters.JobsOf(key);
    if (range == nullptr) continue;
    // "": met or failed, its jobs no longer wait for dependencies.
    waiting.SetDependencyReason(key, range->first, range->last, std::move(text));
  }
}

}  // namespace berth
