#include "agent/gpu_watch.h"

#include <algorithm>

#include "common/strings.h"

namespace berth {

GpuUsageBook::Key GpuWatch::KeyOf(const proto::AttemptRank& id) {
  return {id.job, id.attempt, id.rank};
}

void GpuWatch::SetSampler(std::unique_ptr<GpuSampler> sampler) {
  MutexLock lock(mu_);
  sampler_ = std::move(sampler);
}

bool GpuWatch::Hold(const proto::AttemptRank& id, std::vector<int> devices, int below) {
  MutexLock lock(mu_);
  if (!sampler_ || devices.empty()) return false;
  book_.Hold(KeyOf(id), std::move(devices), below);
  ranks_[KeyOf(id)] = id;
  return true;
}

void GpuWatch::Release(const proto::AttemptRank& id) {
  MutexLock lock(mu_);
  book_.Drop(KeyOf(id));
  ranks_.erase(KeyOf(id));
}

void GpuWatch::SampleOnce() {
  std::shared_ptr<GpuSampler> sampler;
  {
    MutexLock lock(mu_);
    if (ranks_.empty()) return;  // nobody to attribute to: nvidia-smi is not asked
    sampler = sampler_;
  }
  if (!sampler) return;
  Result<GpuSample> sample = sampler->Sample();  // (seconds at worst: not under the lock)
  MutexLock lock(mu_);
  const TimeMs now = clock_.Now();
  book_.Record(sample, now);
  last_.clear();
  if (!sample.ok()) return;
  for (const GpuReading& g : sample->gpus) {
    if (!g.sm_percent || last_.size() >= proto::HeartbeatRequest::kMaxGpusNow) continue;
    last_.push_back({.index = g.index,
                     .sm = std::clamp(*g.sm_percent, 0, 100),
                     .memory_mib = std::max<int64_t>(g.memory_mib.value_or(0), 0)});
  }
  last_at_ = now;
}

std::vector<proto::GpuNow> GpuWatch::GpusNow() const {
  MutexLock lock(mu_);
  if (clock_.Now() - last_at_ > 3 * interval_) return {};
  return last_;
}

void GpuWatch::Loop() {
  while (true) {
    {
      MutexLock lock(mu_);
      const int64_t since = MonotonicMs();
      for (int64_t now = since; !stop_ && now < since + interval_; now = MonotonicMs()) {
        wake_.WaitFor(mu_, since + interval_ - now);
      }
      if (stop_) return;
    }
    SampleOnce();
  }
}

void GpuWatch::Stop() {
  MutexLock lock(mu_);
  stop_ = true;
  wake_.SignalAll();
}

std::vector<proto::GpuUsage> GpuWatch::Usage() const {
  MutexLock lock(mu_);
  std::vector<proto::GpuUsage> out;
  const TimeMs now = clock_.Now();
  for (const auto& [key, id] : ranks_) {
    if (out.size() >= proto::HeartbeatRequest::kMaxGpuUsage) break;
    const GpuUse* use = book_.Of(key);
    if (use == nullptr) continue;
    proto::GpuUsage u;
    u.id = id;
    u.known = use->known;
    u.samples = use->samples;
    u.mean_sm_tenths = static_cast<int>(use->MeanSm() * 10 + 0.5);
    u.p95_sm = use->P95Sm();
    u.peak_memory_mib = use->peak_memory_mib;
    u.idle_ms = use->idle_ms;
    u.idle_for_ms = std::max<DurationMs>(use->IdleFor(now), 0);
    out.push_back(u);
  }
  return out;
}

std::string GpuWatch::HoldText(const std::vector<int>& devices, int below) {
  std::string out;
  for (int d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out + " " + std::to_string(below) + "\n";
}

std::optional<std::pair<std::vector<int>, int>> GpuWatch::ParseHold(std::string_view text) {
  const std::vector<std::string> parts = Split(Trim(std::string(text)), ' ');
  if (parts.size() != 2) return std::nullopt;
  std::vector<int> devices;
  for (const std::string& d : Split(parts[0], ',')) {
    std::optional<int64_t> index = ParseDecimal(d);
    if (!index || *index < 0 || *index > 1'000'000) return std::nullopt;
    devices.push_back(static_cast<int>(*index));
  }
  std::optional<int64_t> below = ParseDecimal(parts[1]);
  if (devices.empty() || !below || *below < 0 || *below > 100) return std::nullopt;
  return std::make_pair(std::move(devices), static_cast<int>(*below));
}

}  // namespace berth
