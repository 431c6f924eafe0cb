#include "server/core/waiting_board.h"

namespace berth {

void WaitingBoard::NewPass(std::shared_ptr<const sched::Waiting> pass) {
  MutexLock lock(mu_);
  pass_ = std::move(pass);
  placed_since_pass_.clear();
  notes_.clear();
}

void WaitingBoard::Note(const std::vector<int64_t>& jobs, const std::string& reason) {
  MutexLock lock(mu_);
  for (int64_t id : jobs) notes_[id] = reason;
}

void WaitingBoard::Placed(const std::vector<int64_t>& jobs) {
  MutexLock lock(mu_);
  for (int64_t id : jobs) {
    notes_.erase(id);
    placed_since_pass_.insert(id);
  }
}

void WaitingBoard::SetDependencyReason(WaiterKey key, int64_t first, int64_t last,
                                       std::string reason) {
  MutexLock lock(mu_);
  if (reason.empty()) {
    // Once: a later call finds no reason and has nothing to clear.
    if (dep_reasons_.erase(key) == 0) return;
    for (int64_t id = first; id <= last; ++id) dep_waiting_.erase(id);
    return;
  }
  const bool fresh = !dep_reasons_.count(key);
  dep_reasons_[key] = std::move(reason);
  if (fresh) {
    for (int64_t id = first; id <= last; ++id) dep_waiting_[id] = key;
  }
}

void WaitingBoard::Forget(const std::vector<int64_t>& jobs, const std::vector<WaiterKey>& waiters) {
  MutexLock lock(mu_);
  for (int64_t id : jobs) {
    notes_.erase(id);
    dep_waiting_.erase(id);
  }
  for (WaiterKey key : waiters) dep_reasons_.erase(key);
}

const std::string* WaitingBoard::ReasonLocked(int64_t job, const sched::Waiting::Entry** entry) {
  if (entry != nullptr) *entry = nullptr;
  if (auto note = notes_.find(job); note != notes_.end()) return &note->second;
  if (auto dep = dep_waiting_.find(job); dep != dep_waiting_.end()) {
    auto text = dep_reasons_.find(dep->second);
    if (text != dep_reasons_.end()) return &text->second;
  }
  if (!pass_ || placed_since_pass_.count(job)) return nullptr;
  const sched::Waiting::Entry* e = pass_->Find(job);
  if (e == nullptr) return nullptr;
  if (entry != nullptr) *entry = e;
  return &pass_->ReasonOf(*e);
}

std::string WaitingBoard::Reason(int64_t job) {
  MutexLock lock(mu_);
  const std::string* reason = ReasonLocked(job, nullptr);
  return reason == nullptr ? "" : *reason;
}

std::optional<WaitingDetail> WaitingBoard::Detail(int64_t job) {
  MutexLock lock(mu_);
  const sched::Waiting::Entry* entry = nullptr;
  const std::string* reason = ReasonLocked(job, &entry);
  if (reason == nullptr) return std::nullopt;
  WaitingDetail detail{*reason, std::nullopt, nullptr};
  if (entry != nullptr) {
    detail.explanation = pass_->ExplainEntry(*entry);
    detail.pass = pass_;
  }
  return detail;
}

std::unordered_map<int64_t, std::string> WaitingBoard::Reasons(const std::vector<int64_t>& jobs) {
  std::unordered_map<int64_t, std::string> out;
  MutexLock lock(mu_);
  for (int64_t id : jobs) {
    if (const std::string* reason = ReasonLocked(id, nullptr)) out.emplace(id, *reason);
  }
  return out;
}

std::pair<std::shared_ptr<const sched::Waiting>, int64_t> WaitingBoard::ForGauges() {
  MutexLock lock(mu_);
  return {pass_, static_cast<int64_t>(dep_waiting_.size())};
}

}  // namespace berth
