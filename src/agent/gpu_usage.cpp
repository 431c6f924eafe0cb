#include "agent/gpu_usage.h"

#include <algorithm>

namespace berth {

int GpuUse::P95Sm() const {
  if (samples == 0) return 0;
  const int64_t need = (static_cast<int64_t>(samples) * 95 + 99) / 100;  // ceil(95 %)
  int64_t seen = 0;
  for (int sm = 0; sm <= 100; ++sm) {
    seen += by_sm[static_cast<size_t>(sm)];
    if (seen >= need) return sm;
  }
  return 100;
}

void GpuUsageBook::Hold(const Key& key, std::vector<int> devices, int below) {
  Held& held = held_[key];
  held.devices = std::move(devices);
  held.below = below > 0 ? below : below_;
}

void GpuUsageBook::Drop(const Key& key) { held_.erase(key); }

const GpuUse* GpuUsageBook::Of(const Key& key) const {
  auto it = held_.find(key);
  return it == held_.end() ? nullptr : &it->second.use;
}

void GpuUsageBook::Unknown(Held& held) {
  held.use.known = false;
  held.use.idle_since.reset();
  held.last_idle.reset();
}

void GpuUsageBook::Record(const Result<GpuSample>& sample, TimeMs now) {
  for (auto& [key, held] : held_) {
    if (held.devices.empty()) continue;
    if (!sample.ok()) {
      Unknown(held);
      continue;
    }
    const TimeMs at = sample->at != 0 ? sample->at : now;
    bool seen = true;
    bool idle = true;
    int64_t sm_total = 0;
    int sm_count = 0;
    int64_t memory = 0;
    for (int device : held.devices) {
      auto r = std::find_if(sample->gpus.begin(), sample->gpus.end(),
                            [&](const GpuReading& g) { return g.index == device; });
      if (r == sample->gpus.end()) {
        seen = false;
        break;
      }
      memory += r->memory_mib.value_or(0);
      if (r->sm_percent) {
        sm_total += *r->sm_percent;
        ++sm_count;
      }
      const bool device_idle = r->pids.empty() || (r->sm_percent && *r->sm_percent < held.below);
      idle = idle && device_idle;
    }
    if (!seen) {
      Unknown(held);
      continue;
    }
    GpuUse& use = held.use;
    use.known = true;
    use.peak_memory_mib = std::max(use.peak_memory_mib, memory);
    if (sm_count > 0) {
      const int64_t mean = sm_total / sm_count;
      ++use.samples;
      use.sm_sum += mean;
      ++use.by_sm[static_cast<size_t>(std::clamp<int64_t>(mean, 0, 100))];
    }
    if (!idle) {
      use.idle_since.reset();
      held.last_idle.reset();
      continue;
    }
    if (held.last_idle) use.idle_ms += std::max<DurationMs>(at - *held.last_idle, 0);
    if (!use.idle_since) use.idle_since = at;
    held.last_idle = at;
  }
}

}  // namespace berth
