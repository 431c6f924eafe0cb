// AgentSessions: registration, heartbeats, reports, health, leases, drains and a session's rights.
#include "server/core/agent_sessions.h"

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
#include "server/core/notices.h"

namespace berth {

Result<NodeStatus> AgentSessions::Drain(const std::string& name, bool drain, const std::string& by,
                                        bool force) {
  HandlerLock lock(s_);
  auto it = s_.nodes.find(name);
  if (it == s_.nodes.end()) return Status::NotFound("no node named '" + name + "'");
  Txn txn;
  txn.by = by;
  const bool clear_health = !drain && force && !it->second.health.faults.empty();
  txn.batch.audit.push_back(AuditRow{
      .seq = 0,
      .at = s_.clock.Now(),
      .by = by,
      .action = drain ? "drain" : "undrain",
      .target = name,
      .detail =
          clear_health ? "--force: health faults cleared: " + it->second.health.NodeReason() : ""});
  NodeRuntime& node = s_.nodes.Edit(txn, it->second);
  node.row.draining = drain;
  ++node.sched_gen;
  if (clear_health) {
    // The agent forgets its faults too and probes afresh: a fault still there drains it again.
    node.health.faults.clear();
    if (!node.session.empty()) txn.out.sends.emplace_back(name, proto::HealthResetMessage{});
  }
  txn.batch.nodes.push_back(node.row);
  txn.out.kick = true;
  if (drain)
    NoticeNode(s_, txn, name, "node_drained", "DRAINING", "drained by " + by, s_.clock.Now());
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  s_.nodes.CapacityChanged();
  return ReadModel::StatusOf(node);
}

Result<NodeRuntime*> AgentSessions::Authenticate(const std::string& node,
                                                 const std::string& session) {
  auto it = s_.nodes.find(node);
  if (it == s_.nodes.end() || it->second.session.empty() || it->second.session != session) {
    return Status::Conflict("unknown agent session for node '" + node + "'; register again");
  }
  return &it->second;
}

void AgentSessions::EndSession(const std::string& node) {
  HandlerLock lock(s_);
  auto it = s_.nodes.find(node);
  if (it == s_.nodes.end() || it->second.session.empty()) return;
  // A session lives in memory only: nothing to commit. The lease is left to run out.
  it->second.session.clear();
  s_.channel.Close(node);
  s_.specs.SessionChanged(node);
  LogInfo("node {}: its session was ended (credential revoked)", node);
}

bool AgentSessions::SessionIs(const std::string& node, const std::string& session) {
  HandlerLock lock(s_);
  return Authenticate(node, session).ok() && !s_.shutdown;
}

const Placement* AgentSessions::LivePlacement(int64_t job, int attempt) const {
  if (auto dying = s_.dying.find({job, attempt}); dying != s_.dying.end()) {
    return &dying->second.placement;
  }
  auto j = s_.jobs.find(job);
  // A job back in the queue keeps its last attempt's number but no placement: not live.
  if (j == s_.jobs.end() || j->second.row.attempt != attempt || j->second.row.placement.empty()) {
    return nullptr;
  }
  return &j->second.row.placement;
}

Result<std::string> AgentSessions::LogPrefix(const std::string& node, const std::string& session,
                                             int64_t job, int attempt, int rank) {
  return std::move(LogPrefixes(node, session, {{job, attempt, rank}}).front());
}

std::vector<Result<std::string>> AgentSessions::LogPrefixes(
    const std::string& node, const std::string& session,
    const std::vector<proto::AttemptRank>& ranks) {
  // Multi-node jobs also get an interleaved log, each line tagged "(rank R, node) ".
  auto prefix = [&](const Placement& placement,
                    const proto::AttemptRank& r) -> Result<std::string> {
    if (!PlacedOn(placement, node, r.rank)) return NotPlacedHere(node, r.job, r.attempt, r.rank);
    return placement.size() > 1 ? fmt::format("(rank {}, {}) ", r.rank, node) : std::string();
  };
  std::vector<Result<std::string>> out(ranks.size(), Status::Internal("not looked up"));
  std::vector<size_t> ended;  // of `ranks`: attempts no longer live
  {
    HandlerLock lock(s_);
    auto runtime = Authenticate(node, session);
    if (!runtime.ok()) return std::vector<Result<std::string>>(ranks.size(), runtime.status());
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (const Placement* live = LivePlacement(ranks[i].job, ranks[i].attempt)) {
        out[i] = prefix(*live, ranks[i]);
      } else {
        ended.push_back(i);
      }
    }
  }
  // An attempt that ended (its last output may arrive after its exit was applied): its placement
  // is history, read from the store outside the lock, once per job.
  std::map<int64_t, Result<std::vector<AttemptRow>>> read;
  for (size_t i : ended) {
    const proto::AttemptRank& r = ranks[i];
    auto it = read.find(r.job);
    if (it == read.end()) it = read.emplace(r.job, s_.store.GetAttempts(r.job)).first;
    if (!it->second.ok()) {
      out[i] = it->second.status();
      continue;
    }
    out[i] = NotPlacedHere(node, r.job, r.attempt, r.rank);
    for (const AttemptRow& a : *it->second) {
      if (a.attempt == r.attempt) out[i] = prefix(a.placement, r);
    }
  }
  return out;
}

