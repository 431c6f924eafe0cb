#include "sched/reslice.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

namespace berth::sched {

namespace {

constexpr int kMemorySlices = 8;
constexpr int kComputeSlices = 7;

// "3g.40gb" -> {3, 40}; "1g.10gb+me" -> {1, 10}; {0, 0} for anything else (a compute-instance
// profile "1c.3g.40gb" included: re-slicing makes whole GPU instances).
std::pair<int, int> ComputeAndMemory(const std::string& profile) {
  int g = 0, gb = 0;
  size_t at = 0;
  while (at < profile.size() && std::isdigit(static_cast<unsigned char>(profile[at]))) {
    g = g * 10 + (profile[at++] - '0');
  }
  if (g == 0 || profile.compare(at, 2, "g.") != 0) return {0, 0};
  at += 2;
  while (at < profile.size() && std::isdigit(static_cast<unsigned char>(profile[at]))) {
    gb = gb * 10 + (profile[at++] - '0');
  }
  if (gb == 0 || profile.compare(at, 2, "gb") != 0) return {0, 0};
  at += 2;
  if (at != profile.size() && profile[at] != '+') return {0, 0};
  return {g, gb};
}

// The starts a GPU instance of `size` memory slices and `compute` compute slices may take.
std::vector<int> StartsOf(int compute, int size) {
  if (size == 8) return {0};
  if (size == 4) return compute == 4 ? std::vector<int>{0} : std::vector<int>{0, 4};
  if (size == 2) return compute == 1 ? std::vector<int>{0, 2, 4, 6} : std::vector<int>{0, 2, 4};
  return {0, 1, 2, 3, 4, 5, 6};
}

int ComputeOf(const std::string& profile) { return ComputeAndMemory(profile).first; }

// Larger GPU instances first: they have the fewest starts.
bool Larger(const std::string& a, const std::string& b, double slice_gb) {
  return std::tuple(MemorySlicesOf(a, slice_gb), ComputeOf(a), a) >
         std::tuple(MemorySlicesOf(b, slice_gb), ComputeOf(b), b);
}

struct Packing {
  std::array<bool, kMemorySlices> used{};
  int compute = 0;
  std::vector<std::pair<int, std::string>> placed;  // start, profile

