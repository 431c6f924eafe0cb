#include "common/resources.h"

#include <algorithm>
#include <cctype>

namespace berth {

namespace {

// The number at `s[at]` and after; `at` is left past it. -1 when there is none.
int NumberAt(const std::string& s, size_t& at) {
  int n = -1;
  while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at]))) {
    n = (n < 0 ? 0 : n * 10) + (s[at] - '0');
    if (n > 1000) return -1;
    ++at;
  }
  return n;
}

}  // namespace

std::optional<SliceShare> SliceShareOf(const std::string& type) {
  // "<GPU>-[<C>c.]<G>g.<M>gb[-<extension>]": the GPU's type has no "-" (agent/discovery.h).
  const size_t dash = type.find('-');
  if (dash == std::string::npos || dash == 0) return std::nullopt;
  size_t at = dash + 1;
  int first = NumberAt(type, at);
  int compute = -1;
  if (first > 0 && type.compare(at, 2, "c.") == 0) {
    compute = first;
    at += 2;
    first = NumberAt(type, at);
  }
  if (first < 1 || first > 7 || type.compare(at, 2, "g.") != 0) return std::nullopt;
  at += 2;
  if (NumberAt(type, at) < 1 || type.compare(at, 2, "gb") != 0) return std::nullopt;
  at += 2;
  if (at != type.size() && type[at] != '-') return std::nullopt;
  const int sevenths = compute > 0 ? std::min(compute, first) : first;
  return SliceShare{type.substr(0, dash), sevenths};
}

double GpuTypeWeight(const std::map<std::string, double>& weights, const std::string& type) {
  if (auto it = weights.find(type); it != weights.end()) return it->second;
  if (std::optional<SliceShare> slice = SliceShareOf(type)) {
    auto gpu = weights.find(slice->gpu_type);
    return (gpu == weights.end() ? 1.0 : gpu->second) * slice->sevenths / 7.0;
  }
  return 1.0;
}

std::string FormatGpus(const std::string& type, MilliGpu milli) {
  if (milli == 0) return "-";
  return type + ":" + FormatMilli(milli);
}

}  // namespace berth

namespace berth {

std::string CudaVisibleDevices(const NodeGrant& grant) {
  std::string out;
  for (const auto& g : grant.gpus) {
    if (!out.empty()) out += ',';
    out += std::to_string(g.index);
  }
  return out;
}

}  // namespace berth
