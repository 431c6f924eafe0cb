#include "store/row_codec.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace berth::store_codec {

namespace json = boost::json;

std::optional<int64_t> ToOpt(const std::optional<int>& v) {
  if (!v) return std::nullopt;
  return *v;
}

std::optional<int> ToOptInt(const std::optional<int64_t>& v) {
  if (!v) return std::nullopt;
  return static_cast<int>(*v);
}

// ---- JSON columns ----
// Written and read only here. Decoding never throws: a malformed column (a hand-edited file, a bug)
// is an error naming the row, not a crash of the server.

std::string EncodePlacement(const Placement& placement) {
  if (placement.empty()) return "[]";  // every pending job: skip building a JSON value
  json::array nodes;
  nodes.reserve(placement.size());
  for (const NodeGrant& grant : placement) {
    json::array gpus;
    gpus.reserve(grant.gpus.size());
    for (const GpuGrant& gpu : grant.gpus) {
      gpus.push_back(json::object{{"index", gpu.index}, {"milli", gpu.milli}});
    }
    nodes.push_back(
        json::object{{"node", grant.node}, {"rank", grant.rank}, {"gpus", std::move(gpus)}});
  }
  return json::serialize(nodes);
}

std::string EncodeLabels(const std::map<std::string, std::string>& labels) {
  json::object o;
  for (const auto& [key, value] : labels) o[key] = value;
  return json::serialize(o);
}

std::string EncodeGpus(const std::vector<GpuDevice>& gpus) {
  json::array a;
  a.reserve(gpus.size());
  for (const GpuDevice& gpu : gpus) {
    json::object d{{"index", gpu.index}, {"type", gpu.type}};
    if (gpu.slice()) d["parent"] = gpu.parent;
    if (gpu.nvlink != 0) d["nvlink"] = gpu.nvlink;
    if (gpu.pcie != 0) d["pcie"] = gpu.pcie;
    if (gpu.numa >= 0) d["numa"] = gpu.numa;
    a.push_back(std::move(d));
  }
  return json::serialize(a);
}

namespace {

Result<json::value> ParseJson(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return Status::Internal("invalid JSON (" + ec.message() + "): " + text);
  return v;
}

std::optional<int64_t> IntField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (const int64_t* i = v->if_int64()) return *i;
  if (const uint64_t* u = v->if_uint64(); u != nullptr && *u <= INT64_MAX)
    return static_cast<int64_t>(*u);
  return std::nullopt;
}

const json::string* StringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr ? nullptr : v->if_string();
}

}  // namespace

Result<Placement> DecodePlacement(const std::string& text) {
  Result<json::value> v = ParseJson(text);
  if (!v.ok()) return v.status();
  const json::array* nodes = v->if_array();
  if (nodes == nullptr) return Status::Internal("placement is not a JSON array: " + text);
  Placement placement;
  placement.reserve(nodes->size());
  for (const json::value& n : *nodes) {
    const json::object* o = n.if_object();
    const json::string* node = o ? StringField(*o, "node") : nullptr;
    std::optional<int64_t> rank = o ? IntField(*o, "rank") : std::nullopt;
    const json::value* gpus_value = o ? o->if_contains("gpus") : nullptr;
    const json::array* gpus = gpus_value ? gpus_value->if_array() : nullptr;
    if (node == nullptr || !rank || gpus == nullptr) {
      return Status::Internal("placement entry needs node, rank and gpus: " + text);
    }
    NodeGrant grant{.node = std::string(*node), .rank = static_cast<int>(*rank), .gpus = {}};
    for (const json::value& g : *gpus) {
      const json::object* go = g.if_object();
      std::optional<int64_t> index = go ? IntField(*go, "index") : std::nullopt;
      std::optional<int64_t> milli = go ? IntField(*go, "milli") : std::nullopt;
      if (!index || !milli) return Status::Internal("placement GPU needs index and milli: " + text);
      grant.gpus.push_back(GpuGrant{.index = static_cast<int>(*index), .milli = *milli});
    }
    placement.push_back(std::move(grant));
  }
  return placement;
}

