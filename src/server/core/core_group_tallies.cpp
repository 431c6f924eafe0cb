// Bulk groups' status counts kept in memory (group_tallies.h): how the core's jobs move them, how
// they start at load, and what the API reads of them.
#include "common/log.h"
#include "server/core/core.h"

namespace berth {

void Core::TallyJob(Txn& txn, ActiveJob& job) {
  if (!job.tallied || *job.tallied == job.row.status || !job.row.group) return;
  txn.out.tally_moves.emplace_back(*job.row.group, *job.tallied, job.row.status);
  job.tallied = job.row.status;  // with the job: an undo puts it back
}

Status Core::LoadGroupTallies() {
  std::map<int64_t, GroupTallies::Tally> loaded;  // group -> its jobs in memory (live, user)
  for (const auto& [id, job] : jobs_) {
    if (!job.row.group) continue;
    GroupTallies::Tally& t = loaded[*job.row.group];
    ++t.live;
    t.user = job.row.user;
    t.size = job.group_size;
  }
  if (loaded.empty()) return Status::Ok();
  std::vector<int64_t> groups;
  groups.reserve(loaded.size());
  for (const auto& [group, t] : loaded) groups.push_back(group);
  auto counts = store_.GroupStatusCounts(groups);
  if (!counts.ok()) return counts.status();
  for (auto& [group, t] : loaded) {
    for (const auto& [status, n] : (*counts)[group]) t.by_status[static_cast<int>(status)] = n;
    t.max_running = group_limits_.Limit(group);
    tallies_.Start(group, std::move(t));
  }
  for (auto& [id, job] : jobs_) {
    if (job.row.group) job.tallied = job.row.status;
  }
  return Status::Ok();
}

bool Core::GroupTalliesConsistentForTesting() {
  MutexLock lock(mu_);
  std::map<int64_t, int64_t> live;
  const std::unordered_map<int64_t, GroupTallies::Tally> tallies = tallies_.All();
  for (const auto& [id, job] : jobs_) {
    const bool tallied = job.row.group && tallies.count(*job.row.group);
    if (tallied != job.tallied.has_value()) {
      LogError("job {}: tallied {} but its group's tally {}", id, job.tallied.has_value(),
               tallied ? "exists" : "does not");
      return false;
    }
    if (!tallied) continue;
    if (*job.tallied != job.row.status) {
      LogError("job {} is tallied as {} but is {}", id, JobStatusName(*job.tallied),
               JobStatusName(job.row.status));
      return false;
    }
    ++live[*job.row.group];
  }
  std::vector<int64_t> groups;
  for (const auto& [group, t] : tallies) groups.push_back(group);
  auto stored = store_.GroupStatusCounts(groups);
  if (!stored.ok()) return false;
  for (const auto& [group, t] : tallies) {
    if (t.live != live[group] || t.Counts() != (*stored)[group] ||
        t.max_running != group_limits_.Limit(group)) {
      LogError("group {}: tally of {} live jobs differs from memory ({}) or the store", group,
               t.live, live[group]);
      return false;
    }
    int64_t sum = 0;
    for (int64_t n : t.by_status) sum += n;
    if (sum != t.size) {
      LogError("group {}: tally counts {} jobs of {}", group, sum, t.size);
      return false;
    }
  }
  return true;
}

}  // namespace berth
