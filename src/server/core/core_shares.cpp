// Fair share in the core: the rules and usage FairShare (server/core/fair_share.h) keeps, joined
// with the active jobs — what they hold and have used so far (docs/fair-share.md).
#include "common/log.h"
#include "server/core/core.h"

namespace berth {

void Core::SetShareRules(const std::vector<UserRow>& users, const std::vector<TeamRow>& teams) {
  MutexLock lock(mu_);
  shares_.SetRules(users, teams);
  RecountAllJobs();     // users may have changed teams
  RequestPassLocked();  // a new quota or cap may let jobs start, or hold them
}

Status Core::LoadUsage() {
  const TimeMs now = clock_.Now();
  // Ten half-lives back: what is older weighs less than a thousandth.
  auto buckets = store_.LoadUsageBuckets(now - 10 * options_.usage.half_life_ms);
  if (!buckets.ok()) return buckets.status();
  MutexLock lock(mu_);
  for (const UsageBucket& b : *buckets) shares_.AddBucket(b);
  LogInfo("loaded {} hours of usage for fair share", buckets->size());
  return Status::Ok();
}

std::string Core::TeamOf(const std::string& user) {
  MutexLock lock(mu_);
  return shares_.TeamOf(user);
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
  double usage = shares_.EndedTeamUsage(team, now);
  for (const auto& [id, job] : jobs_) {
    if (!IsActive(job.row.status) || shares_.TeamOf(job.row.user) != team) continue;
    usage +=
        shares_.RunningUse(job.row.resources.gpu_type, job.gpu_milli_held(), job.placed_at, now);
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
  for (const auto& [user, milli] : by_user) out.emplace_back(user, shares_.TeamOf(user), milli);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
  return out;
}

std::map<std::string, std::map<std::string, MilliGpu>> Core::TeamHoldings() {
  MutexLock lock(mu_);
  std::map<std::string, std::map<std::string, MilliGpu>> out;
  for (const auto& [id, job] : jobs_) {
    if (!IsActive(job.row.status) || job.row.resources.gpu_milli <= 0) continue;
    out[shares_.TeamOf(job.row.user)][job.row.resources.gpu_type] += job.gpu_milli_held();
  }
  return out;
}

void Core::AddShares(sched::Snapshot& snap) {
  // Running attempts count for what they used so far (the admission charge is the pass's).
  // From the pass index (current: BuildPassInput refreshed it), without looking each job up.
  std::vector<FairShare::Running> running;
  for (const auto& [id, held] : held_index_) {
    if (!held.holds_gpus) continue;
    const sched::RunningJob& r = *held.view;
    running.push_back(
        {r.user, shares_.RunningUse(r.per_node.gpu_type, TotalGpuMilli(r.per_node, r.placement),
                                    held.placed_at, snap.now)});
  }
  shares_.AddTo(snap, running);
}

}  // namespace berth