Status AgentSessions::NotPlacedHere(const std::string& node, int64_t job, int attempt, int rank) {
  return Status::Forbidden(fmt::format(
      "node {} holds no rank {} of job {} attempt {}: a node may touch only what is placed on it",
      node, rank, job, attempt));
}

Status AgentSessions::MayReadSpec(const std::string& node, const std::string& session, int64_t job,
                                  int64_t spec_id) {
  HandlerLock lock(s_);
  auto runtime = Authenticate(node, session);
  if (!runtime.ok()) return runtime.status();
  auto j = s_.jobs.find(job);
  if (j == s_.jobs.end() || j->second.row.spec_id != spec_id ||
      !PlacedOn(j->second.row.placement, node)) {
    return Status::Forbidden(fmt::format(
        "node {} runs no job {} of spec {}: a node reads only the specs of its own jobs", node, job,
        spec_id));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> AgentSessions::JobUploads(const std::string& node,
                                                           const std::string& session,
                                                           int64_t job) {
  HandlerLock lock(s_);
  auto runtime = Authenticate(node, session);
  if (!runtime.ok()) return runtime.status();
  auto j = s_.jobs.find(job);
  if (j == s_.jobs.end() || !PlacedOn(j->second.row.placement, node)) {
    return Status::Forbidden(fmt::format(
        "node {} runs no job {}: a node reads only the uploads of its own jobs", node, job));
  }
  std::shared_ptr<const JobSpec> held =
      j->second.spec ? j->second.spec : s_.SpecFor(j->second.row.spec_id);
  if (!held) return Status::Unavailable(fmt::format("job {}'s spec cannot be read", job));
  return UploadsOf(*held);
}

Result<std::set<std::string>> AgentSessions::LiveUploads() {
  HandlerLock lock(s_);
  std::set<std::string> out;
  for (const auto& [id, job] : s_.jobs) {
    std::shared_ptr<const JobSpec> spec = job.spec ? job.spec : s_.specs.Find(job.row.spec_id);
    if (!spec) {
      return Status::Unavailable(fmt::format("job {}'s spec is not in memory", id));
    }
    for (std::string& digest : UploadsOf(*spec)) out.insert(std::move(digest));
  }
  return out;
}

Result<proto::HeartbeatAnswer> AgentSessions::Heartbeat(const std::string& node,
                                                        const std::string& session) {
  HandlerLock lock(s_);
  auto runtime = Authenticate(node, session);
  if (!runtime.ok()) return runtime.status();
  // A lease lives in memory only: a restarted server gives every node a fresh one (Load()).
  (*runtime)->lease_expires = s_.clock.Monotonic() + s_.options.lease_ms;
  (*runtime)->row.last_seen = s_.clock.Now();
  return proto::HeartbeatAnswer{true, s_.options.lease_ms};
}

AgentSessions::ForgottenAttempts AgentSessions::ReadForgotten(
    const std::set<std::tuple<int64_t, int, int>>& running) {
  // Which of the agent's attempts the memory does not explain: read outside the lock, since the
  // store may be slow (a remote database), then used under it. What is read is history (ended
  // jobs, earlier attempts), which does not change meanwhile.
  std::set<int64_t> unknown_jobs;
  std::set<int64_t> old_attempts;
  {
    HandlerLock lock(s_);
    for (const auto& [job_id, attempt, rank] : running) {
      auto j = s_.jobs.find(job_id);
      if (j == s_.jobs.end()) {
        unknown_jobs.insert(job_id);
      } else if (j->second.row.attempt != attempt && !s_.dying.count({job_id, attempt})) {
        old_attempts.insert(job_id);
      }
    }
  }
  ForgottenAttempts out;
  if (!unknown_jobs.empty()) {
    auto rows = s_.store.GetJobs({unknown_jobs.begin(), unknown_jobs.end()});
    if (rows.ok()) {
      for (auto& row : *rows) out.rows.emplace(row.id, std::move(row));
    }
    // The specs of the ended ones, which HoldEndedAttempts keeps in memory with them.
    for (const auto& [id, row] : out.rows) {
      if (!IsTerminal(row.status) || out.specs.count(row.spec_id)) continue;
      if (auto spec = s_.ReadSpec(row.spec_id)) out.specs.emplace(row.spec_id, std::move(spec));
    }
  }
  for (int64_t job : old_attempts) {
    auto attempts = s_.store.GetAttempts(job);
    if (attempts.ok()) out.attempts.emplace(job, std::move(*attempts));
  }
  return out;
}

void AgentSessions::HoldEndedAttempts(Txn& txn, const NodeRuntime& node,
                                      const std::set<std::tuple<int64_t, int, int>>& running,
                                      const ForgottenAttempts& forgotten) {
  // An agent still runs an attempt that the store says has ended: the job was cancelled (or
  // failed, or timed out) and its processes were still being stopped when this server started.
  // Its resources stay held until they are gone, as they would have been without the restart, so
  // that no new job lands on devices the dying one still uses. The node is not schedulable before
  // this runs (it had no session).
  for (const auto& [job_id, attempt, rank] : running) {
    if (s_.jobs.count(job_id)) continue;
    auto found = forgotten.rows.find(job_id);
    if (found == forgotten.rows.end()) continue;
    const JobRow& row = found->second;
    if (!IsTerminal(row.status) || row.attempt != attempt || row.placement.empty()) continue;
    ActiveJob job;
    job.row = row;
    // Read with the rows, outside the lock (ReadForgotten): nothing here waits for the store.
    auto spec = forgotten.specs.find(row.spec_id);
    job.spec = spec != forgotten.specs.end() ? spec->second : std::make_shared<const JobSpec>();
    s_.RememberSpec(row.spec_id, job.spec);
    job.ranks.resize(static_cast<size_t>(std::max(1, row.num_nodes)));
    // A registration claims only ranks placed on its own node, and holds only their grants:
    // another node's ranks are held when that node registers still running them (Register), so
    // that no node can pin resources of others by naming their old attempts.
    Placement held;
    for (const auto& grant : row.placement) {
      if (static_cast<size_t>(grant.rank) >= job.ranks.size()) continue;
      const bool claimed =
          grant.node == node.row.name && running.count({job_id, attempt, grant.rank});
      job.ranks[grant.rank].exited = !claimed;
      job.ranks[grant.rank].unheld = !claimed;
      if (claimed) held.push_back(grant);
    }
    if (held.empty()) {
      LogWarn("node {} claims job {} attempt {} rank {}, which was not placed on it: ignored",
              node.row.name, job_id, attempt, rank);
      continue;
    }
    LogInfo("job {} attempt {} is still stopping on {}; its resources stay held until it is gone",
            job_id, attempt, node.row.name);
    job.terminating = true;
    s_.nodes.Allocate(txn, held, job.row.resources, +1);
    // In memory again: its books hear it enter (counted in its group's tally under its status
    // already, and again in its group's limit and its submission's waiter, which forget their
    // group or submission with its last job in memory), and leave if this is not committed.
    s_.jobs.Enter(txn, std::move(job));
  }
}

void AgentSessions::HoldDyingRank(Txn& txn, const std::string& node, const AttemptKey& key,
                                  int rank, const ResourceRequest& per_node,
                                  const ForgottenAttempts& forgotten) {
  // An earlier attempt of a queued or running job that the agent still runs (a server restart
  // forgot it) holds the grant of that rank, if the rank was placed on this node; the attempt's
  // other ranks are held when their own nodes claim them.
  DyingAttempt dying;
  if (std::optional<DyingAttempt> known = s_.dying.Save(key)) {
    if (!known->unheld.count(rank)) return;  // held already, or not part of the attempt
    dying = std::move(*known);
  } else {
    auto attempts = forgotten.attempts.find(key.first);
    if (attempts == forgotten.attempts.end()) return;
    auto a = std::find_if(attempts->second.begin(), attempts->second.end(),
                          [&](const AttemptRow& row) { return row.attempt == key.second; });
    if (a == attempts->second.end()) return;
    dying = DyingAttempt{a->placement, per_node, {}, {}};
    for (const auto& grant : a->placement) dying.unheld.insert(grant.rank);
  }
  auto grant = std::find_if(dying.placement.begin(), dying.placement.end(),
                            [&](const NodeGrant& g) { return g.rank == rank; });
  if (grant == dying.placement.end() || grant->node != node) {
    LogWarn("node {} claims job {} attempt {} rank {}, which was not placed on it: ignored", node,
            key.first, key.second, rank);
    return;
  }
  dying.unheld.erase(rank);
  dying.alive.insert(rank);
  s_.SaveDying(txn, key);
  s_.nodes.Allocate(txn, {*grant}, dying.per_node, +1);
  s_.dying.Add(key, std::move(dying));
}

Result<proto::RegisterAnswer> AgentSessions::Register(const proto::RegisterRequest& request,
                                                      const std::string& remote_address) {
  BERTH_RETURN_IF_ERROR(request.Validate());
  std::set<std::tuple<int64_t, int, int>> running;  // (job, attempt, rank) the agent has
  for (const auto& r : request.running) running.insert({r.job, r.attempt, r.rank});
  ForgottenAttempts forgotten = ReadForgotten(running);

  HandlerLock lock(s_);
  const std::string& name = request.name;
  TimeMs now = s_.clock.Now();
  int64_t mono = s_.clock.Monotonic();
  auto existing = s_.nodes.find(name);
  if (existing != s_.nodes.end() && existing->second.row.node_id != request.node_id &&
      existing->second.row.state != NodeState::kDown && existing->second.lease_expires > mono) {
    return Status::Conflict("node name '" + name +
                            "' is held by another live agent; pick another --name");
  }
  Txn txn;
  if (existing == s_.nodes.end()) {
    txn.journal.Save(s_.nodes, name);
    s_.nodes.Add(name);
    existing = s_.nodes.find(name);
  }
  NodeRuntime& node = s_.nodes.Edit(txn, existing->second);
  bool is_new = node.row.name.empty();
  node.row.name = name;
  node.row.node_id = request.node_id;
  node.row.state = NodeState::kUp;
  node.row.pool = request.pool;
  node.row.labels = request.labels;
  node.row.address = request.address.empty() ? remote_address : request.address;
  node.row.cpus = request.cpus_milli;
  node.row.memory = request.memory_mib;
  node.row.gpus = request.gpus;
  node.isolation = request.isolation;
  node.sharing = request.sharing;
  node.mig_reconfigure = request.mig_reconfigure;
  node.mig_error = request.mig_error;
  MigChangesReported(txn, node, now);  // its new slices, or why not
  node.job_memory_default = request.job_memory_default_mib;
  node.container_mounts = request.container_mounts;
  if (is_new) node.row.registered_at = now;
  node.row.last_seen = now;
  node.row.down_since.reset();
  node.session = RandomHex(12);
  node.lease_expires = mono + s_.options.lease_ms;
  ++node.sched_gen;
  s_.nodes.CapacityChanged();
  txn.out.opens.emplace_back(name, node.session);  // the old session's stream and queue are dropped
  txn.batch.nodes.push_back(node.row);

  // Reconcile: launches the agent never got are sent again; attempts it runs that are not current
  // are told to stop.
  ApplyHealth(txn, node, request.health.value_or(proto::NodeHealth{}), now);
  HoldEndedAttempts(txn, node, running, forgotten);
  for (int64_t id : books_.JobsOn(name)) {
    auto found = s_.jobs.find(id);
    if (found == s_.jobs.end()) continue;
    ActiveJob& job = found->second;
    if (job.terminating) {
      // A rank the agent no longer has is gone: its exit was reported, or it never started. One it
      // still runs that an earlier registration left unheld (it was not that node's) is held now.
      bool changed = false;
      for (const auto& grant : job.row.placement) {
        if (grant.node != name || static_cast<size_t>(grant.rank) >= job.ranks.size()) continue;
        RankState& rank = job.ranks[grant.rank];
        const bool runs = running.count({id, job.row.attempt, grant.rank}) > 0;
        const bool hold = runs && rank.unheld;
        if (!hold && (runs || rank.exited)) continue;
        if (!changed) s_.MutJob(txn, job);
        changed = true;
        rank.exited = !hold;
        if (hold) {
          rank.unheld = false;
          s_.nodes.Allocate(txn, {grant}, job.row.resources, +1);
        }
      }
      if (job.AllRanksExited()) life_.Release(txn, job);
      continue;
    }
    if (!IsActive(job.row.status) || s_.launch_held.count(id)) continue;
    for (const auto& grant : job.row.placement) {
      if (grant.node != name || running.count({id, job.row.attempt, grant.rank})) continue;
      txn.out.sends.emplace_back(name, life_.LaunchFor(job, grant.rank));
    }
  }
  // Dying attempts: ranks here the agent no longer has are gone. Earlier attempts of queued or
  // running jobs that it still runs (a server restart forgot them) are held again until gone.
  for (const auto& rank : s_.dying.AliveOn(name)) {
    if (!running.count(rank))
      life_.DyingRankGone(txn, std::get<0>(rank), std::get<1>(rank), std::get<2>(rank));
  }
  for (const auto& [job_id, attempt, rank] : running) {
    auto j = s_.jobs.find(job_id);
    if (j == s_.jobs.end() || j->second.row.attempt == attempt) continue;
    HoldDyingRank(txn, name, AttemptKey{job_id, attempt}, rank, j->second.row.resources, forgotten);
  }
  for (const auto& [job_id, attempt, rank] : running) {
    auto j = s_.jobs.find(job_id);
    bool current = j != s_.jobs.end() && j->second.row.attempt == attempt &&
                   IsActive(j->second.row.status) && !j->second.terminating;
    if (!current) {
      txn.out.sends.emplace_back(
          name, proto::StopMessage{job_id, attempt, rank, "not the current attempt"});
    }
  }
  txn.out.kick = true;
  txn.out.reap = true;
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  LogInfo("node {} registered ({} GPUs, {} CPUs) at {}", name, request.gpus.size(),
          FormatMilli(request.cpus_milli), node.row.address);
  return proto::RegisterAnswer{node.session, s_.options.lease_ms,
                               std::max<DurationMs>(100, s_.options.lease_ms / 4)};
}

void AgentSessions::ApplyPulling(Txn& txn, ActiveJob& job, const proto::Report& r, TimeMs now) {
  // Still STARTING (time_limit counts from RUNNING), with the image in its reason; the job's
  // history keeps what the image resolved to (the first rank to say).
  if (job.row.status != JobStatus::kStarting || !job.spec->container) return;
  const bool pulled = !r.reason.empty();
  if (!r.progress.empty()) {
    // How far the download got: shown as the reason while it lasts, not kept in the history (one
    // entry every few seconds of a long pull would bury the rest). Rank 0's only: a gang's ranks
    // would take turns rewriting the row.
    if (r.rank == 0 && StartsWith(job.row.reason, "pulling image")) {
      s_.MutJob(txn, job).row.reason =
          "pulling image " + job.spec->container->image + ": " + r.progress;
      txn.batch.jobs.push_back(job.row);
    }
  } else if (!pulled && !StartsWith(job.row.reason, "pull")) {
    life_.Transition(txn, job, JobStatus::kStarting, "pulling image " + job.spec->container->image,
                     now);
  } else if (pulled && !StartsWith(job.row.reason, "pulled")) {
    life_.Transition(txn, job, JobStatus::kStarting, "pulled image " + r.reason, now);
  }
}

void AgentSessions::ApplyExit(Txn& txn, ActiveJob& job, const NodeRuntime& node,
                              const proto::Report& r, TimeMs now) {
  std::string where =
      job.row.num_nodes > 1 ? fmt::format(" on rank {} ({})", r.rank, node.row.name) : "";
  if (r.phase == "pull") {
    // The image, not the node: the attempt fails ("image pull failed: ..."; the job's retry
    // policy may try again, a short registry outage past), the node stays up.
    const std::string what =
        r.reason == "stopped" ? "stopped while its image was pulled" : r.reason;
    life_.FailAttempt(txn, job, JobStatus::kFailed, what + where, r.exit_code, now, false);
  } else if (r.phase == "launch") {
    life_.EndJob(txn, job, JobStatus::kFailed, "could not start" + where + ": " + r.reason,
                 r.exit_code, now);
  } else if (r.phase == "prolog") {
    // The node's prolog failed before the job started: the node is at fault (and drained by
    // its agent), not the job.
    life_.EndForNodeFault(
        txn, job, fmt::format("prolog failed on node {}: {}", node.row.name, r.reason), now);
  } else if (r.phase == "supervisor") {
    // berth lost track of the rank (its supervisor was killed): not a failure of the job's own
    // code, so it is never restarted by the retry policy (nor counted as a restart).
    life_.EndJob(txn, job, JobStatus::kFailed,
                 fmt::format("exit code {} ({}){}", r.exit_code.value_or(137), r.reason, where),
                 r.exit_code, now);
  } else if (!r.exit_code || *r.exit_code != 0) {
    JobStatus status = r.phase == "setup" ? JobStatus::kFailedSetup : JobStatus::kFailed;
    const bool oom = IsOutOfMemory(r.reason);
    std::string what;
    if (oom) {
      // "out of memory: rank 0 on n3 reached its limit of 256 MiB (resources.memory); ..."
      what = fmt::format("{} rank {} on {}{} (exit code {}{})", kOutOfMemory, r.rank, node.row.name,
                         r.reason.substr(kOutOfMemory.size()), r.exit_code.value_or(137),
                         r.phase == "setup" ? ", in setup" : "");
    } else {
      what = r.exit_code ? fmt::format("exit code {}", *r.exit_code) : "no exit code";
      if (!r.reason.empty()) what += " (" + r.reason + ")";
      what = std::string(r.phase == "setup" ? "setup failed: " : "") + what + where;
    }
    life_.FailAttempt(txn, job, status, what, r.exit_code, now, oom);
  } else {
    if (job.AllRanksExited()) life_.EndJob(txn, job, JobStatus::kSucceeded, "exit code 0", 0, now);
  }
}

proto::ReportResult AgentSessions::ApplyReport(Txn& txn, NodeRuntime& node, const proto::Report& r,
                                               TimeMs now) {
  proto::ReportResult result{r.job, r.attempt, r.rank, proto::ReportAction::kOk, ""};
  bool exited = r.event == proto::ReportEvent::kExited;
  if (s_.dying.count({r.job, r.attempt})) {
    // An earlier attempt being stopped: it holds its resources until each rank is reported gone
    // (by the node it was placed on: Report refuses a batch about another node's ranks).
    if (exited) {
      life_.DyingRankGone(txn, r.job, r.attempt, r.rank);
    } else {
      result.action = proto::ReportAction::kStop;
    }
    return result;
  }
  auto it = s_.jobs.find(r.job);
  ActiveJob* job = it == s_.jobs.end() ? nullptr : &it->second;
  const bool on_this_node = job && PlacedOn(job->row.placement, node.row.name, r.rank);
  if (!job || job->row.attempt != r.attempt || !on_this_node || r.rank < 0 ||
      r.rank >= static_cast<int>(job->ranks.size())) {
    // Not the current attempt: fenced. A process still running must stop.
    if (!exited) result.action = proto::ReportAction::kStop;
    return result;
  }
  if (job->terminating || IsTerminal(job->row.status)) {
    if (exited) {
      s_.MutJob(txn, *job).ranks[static_cast<size_t>(r.rank)].exited = true;
      if (job->AllRanksExited()) life_.Release(txn, *job);
    } else {
      result.action = proto::ReportAction::kStop;
    }
    return result;
  }
  s_.MutJob(txn, *job);
  RankState& rs = job->ranks[static_cast<size_t>(r.rank)];
  switch (r.event) {
    case proto::ReportEvent::kAccepted:
      break;
    case proto::ReportEvent::kPulling:
      ApplyPulling(txn, *job, r, now);
      break;
    case proto::ReportEvent::kSettingUp:
      rs.setting_up = true;
      if (job->row.status == JobStatus::kStarting) {
        life_.Transition(txn, *job, JobStatus::kSettingUp, "setup running", now);
      }
      break;
    case proto::ReportEvent::kRunning: {
      rs.running = true;
      bool all = true;
      for (const auto& x : job->ranks) all = all && (x.running || x.exited);
      if (all && job->row.status != JobStatus::kRunning) {
        life_.Transition(txn, *job, JobStatus::kRunning, "running", now);
      }
      break;
    }
    case proto::ReportEvent::kExited:
      rs.exited = true;
      rs.exit_code = r.exit_code.value_or(-1);
      rs.peak_memory_bytes = r.peak_memory_bytes;
      rs.cpu_ms = r.cpu_ms;
      ApplyExit(txn, *job, node, r, now);
      break;
  }
  return result;
}

Result<std::vector<proto::ReportResult>> AgentSessions::Report(const proto::ReportBatch& request) {
  HandlerLock lock(s_);
  auto runtime = Authenticate(request.node, request.session);
  if (!runtime.ok()) return runtime.status();
  TimeMs now = s_.clock.Now();
  Txn txn;
  NodeRuntime& node = **runtime;
  // An attempt's ranks are placed on the nodes of its placement and nowhere else: a report about a
  // rank of a live attempt placed on another node is forged (a node may touch only its own jobs).
  for (const auto& entry : request.entries) {
    if (!entry.report.ok()) continue;
    const proto::Report& r = *entry.report;
    const Placement* placed = LivePlacement(r.job, r.attempt);
    if (placed && !PlacedOn(*placed, node.row.name, r.rank)) {
      return NotPlacedHere(node.row.name, r.job, r.attempt, r.rank);
    }
  }
  std::vector<proto::ReportResult> results;
  results.reserve(request.entries.size());
  for (const auto& entry : request.entries) {
    if (!entry.report.ok()) {
      // A bad entry is answered on its own; the rest of the batch is applied.
      results.push_back({entry.id.job, entry.id.attempt, entry.id.rank, proto::ReportAction::kError,
                         entry.report.status().message()});
      continue;
    }
    results.push_back(ApplyReport(txn, node, *entry.report, now));
  }
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  // The lease is renewed only once the batch is recorded (a failed commit leaves memory as is).
  node.lease_expires = s_.clock.Monotonic() + s_.options.lease_ms;
  return results;
}

void AgentSessions::ApplyHealth(Txn& txn, NodeRuntime& runtime, proto::NodeHealth health,
                                TimeMs now) {
  if (health == runtime.health) return;
  const std::set<int> faulty = health.FaultyGpus();
  const std::set<int> before = runtime.health.FaultyGpus();
  const bool was_drained = runtime.health.NodeFaulty();
  NodeRuntime& node = s_.nodes.Edit(txn, runtime);
  const std::string& name = node.row.name;
  if (faulty != before || was_drained != health.NodeFaulty()) {
    ++node.sched_gen;
    s_.nodes.CapacityChanged();
    txn.out.kick = true;
    if (health.NodeFaulty() && !was_drained) {
      LogWarn("node {} drained by its health probes: {}", name, health.NodeReason());
      NoticeNode(s_, txn, name, "node_fault", "FAULTY",
                 "drained by its health probes: " + health.NodeReason(), now);
    } else if (!health.NodeFaulty() && was_drained) {
      LogInfo("node {} is healthy again", name);
    }
  }
  node.health = std::move(health);
  // Attempts holding a GPU found faulty now end: a job on a GPU that fell off the bus cannot go on,
  // and one on a GPU with uncorrected errors computes garbage. Only newly faulty GPUs are looked
  // for: no job is placed on a GPU that was faulty already (and a report whose commit failed is
  // undone, health included, so its GPUs are new again next time).
  std::set<int> newly;
  std::set_difference(faulty.begin(), faulty.end(), before.begin(), before.end(),
                      std::inserter(newly, newly.end()));
  if (newly.empty()) return;
  if (!node.health.NodeFaulty()) {
    std::string gpus;
    for (int gpu : newly) gpus += (gpus.empty() ? "" : "; ") + node.health.GpuReason(gpu);
    NoticeNode(s_, txn, name, "node_fault", "FAULTY", "GPUs fenced by its health probes: " + gpus,
               now);
  }
  for (int64_t id : books_.JobsOn(name)) {
    auto found = s_.jobs.find(id);
    if (found == s_.jobs.end()) continue;
    ActiveJob& job = found->second;
    if (job.terminating || !IsActive(job.row.status)) continue;
    int bad = -1;
    for (const auto& grant : job.row.placement) {
      if (grant.node != name) continue;
      for (const auto& gpu : grant.gpus) {
        const int physical = GpuOfDevice(node.row.gpus, gpu.index);  // a slice's GPU
        if (newly.count(physical)) bad = physical;
      }
    }
    if (bad < 0) continue;
    life_.EndForNodeFault(
        txn, job, fmt::format("health: {} on node {}", node.health.GpuReason(bad), name), now);
  }
}

Result<proto::HealthAnswer> AgentSessions::ReportHealth(const proto::HealthRequest& request) {
  HandlerLock lock(s_);
  auto runtime = Authenticate(request.node, request.session);
  if (!runtime.ok()) return runtime.status();
  const TimeMs now = s_.clock.Now();
  Txn txn;
  ApplyHealth(txn, **runtime, request.health, now);
  if ((*runtime)->maintenance_ended > 0 && !request.health.NodeFaulty()) {
    // Its probes ran clean after its maintenance window: it takes jobs again.
    NodeRuntime& node = s_.nodes.Edit(txn, **runtime);
    LogInfo("node {} passed its health probes after maintenance window '{}': back in service",
            node.row.name, node.maintenance);
    node.maintenance_ended = 0;
    node.maintenance.clear();
    ++node.sched_gen;
    s_.nodes.CapacityChanged();
    txn.out.kick = true;
  }
  if (!txn.batch.empty()) txn.out.reap = true;
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  return proto::HealthAnswer{s_.clock.Now()};
}

size_t AgentSessions::ForgetGoneNodes() {
  CoreLock lock(s_);
  const TimeMs now = s_.clock.Now();
  std::vector<std::string> gone;
  for (const auto& [name, node] : s_.nodes) {
    if (GoneForGood(node.row, now, s_.options.node_retention_ms)) gone.push_back(name);
  }
  size_t forgotten = 0;
  for (const std::string& name : gone) {
    if (!s_.nodes.Forget(name)) continue;
    ++forgotten;
    LogInfo("node {} has been down for over the node retention: forgotten (its row is kept)", name);
  }
  return forgotten;
}

void AgentSessions::CheckLeases() {
  CoreLock lock(s_);
  int64_t mono = s_.clock.Monotonic();
  TimeMs now = s_.clock.Now();
  Txn txn;
  for (auto& [name, runtime] : s_.nodes) {
    if (runtime.row.state == NodeState::kDown || runtime.lease_expires > mono) continue;
    LogWarn("node {}: lease expired; marking it down", name);
    ++txn.out.events.lease_expiries;
    NodeRuntime& node = s_.nodes.Edit(txn, runtime);
    node.row.state = NodeState::kDown;
    node.row.down_since = now;
    node.session.clear();
    ++node.sched_gen;
    s_.nodes.CapacityChanged();
    txn.out.closes.push_back(name);
    txn.batch.nodes.push_back(node.row);
    NoticeNode(s_, txn, name, "node_down", "DOWN", "stopped answering (lease expired)", now);
    // Dying ranks died with the node.
    for (const auto& [job_id, attempt, rank] : s_.dying.AliveOn(name))
      life_.DyingRankGone(txn, job_id, attempt, rank);
    for (int64_t id : books_.JobsOn(name)) {
      auto found = s_.jobs.find(id);
      if (found == s_.jobs.end()) continue;
      ActiveJob& job = found->second;
      bool here = false;
      for (const auto& g : job.row.placement) here = here || g.node == name;
      if (!here || (!IsActive(job.row.status) && !job.terminating)) continue;
      if (job.terminating) {  // its processes died with the node
        life_.Release(txn, job);
        continue;
      }
      std::string why = "node " + name + " stopped answering (lease expired)";
      if (job.spec->on_node_lost == RecoveryAction::kRequeue) {
        life_.ReturnToQueue(txn, job, why + "; requeued", now);
      } else {
        life_.EndJob(txn, job, JobStatus::kLost, why, std::nullopt, now);
      }
    }
  }
  if (txn.batch.empty()) return;
  txn.out.reap = true;
  txn.out.kick = true;
  Status st = s_.Execute(txn);
  if (!st.ok()) LogError("lost nodes stay as they were until the next check: {}", st.message());
}

}  // namespace berth