Result<std::map<std::string, std::string>> DecodeLabels(const std::string& text) {
  Result<json::value> v = ParseJson(text);
  if (!v.ok()) return v.status();
  const json::object* o = v->if_object();
  if (o == nullptr) return Status::Internal("labels are not a JSON object: " + text);
  std::map<std::string, std::string> labels;
  for (const auto& entry : *o) {
    const json::string* value = entry.value().if_string();
    if (value == nullptr) return Status::Internal("label values must be strings: " + text);
    labels.emplace(std::string(entry.key()), std::string(*value));
  }
  return labels;
}

Result<std::vector<GpuDevice>> DecodeGpus(const std::string& text) {
  Result<json::value> v = ParseJson(text);
  if (!v.ok()) return v.status();
  const json::array* a = v->if_array();
  if (a == nullptr) return Status::Internal("gpus are not a JSON array: " + text);
  std::vector<GpuDevice> gpus;
  gpus.reserve(a->size());
  for (const json::value& g : *a) {
    const json::object* o = g.if_object();
    std::optional<int64_t> index = o ? IntField(*o, "index") : std::nullopt;
    const json::string* type = o ? StringField(*o, "type") : nullptr;
    if (!index || type == nullptr) return Status::Internal("GPU needs index and type: " + text);
    std::optional<int64_t> parent = IntField(*o, "parent");
    gpus.push_back(GpuDevice{.index = static_cast<int>(*index),
                             .type = std::string(*type),
                             .parent = parent ? static_cast<int>(*parent) : -1,
                             .nvlink = static_cast<int>(IntField(*o, "nvlink").value_or(0)),
                             .pcie = static_cast<int>(IntField(*o, "pcie").value_or(0)),
                             .numa = static_cast<int>(IntField(*o, "numa").value_or(-1))});
  }
  return gpus;
}

std::string EncodeMilliMap(const std::map<std::string, MilliGpu>& m) {
  json::object o;
  for (const auto& [type, milli] : m) o[type] = milli;
  return json::serialize(o);
}

Result<std::map<std::string, MilliGpu>> DecodeMilliMap(const std::string& text) {
  Result<json::value> v = ParseJson(text);
  if (!v.ok()) return v.status();
  const json::object* o = v->if_object();
  if (o == nullptr) return Status::Internal("GPU amounts are not a JSON object: " + text);
  std::map<std::string, MilliGpu> m;
  for (const auto& entry : *o) {
    std::optional<int64_t> milli = IntField(*o, entry.key());
    if (!milli) return Status::Internal("GPU amounts must be integers (milli-GPUs): " + text);
    m.emplace(std::string(entry.key()), *milli);
  }
  return m;
}

// The start of the period of length `unit` containing `t` (rounding down before the epoch too),
// and the first period start at or after `t`.
TimeMs FloorTo(TimeMs t, DurationMs unit) { return t - ((t % unit) + unit) % unit; }
TimeMs CeilTo(TimeMs t, DurationMs unit) {
  const TimeMs floor = FloorTo(t, unit);
  return floor == t ? t : floor + unit;
}

Status CheckUsage(const UsageRecord& r) {
  const std::string who = "usage record of user \"" + r.user + "\"";
  auto in_range = [](int64_t milli) { return milli >= 0 && milli <= kMaxUsageMilli; };
  if (r.cpu_used_ms.value_or(0) < 0 || r.peak_memory_bytes.value_or(0) < 0 || r.memory_mib < 0) {
    return Status::Invalid(who + ": CPU time, peak memory and memory asked must not be negative");
  }
  if (!in_range(r.gpu_milli) || !in_range(r.cpu_milli) || r.wait_ms < 0) {
    return Status::Invalid(who + ": GPUs and CPUs must be 0 to " + std::to_string(kMaxUsageMilli) +
                           " milli-units and the wait not negative (gpu_milli " +
                           std::to_string(r.gpu_milli) + ", cpu_milli " +
                           std::to_string(r.cpu_milli) + ", wait_ms " + std::to_string(r.wait_ms) +
                           ")");
  }
  // Unsigned: the difference of any two times, without overflow.
  if (r.ended_at > r.placed_at &&
      static_cast<uint64_t>(r.ended_at) - static_cast<uint64_t>(r.placed_at) >
          static_cast<uint64_t>(kMaxUsageSpanMs)) {
    return Status::Invalid(who + ": attempt from " + std::to_string(r.placed_at) + " to " +
                           std::to_string(r.ended_at) + " ms spans more than " +
                           std::to_string(kMaxUsageSpanMs / (24 * kHourMs)) +
                           " days; is placed_at set?");
  }
  return Status::Ok();
}

