// DependencyWaiters: waiting submissions, their jobs and owed cancellations (dependency_waiters.h).
#include "server/core/dependency_waiters.h"

namespace berth {

sched::DepState DependencyWaiters::Add(Key key, std::vector<sched::DepCondition> conditions,
                                       Jobs jobs) {
  jobs_[key] = jobs;
  return conditions_.Add(key, std::move(conditions));
}

const DependencyWaiters::Jobs* DependencyWaiters::JobsOf(Key key) const {
  auto it = jobs_.find(key);
  return it == jobs_.end() ? nullptr : &it->second;
}

void DependencyWaiters::JobBack(Key key) {
  auto it = jobs_.find(key);
  if (it != jobs_.end()) ++it->second.live;
}

bool DependencyWaiters::JobGone(Key key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end() || --it->second.live > 0) return false;
  conditions_.Remove(key);
  jobs_.erase(it);
  return true;
}

}  // namespace berth
