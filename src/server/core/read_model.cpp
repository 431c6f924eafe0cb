// ReadModel: nodes, jobs, the queue, fair-share holdings and log followers as memory answers them.
#include "server/core/read_model.h"

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

namespace berth {

std::map<std::string, std::map<int, std::vector<ReadModel::Holder>>> ReadModel::DeviceHolders() {
  std::map<std::string, std::map<int, std::vector<Holder>>> out;
  HandlerLock lock(s_);
  auto add = [&](int64_t id, const std::string& user, const Placement& placement) {
    for (const NodeGrant& grant : placement) {
      for (const GpuGrant& gpu : grant.gpus) out[grant.node][gpu.index].emplace_back(id, user);
    }
  };
  for (const auto& [id, job] : s_.jobs) {
    if (IsActive(job.row.status) || job.terminating) add(id, job.row.user, job.row.placement);
  }
  for (const auto& [key, dying] : s_.dying) {  // earlier attempts still stopping
    auto job = s_.jobs.find(key.first);
    add(key.first, job == s_.jobs.end() ? "" : job->second.row.user, dying.placement);
  }
  return out;
}

namespace {
// `berth nodes` marks a node with a reservation starting within this.
constexpr DurationMs kReservedAhead = 7LL * 24 * 3600 * 1000;
}  // namespace

std::vector<NodeStatus> ReadModel::Nodes() {
  HandlerLock lock(s_);
  std::vector<NodeStatus> out;
  out.reserve(s_.nodes.size());
  // Each node's reservation: the window in force, else the soonest within a week.
  const TimeMs now = s_.clock.Now();
  std::map<std::string, NodeStatus::Reserved> reserved;
  for (const auto& [name, r] : s_.reservations) {
    std::optional<Window> w = WindowOf(r, now);
    if (!w || w->start > now + kReservedAhead) continue;
    NodeStatus::Reserved mark{r.name, w->start, w->end, w->start <= now, r.maintenance};
    auto put = [&](const std::string& node) {
      auto [it, fresh] = reserved.try_emplace(node, mark);
      if (!fresh && (mark.active || (!it->second.active && mark.start < it->second.start))) {
        it->second = mark;
      }
    };
    if (r.all_nodes) {
      for (const auto& [node, runtime] : s_.nodes) put(node);
    } else {
      for (const std::string& node : r.nodes) put(node);
    }
  }
  for (const auto& [name, node] : s_.nodes) {
    out.push_back(StatusOf(node));
    if (auto it = reserved.find(name); it != reserved.end()) out.back().reserved = it->second;
  }
  return out;
}

std::map<std::string, Mib> ReadModel::JobMemoryDefaults(const Placement& placement) {
  std::map<std::string, Mib> out;
  HandlerLock lock(s_);
  for (const NodeGrant& grant : placement) {
    auto it = s_.nodes.find(grant.node);
    if (it != s_.nodes.end()) out[grant.node] = it->second.job_memory_default;
  }
  return out;
}

std::map<std::string, std::map<std::string, std::string>> ReadModel::NodeLabels(
    const Placement& placement) {
  std::map<std::string, std::map<std::string, std::string>> out;
  HandlerLock lock(s_);
  for (const NodeGrant& grant : placement) {
    auto it = s_.nodes.find(grant.node);
    if (it != s_.nodes.end()) out[grant.node] = it->second.row.labels;
  }
  return out;
}

NodeStatus ReadModel::StatusOf(const NodeRuntime& node) {
  return NodeStatus{.row = node.row,
                    .cpus_used = node.cpus_used,
                    .memory_used = node.memory_used,
                    .gpu_used = node.gpu_used,
                    .isolation = node.isolation,
                    .sharing = node.sharing,
                    .mig_reconfigure = node.mig_reconfigure,
                    .mig_error = node.mig_error,
                    .mig_changing = node.mig_changing,
                    .job_memory_default = node.job_memory_default,
                    .health = node.health,
                    .maintenance_hold = node.maintenance};
}

std::optional<uint64_t> ReadModel::AddLogWaiter(int64_t job, int attempt,
                                                std::function<void()> fire) {
  HandlerLock lock(s_);
  auto it = s_.jobs.find(job);
  bool live = it != s_.jobs.end() &&
              (!IsTerminal(it->second.row.status) || it->second.terminating) &&
              it->second.row.attempt == attempt;
  if (!live || s_.shutdown) return std::nullopt;
  return s_.log_followers.Add(job, std::move(fire));
}

void ReadModel::RemoveLogWaiter(int64_t job, uint64_t id) {
  HandlerLock lock(s_);
  s_.log_followers.Remove(job, id);
}

void ReadModel::LogsAppended(int64_t job) { LogsAppended(std::set<int64_t>{job}); }

void ReadModel::LogsAppended(const std::set<int64_t>& jobs) {
  HandlerLock lock(s_);
  for (int64_t job : jobs) s_.WakeLogWaiters(job);
}

ReadModel::QueueOverview ReadModel::Overview(const listing::RowFilter& filter) {
  QueueOverview out;
  std::map<int64_t, int64_t> groups;  // group -> newest active job
  for (const QueueEntry& e : ActiveEntries(filter)) {
    if (e.group) {
      groups.try_emplace(*e.group, e.id);  // newest first: the first seen is newest
    } else {
      out.ungrouped.push_back(e.id);
    }
  }
  for (const auto& [group, newest] : groups) out.groups.emplace_back(group, newest);
  std::sort(out.groups.begin(), out.groups.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::optional<std::pair<JobRow, bool>> ReadModel::ActiveJobRow(int64_t job) {
  HandlerLock lock(s_);
  auto it = s_.jobs.find(job);
  if (it == s_.jobs.end()) return std::nullopt;
  return std::make_pair(it->second.row,
                        !IsTerminal(it->second.row.status) || it->second.terminating);
}

Result<ReadModel::RankTarget> ReadModel::TerminalOf(int64_t job, int rank) {
  return RunningRank(job, rank, true);
}

Result<ReadModel::RankTarget> ReadModel::PortOf(int64_t job, int rank) {
  return RunningRank(job, rank, false);
}

Result<ReadModel::RankTarget> ReadModel::RunningRank(int64_t job, int rank, bool terminal) {
  HandlerLock lock(s_);
  auto it = s_.jobs.find(job);
  if (it == s_.jobs.end() || IsTerminal(it->second.row.status)) {
    return Status::NotFound(fmt::format("job {} is not running", job));
  }
  const ActiveJob& active = it->second;
  if (terminal && (!active.spec || !active.spec->interactive)) {
    return Status::Conflict(fmt::format(
        "job {} is not interactive (it has no terminal): follow its output with berth logs -f {}",
        job, job));
  }
  if (rank < 0 || rank >= active.row.num_nodes) {
    return Status::Invalid(
        fmt::format("job {} has ranks 0 to {}, not {}", job, active.row.num_nodes - 1, rank));
  }
  if (active.row.status != JobStatus::kRunning ||
      static_cast<size_t>(rank) >= active.row.placement.size()) {
    return Status::Conflict(
        fmt::format("job {} is {}, not RUNNING yet", job, JobStatusName(active.row.status)));
  }
  return RankTarget{active.row, active.row.placement[static_cast<size_t>(rank)].node};
}

std::optional<TimeMs> ReadModel::NodeLastSeen(const std::string& node) {
  CoreLock lock(s_);
  auto it = s_.nodes.find(node);
  if (it == s_.nodes.end()) return std::nullopt;
  return it->second.row.last_seen;
}

std::string ReadModel::TeamOf(const std::string& user) {
  CoreLock lock(s_);
  return s_.shares.TeamOf(user);
}

std::vector<RunningUsage> ReadModel::RunningAttempts() {
  CoreLock lock(s_);
  const TimeMs now = s_.clock.Now();
  std::vector<RunningUsage> out;
  for (const auto& [id, job] : s_.jobs) {
    if (!IsActive(job.row.status) && !job.terminating) continue;
    if (job.row.placement.empty()) continue;
    out.push_back(life_.UsageOf(job, now));
  }
  return out;
}

double ReadModel::TeamUsage(const std::string& team) {
  CoreLock lock(s_);
  const TimeMs now = s_.clock.Now();
  double usage = s_.shares.EndedTeamUsage(team, now);
  for (const auto& [id, job] : s_.jobs) {
    if (!IsActive(job.row.status) || s_.shares.TeamOf(job.row.user) != team) continue;
    usage +=
        s_.shares.RunningUse(job.row.resources.gpu_type, job.gpu_milli_held(), job.placed_at, now);
  }
  return usage;
}

std::vector<std::tuple<std::string, std::string, MilliGpu>> ReadModel::Holders(
    const std::string& type) {
  CoreLock lock(s_);
  std::map<std::string, MilliGpu> by_user;
  for (const auto& [id, job] : s_.jobs) {
    if (!IsActive(job.row.status) && !job.terminating) continue;
    if (job.row.resources.gpu_type != type || job.row.resources.gpu_milli <= 0) continue;
    by_user[job.row.user] += job.gpu_milli_held();
  }
  std::vector<std::tuple<std::string, std::string, MilliGpu>> out;
  for (const auto& [user, milli] : by_user) out.emplace_back(user, s_.shares.TeamOf(user), milli);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
  return out;
}

std::map<std::string, std::map<std::string, MilliGpu>> ReadModel::TeamHoldings() {
  CoreLock lock(s_);
  std::map<std::string, std::map<std::string, MilliGpu>> out;
  for (const auto& [id, job] : s_.jobs) {
    if (!IsActive(job.row.status) || job.row.resources.gpu_milli <= 0) continue;
    out[s_.shares.TeamOf(job.row.user)][job.row.resources.gpu_type] += job.gpu_milli_held();
  }
  return out;
}

ReadModel::Totals ReadModel::ClusterTotals() {
  Totals out;
  out.nodes = {{"UP", 0}, {"DRAINING", 0}, {"DOWN", 0}};
  HandlerLock lock(s_);
  const JobCounts::Slots jobs = s_.counts.Totals();
  for (const auto& [name, node] : s_.nodes) {
    const bool down = node.row.state == NodeState::kDown;
    ++out.nodes[std::string(NodeStateName(
        ShownNodeState(node.row.state, node.row.draining || node.health.NodeFaulty())))];
    out.cpus += node.row.cpus;
    out.memory += node.row.memory;
    out.cpus_used += node.cpus_used;
    out.memory_used += node.memory_used;
    for (const GpuDevice& d : node.row.gpus) {
      Totals::Gpus& g = out.gpus[d.type];
      g.total += kMilliPerGpu;
      auto used = node.gpu_used.find(d.index);
      if (used != node.gpu_used.end()) g.used += used->second;
      if (down) g.down += kMilliPerGpu;
    }
  }
  for (int slot = 0; slot < JobCounts::kSlots; ++slot) {
    if (jobs[static_cast<size_t>(slot)] == 0) continue;
    const std::string status =
        slot == JobCounts::kStoppingSlot ? "STOPPING" : std::string(JobStatusName(JobStatus(slot)));
    out.jobs[status] = jobs[static_cast<size_t>(slot)];
  }
  return out;
}

std::vector<ReadModel::QueueEntry> ReadModel::ActiveEntries(const listing::RowFilter& filter) {
  std::vector<QueueEntry> out;
  HandlerLock lock(s_);
  out.reserve(s_.jobs.size());
  std::map<std::string, bool> in_team;  // a user's membership, looked up once per user
  auto member = [&](const std::string& user) NO_THREAD_SAFETY_ANALYSIS {
    auto [t, fresh] = in_team.try_emplace(user, false);
    if (fresh) t->second = s_.shares.TeamOf(user) == filter.team_name();
    return t->second;
  };
  for (auto it = s_.jobs.rbegin(); it != s_.jobs.rend(); ++it) {
    const JobRow& row = it->second.row;
    if (IsTerminal(row.status)) continue;  // still stopping: ended for its user
    if (!filter.Passes(row.user, row.status, row.group, member)) continue;
    out.push_back(QueueEntry{row.id, row.group, row.user, row.status, row.priority});
  }
  return out;
}

Result<std::pair<JobRow, bool>> ReadModel::JobRowOf(int64_t job) {
  if (auto active = ActiveJobRow(job)) return *active;
  auto rows = s_.store.GetJobs({job});
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return Status::NotFound(fmt::format("no job {}", job));
  return std::make_pair(std::move(rows->front()), false);
}

Result<GroupTallies::Tally> ReadModel::Group(int64_t group) {
  if (std::optional<GroupTallies::Tally> tallied = TalliedGroup(group)) return *tallied;
  auto size = s_.store.GroupSize(group);
  if (!size.ok()) return size.status();
  auto counts = s_.store.GroupStatusCounts({group});
  if (!counts.ok()) return counts.status();
  auto info = s_.store.GetGroup(group);
  if (!info.ok()) return info.status();
  GroupTallies::Tally g{.size = *size, .user = info->user, .max_running = info->max_running};
  for (const auto& [status, n] : (*counts)[group]) g.by_status[static_cast<int>(status)] = n;
  return g;
}

Result<std::map<int64_t, std::map<JobStatus, int>>> ReadModel::GroupCounts(
    const std::vector<int64_t>& groups) {
  std::map<int64_t, std::map<JobStatus, int>> out = s_.tallies.Counts(groups);
  std::vector<int64_t> untallied;
  for (int64_t group : groups) {
    if (!out.count(group)) untallied.push_back(group);
  }
  if (untallied.empty()) return out;
  auto stored = s_.store.GroupStatusCounts(untallied);
  if (!stored.ok()) return stored.status();
  out.merge(*stored);
  return out;
}

}  // namespace berth
