// JobTable: the jobs the server core holds in memory (every job not over, and those over whose
// processes are still being stopped), by id, and the one door through which a job enters memory,
// changes and leaves it.
//
// A job enters with Enter (loaded at start, submitted, or an ended attempt held again after a
// restart), changes only through Edit (which saves it in the txn's undo journal first and bumps its
// generation), and leaves with Leave (reaped once over) or when an undo restores it as absent.
// Whatever keeps books per job — counts, group limits, dependency waiters, tallies, the pass index
// — subscribes once as an Observer and hears every enter, edit, restore and leave, wherever it came
// from; none of them is called by hand (docs/design.md "Per-job bookkeeping" has a worked example).
//
// The table takes part in a Txn's undo journal (txn.h): Save/Restore by id, restored before the
// observers' own tables (kUndoFirst), since its notices change their books.
//
// Not thread-safe; the core guards it (and every observer's state) with its state lock. Observers
// are called with that lock held and must not call back into the table.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "server/core/active_job.h"
#include "server/core/txn.h"

namespace berth {

class JobTable {
 public:
  using Map = std::map<int64_t, ActiveJob>;
  using Key = int64_t;
  using Snapshot = std::optional<ActiveJob>;
  static constexpr bool kUndoFirst = true;

  // Hears every change of membership and every edit. The defaults do nothing.
  class Observer {
   public:
    virtual ~Observer() = default;
    // `job` is now in the table. It may set its own bookkeeping fields (counted, tallied).
    virtual void Entered(ActiveJob& /*job*/) {}
    // `job` is about to leave the table (it is still there).
    virtual void Left(ActiveJob& /*job*/) {}
    // `job` is about to change (Edit): it is still as it was.
    virtual void Edited(const ActiveJob& /*job*/) {}
    // An undo put `job` back as it was; `was` is the job as it had become, gone once the notices
    // are told (nullptr: it was not in the table).
    virtual void Restored(ActiveJob* /*was*/, ActiveJob& /*job*/) {}
  };

  // Observers are told in the order they subscribed; each lives as long as the table.
  void Subscribe(Observer* observer) { observers_.push_back(observer); }

  // Adds `job` (its id must be new) and tells the observers; the job as it is in the table.
  ActiveJob& Enter(ActiveJob job);
  // Adds `job` as part of `txn`: an undo takes it out again.
  ActiveJob& Enter(Txn& txn, ActiveJob job);
  // Tells the observers that `it` leaves, then erases it; the next job.
  Map::iterator Leave(Map::iterator it);
  // Saves `job` in `txn`'s journal before its first change there, bumps its generation and tells
  // the observers; `job` itself, to change.
  ActiveJob& Edit(Txn& txn, ActiveJob& job);

  // The undo journal's side (txn.h).
  Snapshot Save(int64_t id) const;
  void Restore(int64_t id, Snapshot before);

  // Lookups and walks. An iterator's job may be read, and changed only after Edit.
  Map::iterator find(int64_t id) { return jobs_.find(id); }
  Map::const_iterator find(int64_t id) const { return jobs_.find(id); }
  Map::iterator lower_bound(int64_t id) { return jobs_.lower_bound(id); }
  Map::const_iterator lower_bound(int64_t id) const { return jobs_.lower_bound(id); }
  ActiveJob& at(int64_t id) { return jobs_.at(id); }
  const ActiveJob& at(int64_t id) const { return jobs_.at(id); }
  size_t count(int64_t id) const { return jobs_.count(id); }
  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  Map::iterator begin() { return jobs_.begin(); }
  Map::iterator end() { return jobs_.end(); }
  Map::const_iterator begin() const { return jobs_.begin(); }
  Map::const_iterator end() const { return jobs_.end(); }
  Map::reverse_iterator rbegin() { return jobs_.rbegin(); }
  Map::reverse_iterator rend() { return jobs_.rend(); }

 private:
  Map jobs_;
  std::vector<Observer*> observers_;
};

}  // namespace berth
