#include "sched/dependencies.h"

#include <algorithm>

namespace berth::sched {
namespace {

std::string TargetName(const DepTarget& t) {
  return (t.group ? "group " : "") + std::to_string(t.id);
}

}  // namespace

std::string Dependencies::EndedText(JobStatus status) {
  switch (status) {
    case JobStatus::kFailed:
    case JobStatus::kFailedSetup:
      return "failed";
    case JobStatus::kCancelled:
      return "was cancelled";
    case JobStatus::kLost:
      return "was lost";
    case JobStatus::kPreempted:
      return "was preempted";
    default:
      return "ended " + std::string(JobStatusName(status));
  }
}

std::string Dependencies::FailureText(const DepCondition& c, const DepTarget& t) {
  if (c.kind == DepKind::kNotOk) {
    return "dependency notok:" + TargetName(t) + " can no longer hold: " +
           (t.group ? "every job of group " + std::to_string(t.id) + " succeeded"
                    : "job " + std::to_string(t.id) + " succeeded");
  }
  if (!t.group) return "dependency " + std::to_string(t.id) + " " + t.first_not_ok;
  return "dependency group " + std::to_string(t.id) + " failed (" + t.first_not_ok + ")";
}

DepState Dependencies::Evaluate(Waiter& w) {
  if (w.state != DepState::kWaiting) return w.state;
  bool all_met = true;
  for (const DepCondition& c : w.conditions) {
    bool all_ended = true;
    int not_ok = 0;
    for (const DepTarget& t : c.targets) {
      all_ended = all_ended && t.ended >= t.total;
      not_ok += t.not_ok;
      if (c.kind == DepKind::kOk && t.not_ok > 0) {
        w.state = DepState::kFailed;
        w.why = FailureText(c, t);
        return w.state;
      }
    }
    if (c.kind == DepKind::kNotOk && all_ended && not_ok == 0) {
      w.state = DepState::kFailed;
      w.why = FailureText(c, c.targets.front());
      return w.state;
    }
    bool met = all_ended && (c.kind != DepKind::kNotOk || not_ok > 0);
    all_met = all_met && met;
  }
  if (all_met) w.state = DepState::kMet;
  return w.state;
}

DepState Dependencies::Add(Key key, std::vector<DepCondition> conditions) {
  Remove(key);
  Waiter& w = waiters_[key];
  w.conditions = std::move(conditions);
  for (const DepCondition& c : w.conditions) {
    for (const DepTarget& t : c.targets) {
      (t.group ? by_group_ : by_job_).emplace(t.id, key);
    }
  }
  return Evaluate(w);
}

std::vector<Dependencies::Key> Dependencies::Watching(int64_t job,
                                                      std::optional<int64_t> group) const {
  std::vector<Key> keys;
  auto add = [&](Key key) {
    auto w = waiters_.find(key);
    if (w != waiters_.end() && w->second.state == DepState::kWaiting) keys.push_back(key);
  };
  auto [a, b] = by_job_.equal_range(job);
  for (auto it = a; it != b; ++it) add(it->second);
  if (group) {
    auto [c, d] = by_group_.equal_range(*group);
    for (auto it = c; it != d; ++it) add(it->second);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::vector<Dependencies::Change> Dependencies::JobEnded(int64_t job, std::optional<int64_t> group,
                                                         JobStatus status) {
  std::vector<Change> changes;
  const bool ok = status == JobStatus::kSucceeded;
  for (Key key : Watching(job, group)) {
    Waiter& w = waiters_.at(key);
    for (DepCondition& c : w.conditions) {
      for (DepTarget& t : c.targets) {
        if (t.group ? (group != t.id) : (t.id != job)) continue;
        if (t.ended >= t.total) continue;  // already counted (cannot end twice)
        ++t.ended;
        if (!ok) {
          if (t.not_ok++ == 0) {
            t.first_not_ok = t.group ? "job " + std::to_string(job) + " " + EndedText(status)
                                     : EndedText(status);
          }
        }
      }
    }
    if (Evaluate(w) != DepState::kWaiting) changes.push_back({key, w.state, w.why});
  }
  return changes;
}

const Dependencies::Waiter* Dependencies::Find(Key key) const {
  auto it = waiters_.find(key);
  return it == waiters_.end() ? nullptr : &it->second;
}

std::optional<Dependencies::Waiter> Dependencies::Save(Key key) const {
  const Waiter* w = Find(key);
  if (w == nullptr) return std::nullopt;
  return *w;
}

void Dependencies::Restore(Key key, std::optional<Waiter> saved) {
  if (!saved) {
    Remove(key);
    return;
  }
  auto it = waiters_.find(key);
  if (it == waiters_.end()) {
    // Removed since it was saved: index its targets again.
    Add(key, saved->conditions);
    it = waiters_.find(key);
  }
  // A waiter's targets never change, so the indexes point at it as they did.
  it->second = std::move(*saved);
}

void Dependencies::Remove(Key key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  for (const DepCondition& c : it->second.conditions) {
    for (const DepTarget& t : c.targets) {
      auto& index = t.group ? by_group_ : by_job_;
      auto [a, b] = index.equal_range(t.id);
      for (auto x = a; x != b;) {
        x = x->second == key ? index.erase(x) : std::next(x);
      }
    }
  }
  waiters_.erase(it);
}

}  // namespace berth::sched
