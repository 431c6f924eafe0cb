#include "agent/gpu_sampler.h"

#include <algorithm>

#include "common/strings.h"

namespace berth {
namespace {

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), ::isdigit);
}

// A number, or none for what nvidia-smi prints when it has none ("[N/A]", "[Not Supported]").
Result<std::optional<int64_t>> Number(const std::string& field, size_t line, const char* what) {
  if (!field.empty() && field.front() == '[') return std::optional<int64_t>();
  if (!AllDigits(field)) {
    return Status::Invalid("line " + std::to_string(line) + ": " + what + " '" + field +
                           "' is not a number");
  }
  return std::optional<int64_t>(std::stoll(field));
}

// The non-empty lines of `csv`, each split at commas and trimmed, with their line numbers.
std::vector<std::pair<size_t, std::vector<std::string>>> Rows(const std::string& csv) {
  std::vector<std::pair<size_t, std::vector<std::string>>> rows;
  size_t number = 0;
  for (const std::string& line : Split(csv, '\n')) {
    ++number;
    if (Trim(line).empty()) continue;
    std::vector<std::string> fields;
    for (const std::string& f : Split(line, ',')) fields.push_back(Trim(f));
    rows.emplace_back(number, std::move(fields));
  }
  return rows;
}

}  // namespace

Result<std::vector<GpuReading>> ParseGpuQuery(const std::string& csv) {
  std::vector<GpuReading> out;
  for (const auto& [line, f] : Rows(csv)) {
    if (f.size() != 4) {
      return Status::Invalid("line " + std::to_string(line) + ": expected 4 fields (index, uuid, " +
                             "utilization.gpu, memory.used), got " + std::to_string(f.size()));
    }
    if (!AllDigits(f[0])) {
      return Status::Invalid("line " + std::to_string(line) + ": GPU index '" + f[0] +
                             "' is not a number");
    }
    GpuReading r;
    r.index = std::stoi(f[0]);
    r.uuid = f[1];
    Result<std::optional<int64_t>> sm = Number(f[2], line, "utilization.gpu");
    if (!sm.ok()) return sm.status();
    if (*sm) r.sm_percent = static_cast<int>(std::min<int64_t>(**sm, 100));
    Result<std::optional<int64_t>> memory = Number(f[3], line, "memory.used");
    if (!memory.ok()) return memory.status();
    r.memory_mib = *memory;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(),
            [](const GpuReading& a, const GpuReading& b) { return a.index < b.index; });
  return out;
}

Status AddComputeApps(const std::string& csv, std::vector<GpuReading>& readings) {
  for (const auto& [line, f] : Rows(csv)) {
    if (f.size() != 3) {
      return Status::Invalid("line " + std::to_string(line) +
                             ": expected 3 fields (gpu_uuid, pid, used_memory), got " +
                             std::to_string(f.size()));
    }
    if (!AllDigits(f[1])) {
      return Status::Invalid("line " + std::to_string(line) + ": pid '" + f[1] +
                             "' is not a number");
    }
    for (GpuReading& r : readings) {
      if (r.uuid != f[0]) continue;
      r.pids.push_back(static_cast<pid_t>(std::stoll(f[1])));
      std::sort(r.pids.begin(), r.pids.end());
    }
  }
  return Status::Ok();
}

const std::vector<std::string>& NvidiaSmiSampler::GpuQuery() {
  static const std::vector<std::string> argv = {
      "nvidia-smi", "--query-gpu=index,uuid,utilization.gpu,memory.used",
      "--format=csv,noheader,nounits"};
  return argv;
}

const std::vector<std::string>& NvidiaSmiSampler::AppsQuery() {
  static const std::vector<std::string> argv = {"nvidia-smi",
                                                "--query-compute-apps=gpu_uuid,pid,used_memory",
                                                "--format=csv,noheader,nounits"};
  return argv;
}

Result<GpuSample> NvidiaSmiSampler::Sample() {
  GpuSample sample;
  sample.at = clock_.Now();
  auto ask = [&](const std::vector<std::string>& argv) -> Result<std::string> {
    CommandOutcome o = runner_.Run({.argv = argv, .env = {}, .timeout = timeout_});
    if (!o.ok()) return Status::Unavailable("nvidia-smi " + argv[1] + ": " + o.Failure());
    return o.output;
  };
  Result<std::string> gpus = ask(GpuQuery());
  if (!gpus.ok()) return gpus.status();
  Result<std::vector<GpuReading>> readings = ParseGpuQuery(*gpus);
  if (!readings.ok()) {
    return Status::Unavailable("nvidia-smi --query-gpu: " + readings.status().message());
  }
  sample.gpus = std::move(*readings);
  Result<std::string> apps = ask(AppsQuery());
  if (!apps.ok()) return apps.status();
  if (Status s = AddComputeApps(*apps, sample.gpus); !s.ok()) {
    return Status::Unavailable("nvidia-smi --query-compute-apps: " + s.message());
  }
  return sample;
}

}  // namespace berth
