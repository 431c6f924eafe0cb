#include "sched/waiting.h"

#include <algorithm>
#include <stdexcept>

namespace berth::sched {
namespace {

MilliGpu At(const std::vector<MilliGpu>& v, int type, MilliGpu beyond) {
  return type >= 0 && static_cast<size_t>(type) < v.size() ? v[static_cast<size_t>(type)] : beyond;
}

}  // namespace

const Waiting::Entry* Waiting::Find(JobId id) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                             [](const Entry& e, JobId v) { return e.id < v; });
  return it == entries_.end() || it->id != id ? nullptr : &*it;
}

const std::string& Waiting::at(JobId id) const {
  const Entry* e = Find(id);
  if (e == nullptr) throw std::out_of_range("job " + std::to_string(id) + " is not waiting");
  return ReasonOf(*e);
}

std::optional<Explanation> Waiting::Explain(JobId id) const {
  const Entry* e = Find(id);
  if (e == nullptr) return std::nullopt;
  return ExplainEntry(*e);
}

Explanation Waiting::ExplainEntry(const Entry& e) const {
  const UserRow& user = users_[static_cast<size_t>(e.user)];
  const TeamRow& team = team_rows_[static_cast<size_t>(user.team)];
  const ShapeRow& shape = shapes_[e.shape];
  Explanation x;
  x.position = e.position;
  x.team_position = e.team_position;
  x.team = user.team;
  x.job_needs = shape.gpus;
  if (shape.gpus > 0) {
    x.team_uses = At(team.holds, shape.type, 0);
    x.quota = At(team.quota, shape.type, 0);
    const MilliGpu limit = At(team.limit, shape.type, -1);
    if (limit >= 0) x.borrow_limit = limit;
    if (x.team_uses + x.job_needs <= x.quota) {
      x.quota_state = Explanation::Quota::kWithin;
    } else if (x.borrow_limit && x.team_uses + x.job_needs > x.quota + *x.borrow_limit) {
      x.quota_state = Explanation::Quota::kOverLimit;
    } else {
      x.quota_state = Explanation::Quota::kBorrowing;
    }
  }
  x.user_usage = user.usage;
  x.team_usage = team.usage;
  x.team_weight = team.weight;
  x.user_score = x.user_usage;
  x.team_score = x.team_usage / x.team_weight;
  x.first_waiting = first_waiting_;
  x.blocking = shape.blocking;
  for (size_t r = 0; r < reservations_.size(); ++r) {
    if (reservations_[r].job == e.id) x.reservation = static_cast<int>(r);
  }
  return x;
}

}  // namespace berth::sched