namespace {

// Adds `r` to the buckets it touches: its GPU and CPU time split exactly over the hours of
// [placed_at, ended_at), its job, preemption and measured use to the hour containing ended_at, its
// wait to the hour containing placed_at.
void SplitIntoBuckets(const UsageRecord& r, std::map<BucketKey, BucketSums>& buckets) {
  auto bucket = [&](TimeMs hour) -> BucketSums& {
    return buckets[BucketKey{.hour = hour, .user = r.user, .team = r.team, .gpu_type = r.gpu_type}];
  };
  if (r.ended_at > r.placed_at) {
    for (TimeMs hour = FloorToHour(r.placed_at); hour < r.ended_at; hour += kHourMs) {
      const DurationMs ms = std::min(r.ended_at, hour + kHourMs) - std::max(r.placed_at, hour);
      BucketSums& b = bucket(hour);
      b.gpu_milli_ms += r.gpu_milli * ms;
      b.cpu_milli_ms += r.cpu_milli * ms;
    }
  }
  BucketSums& placed = bucket(FloorToHour(r.placed_at));
  placed.wait_ms += r.wait_ms;
  placed.waits += 1;
  if (r.job_ended || r.preempted) {
    BucketSums& ended = bucket(FloorToHour(r.ended_at));
    ended.jobs += r.job_ended ? 1 : 0;
    ended.preemptions += r.preempted ? 1 : 0;
  }
  // Measured use goes with its allotment into one bucket, so that any window holds both or
  // neither. A product beyond int64 (no real attempt's) is left out rather than wrapped.
  const DurationMs span = std::max<DurationMs>(0, r.ended_at - r.placed_at);
  int64_t allotted = 0, peak = 0, asked = 0;
  constexpr int64_t kMib = 1024 * 1024;
  if (span > 0 && r.cpu_used_ms && r.cpu_milli > 0 &&
      !__builtin_mul_overflow(r.cpu_milli, span, &allotted)) {
    BucketSums& ended = bucket(FloorToHour(r.ended_at));
    ended.used_cpu_ms += *r.cpu_used_ms;
    ended.measured_cpu_milli_ms += allotted;
  }
  if (span > 0 && r.peak_memory_bytes && r.memory_mib > 0 &&
      !__builtin_mul_overflow(*r.peak_memory_bytes / kMib, span, &peak) &&
      !__builtin_mul_overflow(r.memory_mib, span, &asked)) {
    BucketSums& ended = bucket(FloorToHour(r.ended_at));
    ended.peak_memory_mib_ms += peak;
    ended.asked_memory_mib_ms += asked;
  }
  // Sampled GPUs likewise: their time, weighted by the attempt's mean SM utilisation, and idle.
  int64_t sampled = 0;
  if (span > 0 && r.gpu_mean_sm && r.gpu_milli > 0 &&
      !__builtin_mul_overflow(r.gpu_milli, span, &sampled)) {
    BucketSums& ended = bucket(FloorToHour(r.ended_at));
    const double sm = std::clamp(*r.gpu_mean_sm, 0.0, 100.0);
    ended.gpu_sampled_milli_ms += sampled;
    ended.gpu_busy_milli_ms += static_cast<int64_t>(static_cast<double>(sampled) * sm / 100.0);
    ended.gpu_idle_milli_ms += r.gpu_milli * std::clamp<DurationMs>(r.gpu_idle_ms, 0, span);
  }
}

}  // namespace

