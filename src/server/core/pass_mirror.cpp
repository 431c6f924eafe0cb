// PassMirror: the pass index's copy that the scheduler thread keeps between passes.
#include "server/core/pass_mirror.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>

namespace berth {
namespace {

// Merges `changes` (sorted by id; a value replaces or adds the entry, nullopt removes it if there)
// into `entries` (sorted by id). `gone(value)` is called for every entry replaced or removed,
// `came(value)` for every one added or replacing. Changes past the last entry (a submission's new
// jobs) are appended in place; the rest costs one walk of `entries`.
template <class T, class Gone, class Came>
void MergeDelta(std::vector<std::pair<int64_t, T>>& entries,
                std::vector<std::pair<int64_t, std::optional<T>>>& changes, Gone gone, Came came) {
  auto change = changes.begin();
  // Replaced in place where the entry is there before and after; appended past the end.
  std::vector<std::pair<int64_t, std::optional<T>>> rest;
  for (; change != changes.end(); ++change) {
    auto at = std::lower_bound(entries.begin(), entries.end(), change->first,
                               [](const auto& e, int64_t id) { return e.first < id; });
    const bool present = at != entries.end() && at->first == change->first;
    if (present && change->second) {
      gone(at->second);
      came(*change->second);
      at->second = std::move(*change->second);
    } else if (present || change->second) {
      rest.push_back(std::move(*change));
    }
  }
  if (rest.empty()) return;
  auto next = rest.begin();
  if (entries.empty() || rest.front().first > entries.back().first) {
    for (; next != rest.end() && next->second; ++next) {
      came(*next->second);
      entries.emplace_back(next->first, std::move(*next->second));
    }
    if (next == rest.end()) return;
  }
  std::vector<std::pair<int64_t, T>> out;
  out.reserve(entries.size() + static_cast<size_t>(std::distance(next, rest.end())));
  auto add_before = [&](int64_t id) {
    for (; next != rest.end() && next->first < id; ++next) {
      came(*next->second);  // only additions come before an entry
      out.emplace_back(next->first, std::move(*next->second));
    }
  };
  for (auto& entry : entries) {
    add_before(entry.first);
    if (next != rest.end() && next->first == entry.first) {
      gone(entry.second);  // removed
      ++next;
      continue;
    }
    out.push_back(std::move(entry));
  }
  add_before(std::numeric_limits<int64_t>::max());
  entries = std::move(out);
}

}  // namespace

void PassMirror::Apply(PassDelta delta) {
  if (delta.full) Clear();
  MergeDelta(
      pending_, delta.pending, [this](const MirroredPending& p) { Count(p.awaits_spec, -1); },
      [this](const MirroredPending& p) { Count(p.awaits_spec, +1); });
  MergeDelta(
      held_, delta.held, [](const MirroredHeld&) {}, [](const MirroredHeld&) {});
}

void PassMirror::Clear() {
  pending_.clear();
  held_.clear();
  awaited_.clear();
}

void PassMirror::Count(const std::optional<int64_t>& spec, int by) {
  if (!spec) return;
  int& n = awaited_[*spec];
  n += by;
  if (n <= 0) awaited_.erase(*spec);
}

std::vector<int64_t> PassMirror::AwaitedSpecs() const {
  std::vector<int64_t> specs;
  specs.reserve(awaited_.size());
  for (const auto& [spec, n] : awaited_) specs.push_back(spec);
  return specs;
}

bool PassEligible(int64_t id, const MirroredPending& job, TimeMs now,
                  const std::set<int64_t>& owed_cancels, const std::set<int64_t>& met_specs) {
  if (job.not_before && *job.not_before > now) return false;
  if (!owed_cancels.empty() && owed_cancels.count(id)) return false;  // the commit is retried
  // A job placed before had its dependencies met, and they never stop holding.
  return !job.awaits_spec || met_specs.count(*job.awaits_spec) > 0;
}

}  // namespace berth
