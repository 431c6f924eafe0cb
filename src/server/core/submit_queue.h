// SubmitQueue: the group commit of submissions, and the idempotency keys this process committed
// lately. A submission is an Entry on its caller's stack. Join() queues it and waits until it is at
// the queue's front (it then writes for a group) or a writer answered it. The writer takes the
// group behind it (TakeGroup: up to `max_jobs` jobs, and which of them repeat a key, so need no
// write), records the others in one store commit outside any lock, applies them, and calls Finish:
// a repeat gets the answer of the submission it repeats (a Conflict when the key came with another
// body), the keys written are remembered for `key_memory`, and every entry of the group is done.
// The memory of keys covers a retry that looked its key up in the store before its original was
// committed: by `key_memory` later no such retry is still queued.
//
// Thread-safety: thread-safe; one mutex of its own, held by no call while it returns except Join's
// wait. The Core calls it without its state lock (server/core/core.h). An entry's answer is written
// by its group's writer; its owner reads it once Join has returned false (or after Finish, as the
// writer).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "store/store.h"

namespace berth {

struct SubmitAnswer {
  std::optional<int64_t> group;
  std::vector<int64_t> ids;
  // What the submitter should know, said once per submission ("not enforced: ..."); not stored, so
  // an answer given again for the same idempotency key has none.
  std::vector<std::string> warnings;
};

class SubmitQueue {
 public:
  struct Entry {
    std::string user;
    std::string key;          // the idempotency key; "" for none
    std::string fingerprint;  // with a key: what was submitted under it
    int count = 1;            // jobs
    Result<SubmitAnswer> answer = Status::Internal("not written");
    bool done = false;  // set under the queue's mutex
  };

  // What the writer at the front writes for.
  struct Group {
    std::vector<Entry*> entries;  // in queue order; the writer's own first
    // Per entry: null where it is to be written; itself where it was answered already (its key was
    // committed lately); else the earlier entry of the group whose key it repeats.
    std::vector<Entry*> repeats_of;
    // The entries to be written, in order (those whose repeats_of is null).
    std::vector<Entry*> Writing() const;
  };

  SubmitQueue(int64_t max_jobs, DurationMs key_memory)
      : max_jobs_(max_jobs), key_memory_(key_memory) {}

  // Queues `entry` and waits. True: `entry` is at the front, and its caller writes for the group
  // TakeGroup gives, then calls Finish. False: another writer answered it (entry.answer).
  bool Join(Entry& entry) EXCLUDES(mu_);
  // The group the writer at the front writes for; answers the entries whose key was committed
  // lately (repeats_of: themselves). Only by that writer, once, after Join returned true.
  Group TakeGroup() EXCLUDES(mu_);
  // After the group's commit: `stored` is the store's answer for Writing(), one result each (or
  // its failure: nothing is remembered). Answers the repeats, remembers the keys written (at
  // `now`), forgets those older than key_memory, and wakes every entry of the group.
  void Finish(const Group& group, const Result<std::vector<SubmitResult>>& stored, TimeMs now)
      EXCLUDES(mu_);

  // The answer for `entry` from an earlier submission under its key: that submission's jobs, or
  // Conflict when it was a different body.
  static Result<SubmitAnswer> AnswerFrom(const Entry& entry, const KeyedSubmission& earlier);

  size_t QueuedForTesting() EXCLUDES(mu_);
  size_t RememberedKeysForTesting() EXCLUDES(mu_);

 private:
  using UserKey = std::pair<std::string, std::string>;  // (user, key)

  const int64_t max_jobs_;
  const DurationMs key_memory_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Entry*> queue_ GUARDED_BY(mu_);
  std::map<UserKey, KeyedSubmission> recent_keys_ GUARDED_BY(mu_);
  std::deque<std::pair<TimeMs, UserKey>> recent_order_ GUARDED_BY(mu_);  // oldest first
};

}  // namespace berth
