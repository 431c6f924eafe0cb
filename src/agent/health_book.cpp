#include "agent/health_book.h"

#include <algorithm>

namespace berth {

bool HealthBook::Record(const ProbeRun& run, int64_t now_ms) {
  proto::ProbeResult& result = results_[run.name];
  result.name = run.name;
  result.ok = run.findings.empty();
  result.timed_out = run.timed_out;
  result.reason.clear();
  for (const auto& f : run.findings) {
    if (!result.reason.empty()) result.reason += "; ";
    result.reason += f.reason;
  }
  result.at_ms = now_ms;
  result.duration_ms = run.duration_ms;
  if (!result.ok) ++result.failures;
  if (run.timed_out) ++result.timeouts;

  bool changed = false;
  std::set<int> found;
  for (const auto& f : run.findings) {
    found.insert(f.gpu);
    auto [it, added] = open_.try_emplace({run.name, f.gpu});
    Open& open = it->second;
    if (added) {
      open.fault = {run.name, f.gpu, f.reason, now_ms, false};
      changed = true;
    } else if (!open.fault.sticky) {
      changed = changed || open.fault.reason != f.reason;
      open.fault.reason = f.reason;  // the latest words, since the first finding
    }
    open.clean = 0;
  }
  for (auto it = open_.begin(); it != open_.end();) {
    Open& open = it->second;
    if (it->first.first != run.name || found.count(it->first.second) || open.fault.sticky) {
      ++it;
      continue;
    }
    if (++open.clean >= clean_runs_) {
      it = open_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  return changed;
}

bool HealthBook::AddSticky(const std::string& probe, int gpu, const std::string& reason,
                           int64_t now_ms) {
  auto [it, added] = open_.try_emplace({probe, gpu});
  it->second.fault = {probe, gpu, reason, added ? now_ms : it->second.fault.since_ms, true};
  it->second.clean = 0;
  return added;
}

void HealthBook::Reset() { open_.clear(); }

proto::NodeHealth HealthBook::Health() const {
  proto::NodeHealth health;
  for (const auto& [key, open] : open_) health.faults.push_back(open.fault);
  for (const auto& [name, result] : results_) health.probes.push_back(result);
  return health;
}

bool HealthBook::NodeFaulty() const {
  return std::any_of(open_.begin(), open_.end(),
                     [](const auto& entry) { return entry.first.second < 0; });
}

std::vector<proto::HealthFault> HealthBook::StickyFaults() const {
  std::vector<proto::HealthFault> out;
  for (const auto& [key, open] : open_) {
    if (open.fault.sticky) out.push_back(open.fault);
  }
  return out;
}

}  // namespace berth
