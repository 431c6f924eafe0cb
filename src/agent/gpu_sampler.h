// GpuSampler: one reading of every GPU on the node — SM utilisation, memory used and the compute
// processes on it — taken every few seconds by one sampler per node, however many jobs run there
// (agent/gpu_usage.h attributes the readings to the jobs holding the devices).
//
// NvidiaSmiSampler asks nvidia-smi exactly two questions, through a CommandRunner with a hard
// timeout (a hung driver must not hang the agent):
//   nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used --format=csv,noheader,nounits
//   nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits
// Checks outside the repository rely on these forms. A GPU in MIG mode reports "[N/A]" for its
// utilisation: its reading has none (unknown), and only whether processes run on it counts.
// A failed or timed-out sample is an error: the caller treats utilisation as unknown, never idle.
//
// Thread-safety: NvidiaSmiSampler keeps no state of its own (its CommandRunner is thread-safe);
// the parse functions are pure.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "supervise/timed_command.h"

namespace berth {

struct GpuReading {
  int index = -1;
  std::string uuid;
  std::optional<int> sm_percent;      // none: not reported ("[N/A]": a GPU in MIG mode)
  std::optional<int64_t> memory_mib;  // used, none: not reported
  std::vector<pid_t> pids;            // compute processes on it, ascending
  bool operator==(const GpuReading&) const = default;
};

struct GpuSample {
  TimeMs at = 0;
  std::vector<GpuReading> gpus;  // by index
};

class GpuSampler {
 public:
  virtual ~GpuSampler() = default;
  // One reading of every GPU; an error when it could not be taken (no driver, a timeout).
  virtual Result<GpuSample> Sample() = 0;
};

class NvidiaSmiSampler final : public GpuSampler {
 public:
  // Keeps references to both, which must outlive it.
  NvidiaSmiSampler(CommandRunner& runner, const Clock& clock, DurationMs timeout = 10'000)
      : runner_(runner), clock_(clock), timeout_(timeout) {}
  Result<GpuSample> Sample() override;

  static const std::vector<std::string>& GpuQuery();   // the argv of the first question
  static const std::vector<std::string>& AppsQuery();  // the argv of the second

 private:
  CommandRunner& runner_;
  const Clock& clock_;
  const DurationMs timeout_;
};

// `--query-gpu=index,uuid,utilization.gpu,memory.used` output (csv, noheader, nounits): one
// reading per line. Errors name the line: a wrong number of fields, an index that is no number.
Result<std::vector<GpuReading>> ParseGpuQuery(const std::string& csv);
// Adds `--query-compute-apps=gpu_uuid,pid,used_memory` output's processes to the readings of
// their GPUs (by UUID; a process on a GPU not listed is ignored). Errors name the line.
Status AddComputeApps(const std::string& csv, std::vector<GpuReading>& readings);

}  // namespace berth
