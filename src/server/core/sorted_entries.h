// Vectors of (id, entry) sorted by id, as the pass index (core_state.h) and the pass's mirror of it
// (pass_mirror.h) keep them: a lookup, and a merge of a batch of changes in one walk.
//
// Thread-safety: functions on the caller's vectors; no state of their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace berth {

// The first entry whose id is not less than `id`.
template <class T>
auto FindEntry(std::vector<std::pair<int64_t, T>>& entries, int64_t id) {
  return std::lower_bound(entries.begin(), entries.end(), id,
                          [](const auto& entry, int64_t key) { return entry.first < key; });
}

namespace sorted_entries_internal {
inline constexpr auto kNothing = [](const auto&) {};
}  // namespace sorted_entries_internal

// Merges `changes` (sorted by id; a value is an entry to add, nullopt one to remove; none of them
// replaces an entry) into `entries`, calling `came` for each entry added and `gone` for each one
// removed. Entries added past the last one (a submission's new jobs) are appended in place; the
// rest costs one walk of `entries`.
template <class T, class Gone = decltype(sorted_entries_internal::kNothing),
          class Came = decltype(sorted_entries_internal::kNothing)>
void MergeChanges(std::vector<std::pair<int64_t, T>>& entries,
                  std::vector<std::pair<int64_t, std::optional<T>>>& changes,
                  Gone gone = sorted_entries_internal::kNothing,
                  Came came = sorted_entries_internal::kNothing) {
  if (changes.empty()) return;
  auto change = changes.begin();
  if (entries.empty() || changes.front().first > entries.back().first) {
    for (; change != changes.end() && change->second; ++change) {
      came(*change->second);
      entries.emplace_back(change->first, std::move(*change->second));
    }
    if (change == changes.end()) return;
  }
  std::vector<std::pair<int64_t, T>> out;
  out.reserve(entries.size() + changes.size());
  auto add_before = [&](int64_t id) {
    for (; change != changes.end() && change->first < id; ++change) {
      came(*change->second);  // only additions come before an entry
      out.emplace_back(change->first, std::move(*change->second));
    }
  };
  for (auto& entry : entries) {
    add_before(entry.first);
    if (change != changes.end() && change->first == entry.first) {
      gone(entry.second);  // removed
      ++change;
      continue;
    }
    out.push_back(std::move(entry));
  }
  add_before(std::numeric_limits<int64_t>::max());
  entries = std::move(out);
}

}  // namespace berth
