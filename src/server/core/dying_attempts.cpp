// DyingAttempts: earlier attempts whose ranks still run, and which of them (dying_attempts.h).
#include "server/core/dying_attempts.h"

namespace berth {

Placement DyingAttempt::Held() const {
  if (unheld.empty()) return placement;
  Placement held;
  for (const NodeGrant& grant : placement) {
    if (!unheld.count(grant.rank)) held.push_back(grant);
  }
  return held;
}

std::optional<DyingAttempt> DyingAttempts::RankGone(const AttemptKey& key, int rank) {
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return std::nullopt;
  it->second.alive.erase(rank);
  if (!it->second.alive.empty()) return std::nullopt;
  DyingAttempt ended = std::move(it->second);
  attempts_.erase(it);
  return ended;
}

std::vector<std::tuple<int64_t, int, int>> DyingAttempts::AliveOn(const std::string& node) const {
  std::vector<std::tuple<int64_t, int, int>> out;
  for (const auto& [key, attempt] : attempts_) {
    for (const NodeGrant& grant : attempt.placement) {
      if (grant.node == node && attempt.alive.count(grant.rank)) {
        out.emplace_back(key.first, key.second, grant.rank);
      }
    }
  }
  return out;
}

std::optional<DyingAttempt> DyingAttempts::Save(const AttemptKey& key) const {
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return std::nullopt;
  return it->second;
}

void DyingAttempts::Restore(const AttemptKey& key, std::optional<DyingAttempt> before) {
  if (before) {
    attempts_[key] = std::move(*before);
  } else {
    attempts_.erase(key);
  }
}

}  // namespace berth
