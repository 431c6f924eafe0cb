#include "server/core/spec_cache.h"

#include <algorithm>

namespace berth {

std::shared_ptr<const JobSpec> SpecCache::Find(int64_t spec_id) const {
  auto it = specs_.find(spec_id);
  return it == specs_.end() ? nullptr : it->second.lock();
}

void SpecCache::Remember(int64_t spec_id, const std::shared_ptr<const JobSpec>& spec) {
  specs_[spec_id] = spec;
  if (specs_.size() >= sweep_at_) Sweep();
}

void SpecCache::Sweep() {
  std::erase_if(specs_, [](const auto& entry) { return entry.second.expired(); });
  if (specs_.empty()) specs_ = {};  // its bucket array too
  sweep_at_ = std::max<size_t>(64, 2 * specs_.size());
}

bool SpecCache::NeedsSending(const std::string& node, int64_t spec_id) {
  Recent& sent = sent_[node];
  if (std::find(sent.ids.begin(), sent.ids.end(), spec_id) != sent.ids.end()) return false;
  sent.ids[sent.next++ % sent.ids.size()] = spec_id;
  return true;
}

}  // namespace berth
