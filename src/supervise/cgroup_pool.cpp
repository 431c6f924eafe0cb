#include "supervise/cgroup_pool.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace berth {

namespace {

// "berth-1a2b/12-1-0" -> "berth-1a2b", "12-1-0".
std::pair<std::string, std::string> SplitLeaf(const std::string& name) {
  const size_t slash = name.rfind('/');
  if (slash == std::string::npos) return {"", name};
  return {name.substr(0, slash), name.substr(slash + 1)};
}

// A v1 rank cgroup's memory directory (its first), split into parent directory and name.
std::pair<std::string_view, std::string_view> PlaceOf(const RankCgroup& cgroup) {
  if (cgroup.dirs().empty()) return {};
  const std::string_view dir = cgroup.dirs().front();
  const size_t slash = dir.rfind('/');
  return {dir.substr(0, slash), dir.substr(slash + 1)};
}

}  // namespace

RankCgroupPool::RankCgroupPool(CgroupHost host, size_t capacity)
    : host_(std::move(host)), capacity_(host_.layout == CgroupLayout::kV1 ? capacity : 0) {}

Result<RankCgroup> RankCgroupPool::Take(const std::string& name, const RankLimits& limits) {
  // (Not a structured binding: Debian 12's clang cannot capture one in a lambda.)
  const std::pair<std::string, std::string> split = SplitLeaf(name);
  const std::string& parent = split.first;
  const std::string& leaf = split.second;
  auto memory = host_.v1_dirs.find("memory");
  const std::string parent_dir =
      memory == host_.v1_dirs.end() ? "" : memory->second + (parent.empty() ? "" : "/" + parent);
  // An idle cgroup already named `name` (its rank started again) is that one, whatever it fits:
  // no other rank may be given it.
  auto same = std::find_if(idle_.begin(), idle_.end(), [&](const RankCgroup& idle) {
    return PlaceOf(idle) == std::pair<std::string_view, std::string_view>(parent_dir, leaf);
  });
  auto fits = same;
  for (auto it = idle_.rbegin(); fits == idle_.end() && it != idle_.rend(); ++it) {
    if (RankCgroup::FitsSameHierarchies(it->limits(), limits) && PlaceOf(*it).first == parent_dir) {
      fits = std::next(it).base();
    }
  }
  if (fits != idle_.end()) {
    const bool renamed = fits != same;
    RankCgroup cgroup = std::move(*fits);
    idle_.erase(fits);
    const bool reusable = renamed ? cgroup.Rename(leaf).ok()
                                  : RankCgroup::FitsSameHierarchies(cgroup.limits(), limits);
    if (reusable && cgroup.Rewrite(limits).ok()) {
      ++reused_;
      return cgroup;
    }
    (void)cgroup.Remove();  // not reusable after all: a new one instead
  }
  return RankCgroup::Create(host_, name, limits);
}

std::optional<RankCgroup> RankCgroupPool::Keep(RankCgroup cgroup, bool seen_empty) {
  if (idle_.size() >= capacity_ || !cgroup.Recycle(kMaxChargedToReuse, seen_empty).ok()) {
    return cgroup;
  }
  idle_.push_back(std::move(cgroup));
  return std::nullopt;
}

}  // namespace berth
