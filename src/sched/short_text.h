// Inline comparison and hashing of short strings (user names, GPU types, pools, label values), for
// the loops of a pass that touch every pending or running job: no calls to memcmp, hashing a word
// at a time.
// Internal to sched/. Pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace berth::sched::internal {

inline constexpr uint64_t kFnvBasis = 1469598103934665603ULL;

inline bool SameText(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  size_t k = 0;
  for (; k + 8 <= a.size(); k += 8) {  // a word at a time (GPU types like "H100-1g.10gb")
    uint64_t x, y;
    std::memcpy(&x, a.data() + k, 8);
    std::memcpy(&y, b.data() + k, 8);
    if (x != y) return false;
  }
  for (; k < a.size(); ++k) {
    if (a[k] != b[k]) return false;
  }
  return true;
}

// Adds a field to hash `h`, a word of 8 characters at a time (a MIG type like "H100-1g.10gb" costs
// two multiplications, not twelve); the field's length is hashed too, so ("ab", "c") differs from
// ("a", "bc").
inline uint64_t HashText(uint64_t h, std::string_view s) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  size_t k = 0;
  for (; k + 8 <= s.size(); k += 8) {
    uint64_t word;
    std::memcpy(&word, s.data() + k, 8);
    h = (h ^ word) * kMul;
    h ^= h >> 29;
  }
  // The last characters in the low bytes (a product's low bits depend only on its factors' low
  // bits), the length in the top one.
  uint64_t tail = static_cast<uint64_t>(s.size()) << 56;
  for (size_t shift = 0; k < s.size(); ++k, shift += 8) {
    tail |= static_cast<uint64_t>(static_cast<unsigned char>(s[k])) << shift;
  }
  h = (h ^ tail) * kMul;
  return h ^ (h >> 32);
}

// A name's hash for open-addressing tables (user names, node names): HashText, its high bits folded
// in.
inline uint64_t HashName(std::string_view s) {
  const uint64_t h = HashText(kFnvBasis, s);
  return h ^ (h >> 29);
}

}  // namespace berth::sched::internal
