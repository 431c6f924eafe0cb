#include "server/core/submit_queue.h"

#include <fmt/format.h>

namespace berth {
namespace {

// A key that came back with another body: refused, naming the jobs the first one made.
Status KeyReused(const std::string& key, const std::vector<int64_t>& ids) {
  return Status::Conflict(fmt::format(
      "idempotency key '{}' was used for a different submission (jobs {}..{}); a new submission "
      "needs a new key",
      key, ids.front(), ids.back()));
}

}  // namespace

std::vector<SubmitQueue::Entry*> SubmitQueue::Group::Writing() const {
  std::vector<Entry*> writing;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!repeats_of[i]) writing.push_back(entries[i]);
  }
  return writing;
}

bool SubmitQueue::Join(Entry& entry) {
  MutexLock lock(mu_);
  queue_.push_back(&entry);
  while (!entry.done && queue_.front() != &entry) cv_.Wait(mu_);
  return !entry.done;
}

SubmitQueue::Group SubmitQueue::TakeGroup() {
  MutexLock lock(mu_);
  Group group;
  int64_t jobs = 0;
  for (Entry* e : queue_) {
    if (!group.entries.empty() && jobs + e->count > max_jobs_) break;
    group.entries.push_back(e);
    jobs += e->count;
  }
  // A keyed entry whose key was committed since it looked (a retry racing its original), or that
  // repeats an earlier entry's key in this group, is answered from that one and writes nothing.
  group.repeats_of.assign(group.entries.size(), nullptr);
  for (size_t i = 0; i < group.entries.size(); ++i) {
    Entry& e = *group.entries[i];
    if (e.key.empty()) continue;
    auto recent = recent_keys_.find({e.user, e.key});
    if (recent != recent_keys_.end()) {
      e.answer = AnswerFrom(e, recent->second);
      group.repeats_of[i] = &e;
      continue;
    }
    for (size_t j = 0; j < i; ++j) {
      const Entry& earlier = *group.entries[j];
      if (!group.repeats_of[j] && earlier.user == e.user && earlier.key == e.key) {
        group.repeats_of[i] = group.entries[j];
        break;
      }
    }
  }
  return group;
}

void SubmitQueue::Finish(const Group& group, const Result<std::vector<SubmitResult>>& stored,
                         TimeMs now) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < group.entries.size(); ++i) {
    const Entry* first = group.repeats_of[i];
    Entry& e = *group.entries[i];
    if (!first || first == &e) continue;
    // The same key in one group: a retry gets the first one's jobs; another body is a reuse of
    // the key, refused as it would be once the first is in the store.
    if (first->answer.ok() && first->fingerprint != e.fingerprint) {
      e.answer = KeyReused(e.key, first->answer->ids);
    } else {
      e.answer = first->answer;
    }
  }
  if (stored.ok()) {
    const std::vector<Entry*> writing = group.Writing();
    for (size_t i = 0; i < writing.size() && i < stored->size(); ++i) {
      const Entry& e = *writing[i];
      if (e.key.empty()) continue;
      UserKey id{e.user, e.key};
      recent_keys_[id] = KeyedSubmission{.result = (*stored)[i], .fingerprint = e.fingerprint};
      recent_order_.emplace_back(now, std::move(id));
    }
  }
  while (!recent_order_.empty() && recent_order_.front().first < now - key_memory_) {
    recent_keys_.erase(recent_order_.front().second);
    recent_order_.pop_front();
  }
  for (Entry* e : group.entries) {
    e->done = true;
    queue_.pop_front();
  }
  cv_.SignalAll();
}

Result<SubmitAnswer> SubmitQueue::AnswerFrom(const Entry& entry, const KeyedSubmission& earlier) {
  const SubmitResult& r = earlier.result;
  if (earlier.fingerprint != entry.fingerprint) return KeyReused(entry.key, r.ids);
  return SubmitAnswer{.group = r.group, .ids = r.ids};
}

size_t SubmitQueue::QueuedForTesting() {
  MutexLock lock(mu_);
  return queue_.size();
}

size_t SubmitQueue::RememberedKeysForTesting() {
  MutexLock lock(mu_);
  return recent_keys_.size();
}

}  // namespace berth
