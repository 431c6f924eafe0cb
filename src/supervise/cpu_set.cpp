#include "supervise/cpu_set.h"

#include <sched.h>

#include <algorithm>
#include <charconv>

#include "common/files.h"
#include "common/strings.h"

namespace berth {

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

std::optional<std::vector<int>> ParseCpuList(const std::string& text) {
  auto number = [](std::string_view s) -> std::optional<int> {
    int n = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < 0) return std::nullopt;
    return n;
  };
  std::set<int> cpus;
  const std::string trimmed = Trim(text);
  if (trimmed.empty()) return std::vector<int>{};
  for (const std::string& part : Split(trimmed, ',')) {
    const size_t dash = part.find('-');
    auto first = number(std::string_view(part).substr(0, dash));
    auto last = dash == std::string::npos ? first : number(std::string_view(part).substr(dash + 1));
    // A range of more than 64k CPUs is not a machine's.
    if (!first || !last || *last < *first || *last - *first > 65535) return std::nullopt;
    for (int c = *first; c <= *last; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::map<int, std::string> ReadCoreIds(const std::string& sys_cpu_dir,
                                       const std::vector<int>& cpus) {
  std::map<int, std::string> core_of;
  for (int cpu : cpus) {
    const std::string dir = sys_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    const std::string package = Trim(ReadFileOr(dir + "physical_package_id"));
    const std::string core = Trim(ReadFileOr(dir + "core_id"));
    core_of[cpu] =
        package.empty() || core.empty() ? "cpu" + std::to_string(cpu) : package + ":" + core;
  }
  return core_of;
}

std::optional<std::vector<int>> PickCpus(const std::vector<int>& cpus, const std::set<int>& taken,
                                         int count, const std::map<int, std::string>& core_of) {
  // Each core's CPUs, and whether all of them are free.
  std::map<std::string, std::vector<int>> cores;
  std::map<std::string, bool> whole;
  for (int cpu : cpus) {
    auto it = core_of.find(cpu);
    const std::string core = it == core_of.end() ? "cpu" + std::to_string(cpu) : it->second;
    const bool free = !taken.count(cpu);
    if (free) cores[core].push_back(cpu);
    auto [w, fresh] = whole.emplace(core, free);
    if (!fresh) w->second = w->second && free;
  }
  std::vector<std::vector<int>> wholes, partials;  // the free CPUs of each core
  for (auto& [core, free] : cores) {
    std::sort(free.begin(), free.end());
    (whole[core] ? wholes : partials).push_back(std::move(free));
  }
  std::sort(wholes.begin(), wholes.end());
  std::sort(partials.begin(), partials.end());
  // Whole cores while a whole one fits; the rest from cores already split (not splitting another),
  // then from whole ones.
  std::vector<int> picked;
  auto left = [&] { return count - static_cast<int>(picked.size()); };
  std::vector<std::vector<int>> rest;
  for (auto& free : wholes) {
    if (static_cast<int>(free.size()) <= left()) {
      picked.insert(picked.end(), free.begin(), free.end());
    } else {
      rest.push_back(std::move(free));
    }
  }
  for (const auto* group : {&partials, &rest}) {
    for (const auto& free : *group) {
      for (int cpu : free) {
        if (left() > 0) picked.push_back(cpu);
      }
    }
  }
  if (static_cast<int>(picked.size()) < count) return std::nullopt;
  std::sort(picked.begin(), picked.end());
  return picked;
}

}  // namespace berth
