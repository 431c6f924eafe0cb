// GpuWatch: the node's one GPU sampler loop. Every interval it takes one sample of all
// the node's GPUs (agent/gpu_sampler.h) and attributes it to the ranks holding them
// (agent/gpu_usage.h); the heartbeat carries what each rank's GPUs did (proto::GpuUsage). A rank
// is held from its launch (or its re-adoption after a restart) until its processes are gone.
//
// Sampling runs on its own thread and under its own mutex, never the agent's: a slow or hung
// nvidia-smi (cut off at its timeout) delays neither launches nor log shipping. Without a sampler
// (no GPUs, no nvidia-smi on PATH, or --gpu-sample-interval 0) it holds nothing and reports
// nothing.
//
// Thread-safety: every method is thread-safe (one mutex); Loop() runs on one thread until Stop().
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/gpu_sampler.h"
#include "agent/gpu_usage.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "protocol/agent_protocol.h"

namespace berth {

class GpuWatch {
 public:
  // `below`: the SM % under which a GPU counts as idle (spec/idle_policy.h).
  GpuWatch(const Clock& clock, DurationMs interval, int below)
      : clock_(clock), interval_(interval), book_(below) {}

  // Starts sampling with `sampler` (none: sampling is off).
  void SetSampler(std::unique_ptr<GpuSampler> sampler) EXCLUDES(mu_);
  // Rank `id` holds GPUs `devices` (indices on this node) from now on, idle below `below` % SM
  // (its idle policy's; 0: the watch's default); no GPUs, or no sampler: not held (false).
  bool Hold(const proto::AttemptRank& id, std::vector<int> devices, int below = 0) EXCLUDES(mu_);
  void Release(const proto::AttemptRank& id) EXCLUDES(mu_);

  // One sample now, attributed (Loop's step; tests call it directly).
  void SampleOnce() EXCLUDES(mu_);
  // Samples every interval until Stop().
  void Loop() EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);

  // What each held rank's GPUs did so far, for the heartbeat (at most
  // HeartbeatRequest::kMaxGpuUsage).
  std::vector<proto::GpuUsage> Usage() const EXCLUDES(mu_);
  // The node's GPUs as the last sample saw them (those whose utilisation it reported), for the
  // heartbeat; none when the last sample failed or is older than three intervals.
  std::vector<proto::GpuNow> GpusNow() const EXCLUDES(mu_);

  // What a rank's hold is kept as in its job dir (kHoldFile), so that an agent that restarts holds
  // a re-adopted rank again: "0,1 20\n" (its devices, its idle threshold). ParseHold: none for
  // anything else (a MIG slice's UUID, a damaged file).
  static constexpr char kHoldFile[] = "gpu_hold";
  static std::string HoldText(const std::vector<int>& devices, int below);
  static std::optional<std::pair<std::vector<int>, int>> ParseHold(std::string_view text);

 private:
  static GpuUsageBook::Key KeyOf(const proto::AttemptRank& id);

  const Clock& clock_;
  const DurationMs interval_;
  mutable Mutex mu_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  // The sampler is used outside the lock (a sample may take seconds); it is set once, before Loop.
  std::shared_ptr<GpuSampler> sampler_ GUARDED_BY(mu_);
  GpuUsageBook book_ GUARDED_BY(mu_);
  std::map<GpuUsageBook::Key, proto::AttemptRank> ranks_ GUARDED_BY(mu_);
  std::vector<proto::GpuNow> last_ GUARDED_BY(mu_);  // the last sample's, by GPU
  TimeMs last_at_ GUARDED_BY(mu_) = 0;
};

}  // namespace berth