  bool Place(const std::string& profile, double slice_gb) {
    const int size = MemorySlicesOf(profile, slice_gb);
    const int compute_slices = ComputeOf(profile);
    if (size == 0 || compute + compute_slices > kComputeSlices) return false;
    for (int start : StartsOf(compute_slices, size)) {
      if (start + size > kMemorySlices) continue;
      bool free = true;
      for (int k = start; k < start + size; ++k) free = free && !used[static_cast<size_t>(k)];
      if (!free) continue;
      for (int k = start; k < start + size; ++k) used[static_cast<size_t>(k)] = true;
      compute += compute_slices;
      placed.emplace_back(start, profile);
      return true;
    }
    return false;
  }
  std::vector<std::string> Layout() const {
    std::vector<std::pair<int, std::string>> sorted = placed;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> out;
    for (const auto& [start, profile] : sorted) out.push_back(profile);
    return out;
  }
};

// The smallest GPU instance of a GPU whose memory slice is `slice_gb`: "1g.10gb".
std::string SmallestProfile(double slice_gb) {
  return "1g." + std::to_string(static_cast<int>(std::lround(slice_gb))) + "gb";
}

struct Candidate {
  const ResliceGpu* gpu = nullptr;
  std::vector<std::string> layout;
  std::map<std::string, int> serves;  // profile -> unmet slices it adds
  int served_compute = 0;
};

// The layout `gpu` would get for `unmet` (profile -> slices still needed, of its GPU type).
Candidate Build(const ResliceGpu& gpu, const std::map<std::string, int>& unmet) {
  Candidate c{.gpu = &gpu};
  const double slice_gb = MemorySliceGb(gpu.layout);
  if (slice_gb <= 0) return c;
  std::vector<std::string> wanted;
  for (const auto& [profile, n] : unmet) {
    if (MemorySlicesOf(profile, slice_gb) == 0) continue;
    for (int i = 0; i < n && i < kComputeSlices; ++i) wanted.push_back(profile);
  }
  std::sort(wanted.begin(), wanted.end(),
            [&](const auto& a, const auto& b) { return Larger(a, b, slice_gb); });
  Packing p;
  for (const std::string& profile : wanted) {
    if (!p.Place(profile, slice_gb)) continue;
    ++c.serves[profile];
    c.served_compute += ComputeOf(profile);
  }
  if (c.serves.empty()) return c;
  // Then what it had, as far as it still fits; then its smallest slices.
  std::vector<std::string> old = gpu.layout;
  std::sort(old.begin(), old.end(),
            [&](const auto& a, const auto& b) { return Larger(a, b, slice_gb); });
  for (const std::string& profile : old) p.Place(profile, slice_gb);
  while (p.Place(SmallestProfile(slice_gb), slice_gb)) {
  }
  c.layout = p.Layout();
  return c;
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

int MemorySlicesOf(const std::string& profile, double slice_gb) {
  const auto [g, gb] = ComputeAndMemory(profile);
  if (g == 0 || slice_gb <= 0) return 0;
  const double eighths = gb / slice_gb;
  // Profile names round the memory (7g.141gb on a 141 GB H200 whose slice is 17.6 GB).
  const int size = static_cast<int>(std::lround(eighths));
  if (std::fabs(eighths - size) > 0.2) return 0;
  const bool fits = (g == 1 && (size == 1 || size == 2)) || (g == 2 && size == 2) ||
                    ((g == 3 || g == 4) && size == 4) || (g == 7 && size == 8);
  return fits ? size : 0;
}

double MemorySliceGb(const std::vector<std::string>& layout) {
  double best = 0;
  for (const std::string& profile : layout) {
    const auto [g, gb] = ComputeAndMemory(profile);
    const int size = g == 7 ? 8 : g >= 3 ? 4 : g == 2 ? 2 : g == 1 ? 1 : 0;
    if (size == 0) continue;
    const double slice = static_cast<double>(gb) / size;
    // A 1g with twice the memory would read as twice the slice: the smallest reading wins.
    if (best == 0 || slice < best) best = slice;
  }
  return best;
}

std::vector<std::pair<std::string, int>> PossibleProfiles(double slice_gb) {
  if (slice_gb <= 0) return {};
  const auto name = [&](int g, int eighths) {
    return std::to_string(g) + "g." + std::to_string(std::lround(slice_gb * eighths)) + "gb";
  };
  return {{name(1, 1), 7}, {name(1, 2), 4}, {name(2, 2), 3},
          {name(3, 4), 2}, {name(4, 4), 1}, {name(7, 8), 1}};
}

std::vector<int> PlaceProfiles(const std::vector<std::string>& profiles, double slice_gb) {
  Packing p;
  std::vector<int> starts;
  for (const std::string& profile : profiles) {
    const size_t before = p.placed.size();
    starts.push_back(p.Place(profile, slice_gb) ? p.placed[before].first : -1);
  }
  return starts;
}

std::optional<ResliceDecision> PlanReslice(const std::vector<ResliceGpu>& gpus,
                                           const std::vector<ResliceDemand>& demand, TimeMs now,
                                           DurationMs hold_ms) {
  // What is still unmet once the changes under way have delivered their slices.
  std::map<std::pair<std::string, std::string>, int> unmet;  // (GPU type, profile) -> slices
  for (const ResliceDemand& d : demand) {
    if (d.count > 0) unmet[{d.gpu_type, d.profile}] += d.count;
  }
  for (const ResliceGpu& gpu : gpus) {
    if (!gpu.changing) continue;
    for (const std::string& profile : gpu.layout) {
      auto it = unmet.find({gpu.gpu_type, profile});
      if (it != unmet.end() && it->second > 0) --it->second;
    }
  }
  std::optional<Candidate> best;
  for (const ResliceGpu& gpu : gpus) {
    if (!gpu.allowed || gpu.busy || gpu.changing) continue;
    if (gpu.changed_at > 0 && now - gpu.changed_at < hold_ms) continue;  // no flapping
    std::map<std::string, int> mine;
    for (const auto& [key, n] : unmet) {
      if (n > 0 && key.first == gpu.gpu_type) mine[key.second] = n;
    }
    if (mine.empty()) continue;
    Candidate c = Build(gpu, mine);
    if (c.serves.empty() || Sorted(c.layout) == Sorted(gpu.layout)) continue;
    // The most demand served (in compute slices); then the GPU unchanged the longest; then by
    // name, for a decision that does not depend on the order the GPUs came in.
    const auto key = [](const Candidate& x) {
      return std::tuple(-x.served_compute, x.gpu->changed_at, x.gpu->node, x.gpu->gpu);
    };
    if (!best || key(c) < key(*best)) best = std::move(c);
  }
  if (!best) return std::nullopt;
  std::string reason = "for ";
  for (const auto& [profile, n] : best->serves) {
    if (reason.size() > 4) reason += ", ";
    reason += std::to_string(n) + " pending " + best->gpu->gpu_type + "-" + profile + " slice" +
              (n == 1 ? "" : "s");
  }
  return ResliceDecision{.node = best->gpu->node,
                         .gpu = best->gpu->gpu,
                         .from = best->gpu->layout,
                         .to = best->layout,
                         .reason = reason};
}

}  // namespace berth::sched
