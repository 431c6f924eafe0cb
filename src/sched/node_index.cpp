#include "sched/node_index.h"

namespace berth::sched::internal {

void NodeIndex::Remove(NodeIdx i) {
  if (member_.empty() || !member_[i]) return;
  for (size_t s = 0; s < sets_.size(); ++s) {
    if (built_[s] && Belongs(static_cast<int>(s), i)) {
      sets_[s][static_cast<size_t>(state_->pool(i))].erase(i);
    }
  }
}

void NodeIndex::Insert(NodeIdx i) {
  if (member_.empty() || !member_[i]) return;
  for (size_t s = 0; s < sets_.size(); ++s) {
    if (built_[s] && Belongs(static_cast<int>(s), i)) {
      sets_[s][static_cast<size_t>(state_->pool(i))].insert(i);
    }
  }
}

void NodeIndex::Exclude(NodeIdx i) {
  Remove(i);
  if (!member_.empty()) member_[i] = false;
}

}  // namespace berth::sched::internal
