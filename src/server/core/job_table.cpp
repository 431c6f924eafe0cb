#include "server/core/job_table.h"

#include <utility>

#include "common/log.h"

namespace berth {

ActiveJob& JobTable::Enter(ActiveJob job) {
  const int64_t id = job.row.id;
  auto [it, fresh] = jobs_.try_emplace(id, std::move(job));
  if (!fresh) {
    LogError("job {} entered memory twice: the second is ignored", id);
    return it->second;
  }
  for (Observer* o : observers_) o->Entered(it->second);
  return it->second;
}

ActiveJob& JobTable::Enter(Txn& txn, ActiveJob job) {
  txn.journal.Save(*this, job.row.id);  // absent, unless it is there already (then kept)
  return Enter(std::move(job));
}

JobTable::Map::iterator JobTable::Leave(Map::iterator it) {
  for (Observer* o : observers_) o->Left(it->second);
  return jobs_.erase(it);
}

ActiveJob& JobTable::Edit(Txn& txn, ActiveJob& job) {
  txn.journal.SaveAs(*this, job.row.id, [&] { return Snapshot(job); });
  for (Observer* o : observers_) o->Edited(job);
  ++job.gen;
  return job;
}

JobTable::Snapshot JobTable::Save(int64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? Snapshot() : Snapshot(it->second);
}

void JobTable::Restore(int64_t id, Snapshot before) {
  auto now = jobs_.find(id);
  if (!before) {
    if (now != jobs_.end()) Leave(now);
    return;
  }
  if (now == jobs_.end()) {
    ActiveJob& back = jobs_.emplace(id, std::move(*before)).first->second;
    for (Observer* o : observers_) o->Restored(nullptr, back);
    return;
  }
  ActiveJob was = std::exchange(now->second, std::move(*before));
  for (Observer* o : observers_) o->Restored(&was, now->second);
}

}  // namespace berth
