#include "server/gpu_usage_table.h"

#include <algorithm>

namespace berth {

void GpuUsageTable::Forget(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  for (const proto::GpuUsage& u : it->second.usage) {
    auto j = by_job_.find({u.id.job, u.id.attempt});
    if (j == by_job_.end()) continue;
    std::erase(j->second, node);
    if (j->second.empty()) by_job_.erase(j);
  }
  nodes_.erase(it);
}

void GpuUsageTable::Update(const std::string& node, std::vector<proto::GpuUsage> usage, TimeMs now,
                           std::vector<proto::GpuNow> gpus_now) {
  MutexLock lock(mu_);
  Forget(node);
  // Nodes that stopped sending heartbeats go, once a minute (not a walk of every node per beat).
  if (now >= next_sweep_) {
    next_sweep_ = now + kSweepMs;
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      const std::string name = it->first;
      const bool stale = now - it->second.at > kStaleMs;
      ++it;
      if (stale) Forget(name);
    }
  }
  if (usage.empty() && gpus_now.empty()) return;
  while (nodes_.size() >= kMaxNodes) {
    auto stalest = std::min_element(nodes_.begin(), nodes_.end(), [](const auto& a, const auto& b) {
      return a.second.at < b.second.at;
    });
    Forget(stalest->first);
  }
  for (const proto::GpuUsage& u : usage) {
    std::vector<std::string>& reporters = by_job_[{u.id.job, u.id.attempt}];
    if (std::find(reporters.begin(), reporters.end(), node) == reporters.end()) {
      reporters.push_back(node);
    }
  }
  nodes_[node] = {now, std::move(usage), std::move(gpus_now)};
}

std::map<int, proto::GpuNow> GpuUsageTable::GpusOf(const std::string& node, TimeMs now) const {
  MutexLock lock(mu_);
  std::map<int, proto::GpuNow> out;
  auto it = nodes_.find(node);
  if (it == nodes_.end() || now - it->second.at > kGpusNowMs) return out;
  for (const proto::GpuNow& g : it->second.gpus_now) out.emplace(g.index, g);
  return out;
}

void GpuUsageTable::Add(JobGpuUse& use, const proto::GpuUsage& rank, TimeMs at) {
  const bool first = use.ranks == 0;
  const double mean = rank.mean_sm_tenths / 10.0;
  use.mean_sm = (use.mean_sm * use.ranks + mean) / (use.ranks + 1);
  ++use.ranks;
  use.known = (first || use.known) && rank.known;
  use.samples = first ? rank.samples : std::min(use.samples, rank.samples);
  use.p95_sm = std::max(use.p95_sm, rank.p95_sm);
  use.peak_memory_mib += rank.peak_memory_mib;
  use.idle_ms = first ? rank.idle_ms : std::min(use.idle_ms, rank.idle_ms);
  use.idle_for_ms = first ? rank.idle_for_ms : std::min(use.idle_for_ms, rank.idle_for_ms);
  use.at = first ? at : std::min(use.at, at);
}

std::optional<JobGpuUse> GpuUsageTable::Of(int64_t job, int attempt, TimeMs now) const {
  MutexLock lock(mu_);
  auto j = by_job_.find({job, attempt});
  if (j == by_job_.end()) return std::nullopt;
  JobGpuUse use;
  for (const std::string& node : j->second) {
    const NodeReport& report = nodes_.at(node);
    if (now - report.at > kStaleMs) continue;
    for (const proto::GpuUsage& u : report.usage) {
      if (u.id.job == job && u.id.attempt == attempt) Add(use, u, report.at);
    }
  }
  if (use.ranks == 0) return std::nullopt;
  return use;
}

std::map<std::pair<int64_t, int>, JobGpuUse> GpuUsageTable::All(TimeMs now) const {
  MutexLock lock(mu_);
  std::map<std::pair<int64_t, int>, JobGpuUse> out;
  for (const auto& [node, report] : nodes_) {
    if (now - report.at > kStaleMs) continue;
    for (const proto::GpuUsage& u : report.usage) Add(out[{u.id.job, u.id.attempt}], u, report.at);
  }
  return out;
}

}  // namespace berth
