#include "server/core/usage_ledger.h"

#include <cmath>

#include "common/resources.h"

namespace berth {
namespace {

// 2^(-d/H) for d >= 0 (a time in the future counts as now).
double Decay(double d, double half_life) { return std::exp2(-std::max(0.0, d) / half_life); }

}  // namespace

Status CheckUsageConfig(const UsageConfig& config) {
  if (config.half_life_ms <= 0) {
    return Status::Invalid(
        "the fair-share half-life must be positive (a half-life of 0 would forget all usage at "
        "once, so fair share would do nothing)");
  }
  for (const auto& [type, weight] : config.gpu_weights) {
    if (!std::isfinite(weight) || weight < 0) {
      return Status::Invalid("GPU weight of " + type + " must be a number >= 0");
    }
  }
  if (!std::isfinite(config.idle_charge) || config.idle_charge < 0) {
    return Status::Invalid("the idle charge must be a number >= 0");
  }
  return Status::Ok();
}

double UsageLedger::Weight(const std::string& gpu_type) const {
  return GpuTypeWeight(config_.gpu_weights, gpu_type);  // a MIG slice: its share of its GPU's
}

double UsageLedger::Decayed(const std::string& type, MilliGpu gpu_milli, TimeMs from, TimeMs to,
                            TimeMs now) const {
  if (gpu_milli <= 0 || to <= from) return 0;
  const double h = static_cast<double>(config_.half_life_ms);
  const double rate = static_cast<double>(gpu_milli) / kMilliPerGpu * Weight(type);
  // The integral of rate * 2^(-(now-s)/H) ds over [from, to], in seconds.
  const double integral =
      rate * h / std::log(2.0) *
      (Decay(static_cast<double>(now - to), h) - Decay(static_cast<double>(now - from), h));
  return integral / 1000;
}

void UsageLedger::AddAt(std::pair<double, TimeMs>& entry, double amount, TimeMs at,
                        double half_life) {
  if (at >= entry.second) {
    entry.first = ValueAt(entry, at, half_life) + amount;
    entry.second = at;
  } else {
    entry.first += amount * Decay(static_cast<double>(entry.second - at), half_life);
  }
}

double UsageLedger::ValueAt(const std::pair<double, TimeMs>& entry, TimeMs now, double half_life) {
  return entry.first * Decay(static_cast<double>(now - entry.second), half_life);
}

void UsageLedger::Add(const UsageRecord& record) {
  if (record.gpu_milli <= 0 || record.ended_at <= record.placed_at) return;
  double amount = Decayed(record.gpu_type, record.gpu_milli, record.placed_at, record.ended_at,
                          record.ended_at);
  if (config_.idle_charge > 0 && record.gpu_mean_sm && record.gpu_idle_ms > 0) {
    const DurationMs idle = std::min(record.gpu_idle_ms, record.ended_at - record.placed_at);
    amount += config_.idle_charge * Weight(record.gpu_type) *
              static_cast<double>(record.gpu_milli) / kMilliPerGpu * static_cast<double>(idle) /
              1000.0;
  }
  const double h = static_cast<double>(config_.half_life_ms);
  AddAt(users_[record.user], amount, record.ended_at, h);
  AddAt(teams_[record.team], amount, record.ended_at, h);
}

void UsageLedger::AddBucket(const UsageBucket& bucket) {
  // (An hour may hold only idle time: an attempt that ended on the hour's boundary.)
  if (bucket.gpu_seconds <= 0 && (config_.idle_charge <= 0 || bucket.idle_gpu_seconds <= 0)) return;
  const double amount = (bucket.gpu_seconds + config_.idle_charge * bucket.idle_gpu_seconds) *
                        Weight(bucket.gpu_type);
  const TimeMs middle = bucket.hour + 30 * 60 * 1000;
  const double h = static_cast<double>(config_.half_life_ms);
  AddAt(users_[bucket.user], amount, middle, h);
  AddAt(teams_[bucket.team], amount, middle, h);
}

double UsageLedger::User(const std::string& user, TimeMs now) const {
  auto it = users_.find(user);
  return it == users_.end() ? 0
                            : ValueAt(it->second, now, static_cast<double>(config_.half_life_ms));
}

double UsageLedger::Team(const std::string& team, TimeMs now) const {
  auto it = teams_.find(team);
  return it == teams_.end() ? 0
                            : ValueAt(it->second, now, static_cast<double>(config_.half_life_ms));
}

}  // namespace berth
