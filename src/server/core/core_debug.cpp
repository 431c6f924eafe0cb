// Canonical text of the core's state, for tests that compare states (core.h, "for tests").
#include <fmt/format.h>

#include <map>
#include <set>
#include <sstream>

#include "server/core/core.h"

namespace berth {

namespace {

std::string PlacementText(const Placement& placement) {
  std::string out;
  for (const auto& g : placement) {
    out += fmt::format("[{}#{}", g.node, g.rank);
    for (const auto& d : g.gpus) out += fmt::format(" {}:{}", d.index, d.milli);
    out += "]";
  }
  return out;
}

std::string RowText(const JobRow& r) {
  return fmt::format(
      "job {} {} attempt={} prio={} nodes={} reason='{}' started={} ended={} exit={} at={} "
      "restarts={} preemptions={} requeues={} not_before={} run_ms={}",
      r.id, JobStatusName(r.status), r.attempt, r.priority, r.num_nodes, r.reason,
      r.started_at.value_or(-1), r.ended_at.value_or(-1), r.exit_code.value_or(-999),
      PlacementText(r.placement), r.restarts, r.preemptions, r.requeues, r.not_before.value_or(-1),
      r.run_ms);
}

// A waiter's state and its targets' counts, for DebugState and DurableState.
std::string WaiterText(int64_t key, const sched::Dependencies::Waiter& w) {
  std::string out =
      fmt::format("waiter {} state={} why='{}'", key, static_cast<int>(w.state), w.why);
  for (const auto& c : w.conditions) {
    out += fmt::format(" [{}", static_cast<int>(c.kind));
    for (const auto& t : c.targets) {
      out += fmt::format(" {}{}:{}/{}/{}", t.group ? "g" : "", t.id, t.ended, t.not_ok, t.total);
    }
    out += "]";
  }
  return out;
}

std::string NodeText(const NodeRow& n, MilliCpu cpus, Mib memory,
                     const std::map<int, MilliGpu>& gpus) {
  std::string out =
      fmt::format("node {} {} draining={} pool={} cpus={}/{} mem={}/{} gpus=", n.name,
                  NodeStateName(n.state), n.draining, n.pool, cpus, n.cpus, memory, n.memory);
  for (const auto& [index, milli] : gpus) {
    if (milli != 0) out += fmt::format("{}:{} ", index, milli);
  }
  return out;
}

}  // namespace

std::string Core::DebugState() {
  MutexLock lock(mu_);
  std::ostringstream out;
  for (const auto& [name, n] : nodes_) {
    out << NodeText(n.row, n.cpus_used, n.memory_used, n.gpu_used) << " session=" << n.session
        << " lease=" << n.lease_expires << " gen=" << n.sched_gen << "\n";
  }
  for (const auto& [id, j] : jobs_) {
    out << RowText(j.row) << " terminating=" << j.terminating << " gen=" << j.gen << " ranks=";
    for (const auto& r : j.ranks) out << r.setting_up << r.running << r.exited << ",";
    out << " after=";
    for (const auto& [job, attempt] : j.launch_after) out << job << "/" << attempt << ",";
    out << "\n";
  }
  for (const auto& [key, d] : dying_) {
    out << "dying " << key.first << "/" << key.second << " " << PlacementText(d.placement)
        << " alive=";
    for (int r : d.alive) out << r << ",";
    out << "\n";
  }
  out << "held:";
  for (int64_t id : launch_held_) out << " " << id;
  out << "\ncancel " << cancel_.seq << " all_users=" << cancel_.all_users_seq;
  for (const auto& [user, seq] : cancel_.user_seq) out << " " << user << "=" << seq;
  out << "\nowed cancels:";
  for (const auto& [id, why] : owed_cancels_) out << " " << id << "('" << why << "')";
  out << "\nretry cancels:";
  for (int64_t key : waiters_.cancel_retries()) out << " " << key;
  out << "\nbackoffs:";
  for (const auto& [at, id] : backoffs_) out << " " << id << "@" << at;
  out << "\nreserved pending:";
  for (const auto& [user, n] : std::map(reserved_pending_.begin(), reserved_pending_.end())) {
    out << " " << user << "=" << n;
  }
  out << "\nreclaims:";
  for (const auto& [team, times] : shares_.reclaims()) {
    out << " " << team << "=";
    for (TimeMs t : times) out << t << ",";
  }
  out << "\nusage:";
  for (const auto& [user, value] : shares_.ledger().users()) {
    out << fmt::format(" {}={:.6g}@{}", user, value.first, value.second);
  }
  out << "\n";
  for (const auto& [group, live] :
       std::map(group_limits_.live().begin(), group_limits_.live().end())) {
    out << "group " << group << " live " << live << "\n";
  }
  for (const auto& [key, range] : std::map(waiters_.jobs().begin(), waiters_.jobs().end())) {
    out << "waiter " << key << " jobs " << range.first << ".." << range.last << " live "
        << range.live << "\n";
  }
  for (const auto& [key, range] : waiters_.jobs()) {
    if (const auto* w = waiters_.Find(key)) out << WaiterText(key, *w) << "\n";
  }
  for (const auto& [group, limit] : group_limits_.limits())
    out << "group " << group << " max " << limit << "\n";
  return out.str();
}

std::string Core::DurableState() {
  MutexLock lock(mu_);
  std::ostringstream out;
  for (const auto& [name, n] : nodes_) {
    out << NodeText(n.row, n.cpus_used, n.memory_used, n.gpu_used) << "\n";
  }
  for (const auto& [id, j] : jobs_) {
    if (IsActive(j.row.status) || j.row.status == JobStatus::kPending)
      out << RowText(j.row) << "\n";
  }
  // Waiters of submissions with pending jobs, and the limits of groups with active jobs.
  std::set<int64_t> waiting;
  std::set<int64_t> groups;
  for (const auto& [id, j] : jobs_) {
    if (j.row.status == JobStatus::kPending && waiters_.Find(j.row.spec_id))
      waiting.insert(j.row.spec_id);
    if (!IsTerminal(j.row.status) && j.row.group) groups.insert(*j.row.group);
  }
  for (int64_t key : waiting) out << WaiterText(key, *waiters_.Find(key)) << "\n";
  for (const auto& [group, limit] : group_limits_.limits()) {
    if (groups.count(group)) out << "group " << group << " max " << limit << "\n";
  }
  return out.str();
}

void Core::SetPassHookForTesting(std::function<void()> hook) {
  MutexLock lock(mu_);
  pass_hook_ = std::move(hook);
}

}  // namespace berth
