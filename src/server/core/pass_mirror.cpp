// PassMirror: the pass index's copy that the scheduler thread keeps between passes.
#include "server/core/pass_mirror.h"

#include <optional>
#include <utility>
#include <vector>

#include "server/core/sorted_entries.h"

namespace berth {
namespace {

// Brings `entries` up to date with `changes` (sorted by id; a value replaces or adds the entry,
// nullopt removes it if there), calling `gone` for every entry replaced or removed and `came` for
// every one added or replacing: replacements in place, the rest merged (sorted_entries.h).
template <class T, class Gone, class Came>
void MergeDelta(std::vector<std::pair<int64_t, T>>& entries,
                std::vector<std::pair<int64_t, std::optional<T>>>& changes, Gone gone, Came came) {
  std::vector<std::pair<int64_t, std::optional<T>>> rest;
  for (auto& change : changes) {
    auto at = FindEntry(entries, change.first);
    const bool present = at != entries.end() && at->first == change.first;
    if (present && change.second) {
      gone(at->second);
      came(*change.second);
      at->second = std::move(*change.second);
    } else if (present || change.second) {
      rest.push_back(std::move(change));
    }
  }
  MergeChanges(entries, rest, gone, came);
}

}  // namespace

void PassMirror::Apply(PassDelta delta) {
  if (delta.full) {
    pending_.clear();
    held_.clear();
    awaited_.clear();
  }
  MergeDelta(
      pending_, delta.pending, [this](const MirroredPending& p) { Count(p.awaits_spec, -1); },
      [this](const MirroredPending& p) { Count(p.awaits_spec, +1); });
  MergeDelta(
      held_, delta.held, [](const MirroredHeld&) {}, [](const MirroredHeld&) {});
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
