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

void DependencyWaiters::Entered(ActiveJob& job) {
  auto it = jobs_.find(job.row.spec_id);
  if (it != jobs_.end()) ++it->second.live;
}

void DependencyWaiters::Left(ActiveJob& job) {
  const Key key = job.row.spec_id;
  auto it = jobs_.find(key);
  if (it == jobs_.end() || --it->second.live > 0) return;
  conditions_.Remove(key);
  jobs_.erase(it);
  gone_.push_back(key);
}

}  // namespace berth
