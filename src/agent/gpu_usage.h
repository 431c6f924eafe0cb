// GpuUsageBook: what each job attempt's GPUs did, from the node's samples (agent/gpu_sampler.h):
// mean and p95 SM utilisation, peak memory, and how long they have been idle. One book
// per node; a rank enters when its GPUs are granted and leaves when it ends.
//
// At a sample, a job's GPUs are idle when each of them is below the policy's threshold or has no
// process on it (spec/idle_policy.h). A sample that failed, or that lacks one of its GPUs, is
// unknown: it ends any idle spell (a job is never counted idle for what was not seen) and adds
// nothing to the statistics. A GPU that reports no utilisation (MIG mode) but runs a process is
// busy for the idle rule and absent from the SM statistics. A GPU shared by several jobs
// (fractions, MPS) is judged as a whole for each of them.
//
// Thread-safety: not thread-safe; the agent's sampler thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "agent/gpu_sampler.h"
#include "common/clock.h"
#include "common/status.h"

namespace berth {

struct GpuUse {
  int samples = 0;                    // samples that saw its GPUs' utilisation
  int64_t sm_sum = 0;                 // of each such sample's mean SM % over its GPUs
  std::array<uint32_t, 101> by_sm{};  // such samples per mean SM %
  int64_t peak_memory_mib = 0;        // the most its GPUs held at once
  DurationMs idle_ms = 0;             // idle in all, between samples that both found it idle
  std::optional<TimeMs> idle_since;   // the first sample of the current idle spell
  bool known = false;                 // whether the last sample saw its GPUs

  double MeanSm() const { return samples == 0 ? 0.0 : static_cast<double>(sm_sum) / samples; }
  int P95Sm() const;  // the least SM % that at least 95 % of the samples were at or below
  DurationMs IdleFor(TimeMs now) const { return idle_since ? now - *idle_since : 0; }
};

class GpuUsageBook {
 public:
  using Key = std::tuple<int64_t, int, int>;  // (job, attempt, rank)

  explicit GpuUsageBook(int below) : below_(below) {}

  // The attempt holds GPUs `devices` (indices on this node) from now on; its GPUs are idle below
  // `below` % SM (0: the book's own threshold).
  void Hold(const Key& key, std::vector<int> devices, int below = 0);
  void Drop(const Key& key);
  // Attributes one sample (or its failure, at `now`) to every attempt held.
  void Record(const Result<GpuSample>& sample, TimeMs now);
  const GpuUse* Of(const Key& key) const;
  size_t size() const { return held_.size(); }

 private:
  struct Held {
    std::vector<int> devices;
    int below = 0;
    GpuUse use;
    std::optional<TimeMs> last_idle;  // when the previous sample found it idle
  };
  void Unknown(Held& held);

  const int below_;
  std::map<Key, Held> held_;
};

}  // namespace berth
