// UsageLedger: each user's and team's decayed, weighted GPU usage, for fair share
// (docs/fair-share.md). A GPU-second of type T counts `weight(T)` (default 1); usage decays with a
// half-life H, so a GPU-second used d ago counts 2^(-d/H). An attempt that held r weighted GPUs
// from a to b contributes the exact integral r * H/ln2 * (2^(-(now-b)/H) - 2^(-(now-a)/H)).
//
// With an idle charge, the GPU time an attempt's sampled GPUs sat idle counts that much more (at
// the attempt's end), so that who holds GPUs idle pays for it in the queue's order.
//
// Ended attempts are added once, when their end is committed; running attempts are added per pass
// (Running()), never stored. At start-up the ledger is rebuilt from the store's hourly rollup, each
// hour's GPU-seconds decayed from the middle of the hour.
//
// Pure: no clock (callers pass `now`), no store. Not thread-safe; the Core guards it with its lock.
#pragma once

#include <map>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"

namespace berth {

struct UsageConfig {
  DurationMs half_life_ms = 7LL * 24 * 3600 * 1000;
  std::map<std::string, double> gpu_weights;  // GPU type -> weight; a type without one weighs 1
  // What an idle GPU-second (all of an attempt's sampled GPUs below the idle threshold:
  // docs/idle.md) costs on top of its use, as a multiple of it (--idle-charge; 0: nothing more).
  double idle_charge = 0;
};

// Ok, or InvalidArgument naming what is wrong: a half-life of 0 would make usage inert (Kueue's
// #7101), so it is refused rather than accepted; weights must be finite and >= 0.
Status CheckUsageConfig(const UsageConfig& config);

class UsageLedger {
 public:
  explicit UsageLedger(UsageConfig config) : config_(std::move(config)) {}

  double Weight(const std::string& gpu_type) const;
  // Weighted GPU-seconds of holding `gpu_milli` of `type` from `from` to `to`, decayed to `now`.
  double Decayed(const std::string& type, MilliGpu gpu_milli, TimeMs from, TimeMs to,
                 TimeMs now) const;
  // Adds an ended attempt.
  void Add(const UsageRecord& record);
  // Adds one hour of the rollup (start-up).
  void AddBucket(const UsageBucket& bucket);
  // Decayed usage at `now` of a user and of a team ("" = the default team), ended attempts only.
  double User(const std::string& user, TimeMs now) const;
  double Team(const std::string& team, TimeMs now) const;
  // Every user and team with usage.
  const std::map<std::string, std::pair<double, TimeMs>>& users() const { return users_; }
  const std::map<std::string, std::pair<double, TimeMs>>& teams() const { return teams_; }
  const UsageConfig& config() const { return config_; }

 private:
  // (value, at): the usage as it was at `at`; decays from there.
  static void AddAt(std::pair<double, TimeMs>& entry, double amount, TimeMs at, double half_life);
  static double ValueAt(const std::pair<double, TimeMs>& entry, TimeMs now, double half_life);

  UsageConfig config_;
  std::map<std::string, std::pair<double, TimeMs>> users_;
  std::map<std::string, std::pair<double, TimeMs>> teams_;
};

}  // namespace berth
