// Fair share in the core: the rules (users' caps and teams) Accounts hands over, the decayed usage
// ledger, and what each pass's snapshot carries of them (docs/fair-share.md).
#include "common/log.h"
#include "server/core.h"

namespace berth {

void Core::SetShareRules(const std::vector<UserRow>& users, const std::vector<TeamRow>& teams) {
  MutexLock lock(mu_);
  share_users_.clear();
  for (const UserRow& u : users) share_users_[u.name] = u;
  share_teams_.clear();
  for (const TeamRow& t : teams) share_teams_[t.name] = t;
  RecountAllJobs();     // users may have changed teams
  RequestPassLocked();  // a new quota or cap may let jobs start, or hold them
}

Status Core::LoadUsage() {
  const TimeMs now = clock_.Now();
  // Ten half-lives back: what is older weighs less than a thousandth.
  auto buckets = store_.LoadUsageBuckets(now - 10 * options_.usage.half_life_ms);
  if (!buckets.ok()) return buckets.status();
  MutexLock lock(mu_);
  for (const UsageBucket& b : *buckets) ledger_.AddBucket(b);
  LogInfo("loaded {} hours of usage for fair share", buckets->size());
  return Status::Ok();
}

std::string Core::TeamOfLocked(const std::string& user) const {
  auto it = share_users_.find(user);
  return it == share_users_.end() ? "" : it->second.team;
}

std::string Core::TeamOf(const std::string& user) {
  MutexLock lock(mu_);
  return TeamOfLocked(user);
}

std::vector<RunningUsage> Core::RunningAttempts() {
  MutexLock lock(mu_);
  const TimeMs now = clock_.Now();
  std::vector<RunningUsage> out;
  for (const auto& [id, job] : jobs_) {
    if (!IsActive(job.row.status) && !job.terminating) continue;
    if (job.row.placement.empty()) continue;
    out.push_back(UsageOf(job, now));
  }
  return out;
}

double Core::TeamUsage(const std::string& team) {
  MutexLock lock(mu_);
  const TimeMs now = clock_.Now();
  double usage = ledger_.Team(team, now);
  for (const auto& [id, job] : jobs_) {
    if (!IsActive(job.row.status) || TeamOfLocked(job.row.user) != team) continue;
    usage +=
        ledger_.Decayed(job.row.resources.gpu_type, job.gpu_milli_held(), job.placed_at, now, now);
  }
  return usage;
}

std::vector<std::tuple<std::string, std::string, MilliGpu>> Core::Holders(const std::string& type) {
  MutexLock lock(mu_);
  std::map<std::string, MilliGpu> by_user;
  for (const auto& [id, job] : jobs_) {
    if (!IsActive(job.row.status) && !job.terminating) continue;
    if (job.row.resources.gpu_type != type || job.row.resources.gpu_milli <= 0) continue;
    by_user[job.row.user] += job.gpu_milli_held();
  }
  std::vector<std::tuple<std::string, std::string, MilliGpu>> out;
  for (const auto& [user, milli] : by_user) out.emplace_back(user, TeamOfLocked(user), milli);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
  return out;
}

std::map<std::string, std::map<std::string, MilliGpu>> Core::TeamHoldings() {
  MutexLock lock(mu_);
  std::map<std::string, std::map<std::string, MilliGpu>> out;
  for (const auto& [id, job] : jobs_) {
    if (!IsActive(job.row.status) || job.row.resources.gpu_milli <= 0) continue;
    out[TeamOfLocked(job.row.user)][job.row.resources.gpu_type] += job.gpu_milli_held();
  }
  return out;
}

void Core::AddShares(sched::Snapshot& snap) {
  const TimeMs now = snap.now;
  std::map<std::string, double> user_usage;
  std::map<std::string, double> team_usage;
  for (const auto& [name, entry] : ledger_.users()) user_usage[name] = ledger_.User(name, now);
  for (const auto& [name, entry] : ledger_.teams()) team_usage[name] = ledger_.Team(name, now);
  // Running attempts count for what they used so far (the admission charge is the pass's).
  for (const sched::RunningJob& r : snap.running) {
    if (r.stopping || r.per_node.gpu_milli <= 0) continue;
    auto job = jobs_.find(r.id);
    if (job == jobs_.end()) continue;
    const double used = ledger_.Decayed(r.per_node.gpu_type, TotalGpuMilli(r.per_node, r.placement),
                                        job->second.placed_at, now, now);
    user_usage[r.user] += used;
    team_usage[TeamOfLocked(r.user)] += used;
  }
  for (const auto& [name, row] : share_users_) user_usage.try_emplace(name, 0);
  snap.users.reserve(user_usage.size());
  for (const auto& [name, usage] : user_usage) {
    sched::UserView v;
    v.name = name;
    v.usage = usage;
    auto rules = share_users_.find(name);
    if (rules != share_users_.end()) {
      v.team = rules->second.team;
      if (rules->second.max_running_gpus) {
        v.max_running_gpus = static_cast<MilliGpu>(*rules->second.max_running_gpus) * kMilliPerGpu;
      }
    }
    snap.users.push_back(std::move(v));
  }
  for (const auto& [name, row] : share_teams_) team_usage.try_emplace(name, 0);
  for (auto& [team, times] : reclaims_) {
    while (!times.empty() && times.front() <= now - options_.reclaim_window) times.pop_front();
  }
  for (const auto& [name, usage] : team_usage) {
    sched::TeamView v;
    v.name = name;
    v.usage = usage;
    auto rules = share_teams_.find(name);
    if (rules != share_teams_.end()) {
      v.quota = rules->second.quota;
      v.borrow_limit = rules->second.borrow_limit;
      v.weight = rules->second.weight;
    }
    auto reclaimed = reclaims_.find(name);
    if (reclaimed != reclaims_.end()) {
      v.reclaims.assign(reclaimed->second.begin(), reclaimed->second.end());
    }
    snap.teams.push_back(std::move(v));
  }
}

}  // namespace berth
