// What every Store backend writes and reads the same way: the JSON columns (placements, node labels
// and GPUs, a team's per-type GPU amounts), the checks on usage records, how a usage record is
// split into hourly buckets, and how bucket rows add up to `berth usage` rows. Kept here so that
// the SQLite and PostgreSQL backends cannot drift apart; only src/store/ uses it.
//
// Thread-safety: free functions without shared state; a UsageTotals is used by one thread.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/resources.h"
#include "common/status.h"
#include "store/store.h"

namespace berth::store_codec {

std::optional<int64_t> ToOpt(const std::optional<int>& v);
std::optional<int> ToOptInt(const std::optional<int64_t>& v);

// ---- JSON columns ----
// Decoding never throws: a malformed column (a hand-edited database, a bug) is an error naming
// the text, not a crash of the server.
std::string EncodePlacement(const Placement& placement);
Result<Placement> DecodePlacement(const std::string& text);
std::string EncodeLabels(const std::map<std::string, std::string>& labels);
Result<std::map<std::string, std::string>> DecodeLabels(const std::string& text);
std::string EncodeGpus(const std::vector<GpuDevice>& gpus);
Result<std::vector<GpuDevice>> DecodeGpus(const std::string& text);
// A team's quota or borrow limit: {"<GPU type>": milli-GPUs}.
std::string EncodeMilliMap(const std::map<std::string, MilliGpu>& m);
Result<std::map<std::string, MilliGpu>> DecodeMilliMap(const std::string& text);

// ---- Usage ----

constexpr DurationMs kHourMs = 3'600'000;
constexpr DurationMs kDayMs = 24 * kHourMs;
// The longest attempt a usage record may describe (366 days, ~8800 buckets), and the most GPUs or
// CPUs (a million, in milli-units) it may hold: bounds that keep the int64 sums from overflowing.
constexpr DurationMs kMaxUsageSpanMs = 366LL * 24 * 3'600'000;
constexpr int64_t kMaxUsageMilli = 1'000'000'000;

// The start of the period of length `unit` containing `t` (rounding down before the epoch too),
// and the first period start at or after `t`.
TimeMs FloorTo(TimeMs t, DurationMs unit);
TimeMs CeilTo(TimeMs t, DurationMs unit);
inline TimeMs FloorToHour(TimeMs t) { return FloorTo(t, kHourMs); }

// One bucket of the hourly rollup (or of the daily one: `hour` is then the day's start); the views
// point into the batch being committed.
struct BucketKey {
  TimeMs hour = 0;
  std::string_view user;
  std::string_view team;
  std::string_view gpu_type;
  auto operator<=>(const BucketKey&) const = default;
};

struct BucketSums {
  int64_t gpu_milli_ms = 0;
  int64_t cpu_milli_ms = 0;
  int64_t jobs = 0;
  int64_t wait_ms = 0;
  int64_t waits = 0;
  int64_t preemptions = 0;
  // Measured attempts that ended in the hour (UsageRecord::cpu_used_ms, peak_memory_bytes): what
  // they used and what they were allotted. Memory in MiB x ms (an int64 holds ~290 years of 1 TiB).
  int64_t used_cpu_ms = 0;
  int64_t measured_cpu_milli_ms = 0;
  int64_t peak_memory_mib_ms = 0;
  int64_t asked_memory_mib_ms = 0;
  // Sampled GPUs of the attempts that ended in the hour (UsageRecord::gpu_mean_sm, gpu_idle_ms), in
  // milli-GPU x ms: the time under sampling, that time weighted by SM utilisation (busy), and the
  // time idle.
  int64_t gpu_sampled_milli_ms = 0;
  int64_t gpu_busy_milli_ms = 0;
  int64_t gpu_idle_milli_ms = 0;

  BucketSums& operator+=(const BucketSums& o) {
    gpu_milli_ms += o.gpu_milli_ms;
    cpu_milli_ms += o.cpu_milli_ms;
    jobs += o.jobs;
    wait_ms += o.wait_ms;
    waits += o.waits;
    preemptions += o.preemptions;
    used_cpu_ms += o.used_cpu_ms;
    measured_cpu_milli_ms += o.measured_cpu_milli_ms;
    peak_memory_mib_ms += o.peak_memory_mib_ms;
    asked_memory_mib_ms += o.asked_memory_mib_ms;
    gpu_sampled_milli_ms += o.gpu_sampled_milli_ms;
    gpu_busy_milli_ms += o.gpu_busy_milli_ms;
    gpu_idle_milli_ms += o.gpu_idle_milli_ms;
    return *this;
  }
};

// A negative quantity or wait, more than kMaxUsageMilli GPUs or CPUs, or an attempt longer than
// kMaxUsageSpanMs (an unset placed_at, most likely): kInvalidArgument naming the record.
Status CheckUsage(const UsageRecord& r);

// The hourly and daily buckets a batch's usage records touch, added up: each record's GPU and CPU
// time split exactly over the hours of [placed_at, ended_at), its job, preemption and measured use
// to the hour containing ended_at, its wait to the hour containing placed_at. The keys point into
// `usage`.
struct UsageBuckets {
  std::map<BucketKey, BucketSums> hours;
  std::map<BucketKey, BucketSums> days;
};
UsageBuckets SplitUsage(const std::vector<UsageRecord>& usage);

// The rollup ranges a usage query reads. The window's hours are [first, end): from the one
// containing `since` to the last one that starts before `until`; its whole UTC days come from the
// daily rollup and the hours before and after them from the hourly one. Empty ranges are left out.
struct UsageRange {
  bool daily = false;
  TimeMs from = 0;
  TimeMs to = 0;
};
std::vector<UsageRange> UsageRanges(const UsageQuery& query);

// Adds bucket rows up into `berth usage` rows: per name (user or team), GPU time by type.
class UsageTotals {
 public:
  void Add(std::string_view name, std::string_view gpu_type, const BucketSums& sums);
  // Rows by name, ascending; GPU types whose time adds up to 0 (and "", CPU-only use) left out.
  std::vector<UsageRow> Finish() &&;

 private:
  struct Totals {
    std::string name;
    std::vector<std::pair<std::string, int64_t>> gpu_milli_ms;  // by type; a few types at most
    BucketSums sums;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<Totals> totals_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;  // name -> totals_[i]
  size_t last_ = SIZE_MAX;  // the previous row's name, which the next row often shares
};

// Milli-units x ms -> units x s.
constexpr double kMilliMsPerSecond = 1e6;

}  // namespace berth::store_codec
