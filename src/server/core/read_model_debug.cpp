// ReadModel for tests: the state as canonical text (DebugState, DurableState).
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
#include "server/core/read_model.h"

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

size_t ReadModel::RememberedSpecsForTesting() {
  CoreLock lock(s_);
  return s_.specs.size();
}

std::string ReadModel::DebugState() {
  CoreLock lock(s_);
  std::ostringstream out;
  for (const auto& [name, n] : s_.nodes) {
    out << NodeText(n.row, n.cpus_used, n.memory_used, n.gpu_used) << " session=" << n.session
        << " lease=" << n.lease_expires << " gen=" << n.sched_gen << "\n";
  }
  for (const auto& [id, j] : s_.jobs) {
    out << RowText(j.row) << " terminating=" << j.terminating << " gen=" << j.gen << " ranks=";
    for (const auto& r : j.ranks) out << r.setting_up << r.running << r.exited << ",";
    out << " after=";
    for (const auto& [job, attempt] : j.launch_after) out << job << "/" << attempt << ",";
    out << "\n";
  }
  for (const auto& [key, d] : s_.dying) {
    out << "dying " << key.first << "/" << key.second << " " << PlacementText(d.placement)
        << " alive=";
    for (int r : d.alive) out << r << ",";
    out << "\n";
  }
  out << "held:";
  for (int64_t id : s_.launch_held) out << " " << id;
  out << "\ncancel " << s_.cancel.seq << " all_users=" << s_.cancel.all_users_seq;
  for (const auto& [user, seq] : s_.cancel.user_seq) out << " " << user << "=" << seq;
  out << "\nowed cancels:";
  for (const auto& [id, why] : s_.owed_cancels) out << " " << id << "('" << why << "')";
  out << "\nretry cancels:";
  for (int64_t key : s_.waiters.cancel_retries()) out << " " << key;
  out << "\nbackoffs:";
  for (const auto& [at, id] : s_.backoffs) out << " " << id << "@" << at;
  out << "\nreserved pending:";
  for (const auto& [user, n] : std::map(s_.reserved_pending.begin(), s_.reserved_pending.end())) {
    out << " " << user << "=" << n;
  }
  out << "\nreclaims:";
  for (const auto& [team, times] : s_.shares.reclaims()) {
    out << " " << team << "=";
    for (TimeMs t : times) out << t << ",";
  }
  out << "\nusage:";
  for (const auto& [user, value] : s_.shares.ledger().users()) {
    out << fmt::format(" {}={:.6g}@{}", user, value.first, value.second);
  }
  out << "\n";
  for (const auto& [group, live] :
       std::map(s_.group_limits.live().begin(), s_.group_limits.live().end())) {
    out << "group " << group << " live " << live << "\n";
  }
  for (const auto& [key, range] : std::map(s_.waiters.jobs().begin(), s_.waiters.jobs().end())) {
    out << "waiter " << key << " jobs " << range.first << ".." << range.last << " live "
        << range.live << "\n";
  }
  for (const auto& [key, range] : s_.waiters.jobs()) {
    if (const auto* w = s_.waiters.Find(key)) out << WaiterText(key, *w) << "\n";
  }
  for (const auto& [group, limit] : s_.group_limits.limits())
    out << "group " << group << " max " << limit << "\n";
  return out.str();
}

std::string ReadModel::DurableState() {
  CoreLock lock(s_);
  std::ostringstream out;
  for (const auto& [name, n] : s_.nodes) {
    out << NodeText(n.row, n.cpus_used, n.memory_used, n.gpu_used) << "\n";
  }
  for (const auto& [id, j] : s_.jobs) {
    if (IsActive(j.row.status) || j.row.status == JobStatus::kPending)
      out << RowText(j.row) << "\n";
  }
  // Waiters of submissions with pending jobs, and the limits of groups with active jobs.
  std::set<int64_t> waiting;
  std::set<int64_t> groups;
  for (const auto& [id, j] : s_.jobs) {
    if (j.row.status == JobStatus::kPending && s_.waiters.Find(j.row.spec_id))
      waiting.insert(j.row.spec_id);
    if (!IsTerminal(j.row.status) && j.row.group) groups.insert(*j.row.group);
  }
  for (int64_t key : waiting) out << WaiterText(key, *s_.waiters.Find(key)) << "\n";
  for (const auto& [group, limit] : s_.group_limits.limits()) {
    if (groups.count(group)) out << "group " << group << " max " << limit << "\n";
  }
  return out.str();
}

}  // namespace berth