UsageBuckets SplitUsage(const std::vector<UsageRecord>& usage) {
  // Added up in memory first (a pass ending many attempts of one user in one hour writes that
  // bucket once); the maps keep key order, which is also the tables' order.
  UsageBuckets out;
  for (const UsageRecord& record : usage) SplitIntoBuckets(record, out.hours);
  for (const auto& [key, sums] : out.hours) {
    BucketKey day = key;
    day.hour = FloorTo(key.hour, kDayMs);
    out.days[day] += sums;
  }
  return out;
}

std::vector<UsageRange> UsageRanges(const UsageQuery& query) {
  const TimeMs first = FloorToHour(query.since);
  const TimeMs end = std::max(first, CeilTo(query.until, kHourMs));
  const TimeMs day0 = CeilTo(first, kDayMs), day1 = FloorTo(end, kDayMs);
  std::vector<UsageRange> ranges;
  if (day0 < day1) {
    ranges = {{false, first, day0}, {true, day0, day1}, {false, day1, end}};
  } else {
    ranges = {{false, first, end}};
  }
  std::erase_if(ranges, [](const UsageRange& r) { return r.from >= r.to; });
  return ranges;
}

void UsageTotals::Add(std::string_view name, std::string_view gpu_type, const BucketSums& sums) {
  if (last_ == SIZE_MAX || totals_[last_].name != name) {
    auto it = index_.find(name);
    if (it == index_.end()) {
      it = index_.emplace(std::string(name), totals_.size()).first;
      totals_.push_back(Totals{.name = std::string(name), .gpu_milli_ms = {}, .sums = {}});
    }
    last_ = it->second;
  }
  Totals& t = totals_[last_];
  if (sums.gpu_milli_ms != 0) {
    auto slot = std::find_if(t.gpu_milli_ms.begin(), t.gpu_milli_ms.end(),
                             [&](const auto& entry) { return entry.first == gpu_type; });
    if (slot == t.gpu_milli_ms.end()) {
      t.gpu_milli_ms.emplace_back(std::string(gpu_type), sums.gpu_milli_ms);
    } else {
      slot->second += sums.gpu_milli_ms;
    }
  }
  BucketSums rest = sums;
  rest.gpu_milli_ms = 0;
  t.sums += rest;
}

std::vector<UsageRow> UsageTotals::Finish() && {
  std::sort(totals_.begin(), totals_.end(),
            [](const Totals& a, const Totals& b) { return a.name < b.name; });
  std::vector<UsageRow> rows;
  rows.reserve(totals_.size());
  // A name's totals are kept as integers and converted once, here: exact up to that rounding.
  for (Totals& t : totals_) {
    UsageRow row{
        .name = std::move(t.name),
        .cpu_seconds = static_cast<double>(t.sums.cpu_milli_ms) / kMilliMsPerSecond,
        .jobs = t.sums.jobs,
        .wait_seconds = static_cast<double>(t.sums.wait_ms) / 1000.0,
        .waits = t.sums.waits,
        .preemptions = t.sums.preemptions,
        .used_cpu_seconds = static_cast<double>(t.sums.used_cpu_ms) / 1000.0,
        .measured_cpu_seconds =
            static_cast<double>(t.sums.measured_cpu_milli_ms) / kMilliMsPerSecond,
        .peak_memory_mib_seconds = static_cast<double>(t.sums.peak_memory_mib_ms) / 1000.0,
        .asked_memory_mib_seconds = static_cast<double>(t.sums.asked_memory_mib_ms) / 1000.0,
        .gpu_sampled_seconds = static_cast<double>(t.sums.gpu_sampled_milli_ms) / kMilliMsPerSecond,
        .gpu_busy_seconds = static_cast<double>(t.sums.gpu_busy_milli_ms) / kMilliMsPerSecond,
        .idle_gpu_seconds = static_cast<double>(t.sums.gpu_idle_milli_ms) / kMilliMsPerSecond};
    for (auto& [type, gpu] : t.gpu_milli_ms) {
      // "" is CPU-only use (a GPU amount there is a caller's slip); a type whose buckets add up to
      // 0 is left out like one never used.
      if (!type.empty() && gpu != 0) {
        row.gpu_seconds.emplace(std::move(type), static_cast<double>(gpu) / kMilliMsPerSecond);
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace berth::store_codec
