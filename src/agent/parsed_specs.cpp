#include "agent/parsed_specs.h"

#include <algorithm>
#include <utility>

#include "common/json_util.h"

namespace berth {

ParsedSpecs::Entry ParsedSpecs::Parse(const std::string& text) {
  Entry out;
  out.bytes = text.size();
  auto json = ParseJson(text, "spec");
  Result<JobSpec> spec = json.ok() ? SpecFromJson(*json) : Result<JobSpec>(json.status());
  if (spec.ok()) {
    out.spec = std::make_shared<const JobSpec>(std::move(*spec));
  } else {
    out.error = "the job's spec is unreadable: " + spec.status().message();
  }
  return out;
}

std::optional<ParsedSpecs::Entry> ParsedSpecs::Find(int64_t id) {
  MutexLock lock(mu_);
  auto it = specs_.find(id);
  if (it == specs_.end()) return std::nullopt;
  it->second.last_use = ++uses_;
  return it->second.entry;
}

void ParsedSpecs::Put(int64_t id, Entry entry) {
  MutexLock lock(mu_);
  if (auto old = specs_.find(id); old != specs_.end()) bytes_ -= old->second.entry.bytes;
  bytes_ += entry.bytes;
  specs_[id] = Kept{std::move(entry), ++uses_};
  while (specs_.size() > 1 && (specs_.size() > max_specs_ || bytes_ > max_bytes_)) {
    // The least recently used goes (not the oldest id: a long sweep's spec is used all along).
    auto lru = std::min_element(specs_.begin(), specs_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    bytes_ -= lru->second.entry.bytes;
    specs_.erase(lru);
  }
}

void ParsedSpecs::Clear() {
  MutexLock lock(mu_);
  specs_.clear();
  bytes_ = 0;
}

size_t ParsedSpecs::size() const {
  MutexLock lock(mu_);
  return specs_.size();
}

size_t ParsedSpecs::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

}  // namespace berth
