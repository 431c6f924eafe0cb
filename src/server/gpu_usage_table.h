// GpuUsageTable: what each running job's GPUs did, as its nodes' heartbeats last said
// (agent/gpu_watch.h samples them). Telemetry, kept outside the Core's transactions: nothing is
// decided from a value nobody committed, a restart or failover forgets it, and the next
// heartbeat of each node (every few seconds) brings it back.
//
// A node's heartbeat replaces everything that node said before (a rank it no longer mentions has
// ended there); a heartbeat that says nothing of a node that said nothing costs one lookup (most
// nodes, without sampled GPUs). Bounded: nodes silent for kStaleMs are swept out at most once every
// kSweepMs (reads skip them meanwhile), and at most kMaxNodes nodes are kept (the stalest goes
// first).
//
// Thread-safety: every method is thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "protocol/agent_protocol.h"

namespace berth {

// One attempt's GPU use, over its ranks that report one.
struct JobGpuUse {
  int ranks = 0;                // ranks reporting
  bool known = false;           // every one of them saw its GPUs at its last sample
  int samples = 0;              // the fewest samples of a rank
  double mean_sm = 0;           // percent, the mean of the ranks' means
  int p95_sm = 0;               // percent, the highest of the ranks'
  int64_t peak_memory_mib = 0;  // the ranks' peaks, summed
  int64_t idle_ms = 0;          // the least of the ranks': the job is idle only when all are
  int64_t idle_for_ms = 0;      // the current idle spell, the shortest of the ranks'
  TimeMs at = 0;                // when the oldest of these reports came
};

class GpuUsageTable {
 public:
  static constexpr DurationMs kStaleMs = 5 * 60'000;
  static constexpr DurationMs kSweepMs = 60'000;
  static constexpr size_t kMaxNodes = 100'000;

  // How long a node's GPUs as last sampled are shown (GpusOf): a few heartbeats.
  static constexpr DurationMs kGpusNowMs = 60'000;

  // The heartbeat of `node` at `now` said `usage` (empty: it holds no sampled GPUs) and its GPUs
  // as last sampled (`gpus_now`).
  void Update(const std::string& node, std::vector<proto::GpuUsage> usage, TimeMs now,
              std::vector<proto::GpuNow> gpus_now = {}) EXCLUDES(mu_);
  // `node`'s GPUs by index as its last heartbeat said (none when older than kGpusNowMs).
  std::map<int, proto::GpuNow> GpusOf(const std::string& node, TimeMs now) const EXCLUDES(mu_);
  std::optional<JobGpuUse> Of(int64_t job, int attempt, TimeMs now) const EXCLUDES(mu_);
  // Every attempt with a use, for the idle policy and metrics.
  std::map<std::pair<int64_t, int>, JobGpuUse> All(TimeMs now) const EXCLUDES(mu_);

 private:
  struct NodeReport {
    TimeMs at = 0;
    std::vector<proto::GpuUsage> usage;
    std::vector<proto::GpuNow> gpus_now;
  };
  static void Add(JobGpuUse& use, const proto::GpuUsage& rank, TimeMs at);
  void Forget(const std::string& node) REQUIRES(mu_);

  mutable Mutex mu_;
  TimeMs next_sweep_ GUARDED_BY(mu_) = 0;
  std::map<std::string, NodeReport> nodes_ GUARDED_BY(mu_);
  // (job, attempt) -> the nodes reporting it.
  std::map<std::pair<int64_t, int>, std::vector<std::string>> by_job_ GUARDED_BY(mu_);
};

}  // namespace berth
