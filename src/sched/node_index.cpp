#include "sched/node_index.h"

namespace berth::sched::internal {

// A placement changes one node's key: its tree nodes are taken out whole and put back, so that an
// update allocates nothing.
void NodeIndex::Remove(NodeIdx i) {
  if (member_.empty() || !member_[i]) return;
  for (size_t s = 0; s < sets_.size(); ++s) {
    if (built_[s] && Belongs(static_cast<int>(s), i)) {
      Set::node_type handle = sets_[s][static_cast<size_t>(state_->pool(i))].extract(i);
      if (!handle.empty()) removed_.emplace_back(s, std::move(handle));
    }
  }
}

void NodeIndex::Insert(NodeIdx i) {
  if (member_.empty() || !member_[i]) {
    removed_.clear();
    return;
  }
  for (auto& [slot, handle] : removed_) {
    if (handle.value() == i)
      sets_[slot][static_cast<size_t>(state_->pool(i))].insert(std::move(handle));
  }
  removed_.clear();
}

void NodeIndex::Exclude(NodeIdx i) {
  Remove(i);
  removed_.clear();
  if (!member_.empty()) member_[i] = false;
}

}  // namespace berth::sched::internal
