// Inline comparison and hashing of short strings (user names, GPU types, pools, label values), for
// the loops of a pass that touch every pending or running job: no calls to memcmp, FNV-1a hashing.
// Internal to sched/. Pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace berth::sched::internal {

inline constexpr uint64_t kFnvBasis = 1469598103934665603ULL;

inline bool SameText(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] != b[k]) return false;
  }
  return true;
}

// Adds a field to hash `h`; the field's end is hashed too, so ("ab", "c") differs from ("a", "bc").
inline uint64_t HashText(uint64_t h, std::string_view s) {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return (h ^ 0xff) * 1099511628211ULL;
}

// A name's hash for open-addressing tables (user names, node names): FNV-1a, its high bits folded
// in.
inline uint64_t HashName(std::string_view s) {
  const uint64_t h = HashText(kFnvBasis, s);
  return h ^ (h >> 29);
}

}  // namespace berth::sched::internal
