// A GpuSampler scripted per GPU (agent/gpu_sampler.h): the test sets each GPU's SM utilisation,
// memory and processes, or makes the next samples fail, and the clock it stamps samples with.
//
// Thread-safety: every method is thread-safe (one mutex).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_sampler.h"
#include "common/clock.h"

namespace berth::testing {

class FakeGpuSampler final : public GpuSampler {
 public:
  explicit FakeGpuSampler(const Clock& clock) : clock_(clock) {}

  // GPU `index` reads `sm` % (none: "[N/A]"), `memory_mib` used, with processes `pids`.
  void Set(int index, std::optional<int> sm, std::vector<pid_t> pids = {}, int64_t memory_mib = 0) {
    std::lock_guard lock(mu_);
    GpuReading& r = gpus_[index];
    r.index = index;
    r.uuid = "GPU-fake-" + std::to_string(index);
    r.sm_percent = sm;
    r.pids = std::move(pids);
    r.memory_mib = memory_mib;
  }
  // Samples fail with `why` until Heal().
  void Fail(std::string why) {
    std::lock_guard lock(mu_);
    failure_ = std::move(why);
  }
  void Heal() {
    std::lock_guard lock(mu_);
    failure_.reset();
  }
  int samples() const {
    std::lock_guard lock(mu_);
    return samples_;
  }

  Result<GpuSample> Sample() override {
    std::lock_guard lock(mu_);
    ++samples_;
    if (failure_) return Status::Unavailable(*failure_);
    GpuSample s;
    s.at = clock_.Now();
    for (const auto& [index, r] : gpus_) s.gpus.push_back(r);
    return s;
  }

 private:
  const Clock& clock_;
  mutable std::mutex mu_;
  std::map<int, GpuReading> gpus_;
  std::optional<std::string> failure_;
  int samples_ = 0;
};

}  // namespace berth::testing
