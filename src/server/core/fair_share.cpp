// FairShare: rules, ended usage and reclaims, and the snapshot's users and teams (fair_share.h).
#include "server/core/fair_share.h"

namespace berth {

void FairShare::SetRules(const std::vector<UserRow>& users, const std::vector<TeamRow>& teams) {
  users_.clear();
  for (const UserRow& u : users) users_[u.name] = u;
  teams_.clear();
  for (const TeamRow& t : teams) teams_[t.name] = t;
}

const UserRow* FairShare::RulesOf(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? nullptr : &it->second;
}

std::string FairShare::TeamOf(const std::string& user) const {
  const UserRow* rules = RulesOf(user);
  return rules == nullptr ? "" : rules->team;
}

bool FairShare::ExpireReclaims(TimeMs now) {
  const TimeMs expired = now - reclaim_window_;
  bool any = false;
  for (auto& [team, times] : reclaims_) {
    while (!times.empty() && times.front() <= expired) {
      times.pop_front();
      any = true;
    }
  }
  return any;
}

void FairShare::AddTo(sched::Snapshot& snap, const std::vector<Running>& running) {
  const TimeMs now = snap.now;
  std::map<std::string, double> user_usage;
  std::map<std::string, double> team_usage;
  for (const auto& [name, entry] : ledger_.users()) user_usage[name] = ledger_.User(name, now);
  for (const auto& [name, entry] : ledger_.teams()) team_usage[name] = ledger_.Team(name, now);
  for (const Running& r : running) {
    user_usage[r.user] += r.used;
    team_usage[TeamOf(r.user)] += r.used;
  }
  for (const auto& [name, row] : users_) user_usage.try_emplace(name, 0);
  snap.users.reserve(snap.users.size() + user_usage.size());
  for (const auto& [name, usage] : user_usage) {
    sched::UserView v;
    v.name = name;
    v.usage = usage;
    if (const UserRow* rules = RulesOf(name)) {
      v.team = rules->team;
      if (rules->max_running_gpus) {
        v.max_running_gpus = static_cast<MilliGpu>(*rules->max_running_gpus) * kMilliPerGpu;
      }
    }
    snap.users.push_back(std::move(v));
  }
  for (const auto& [name, row] : teams_) team_usage.try_emplace(name, 0);
  ExpireReclaims(now);
  for (const auto& [name, usage] : team_usage) {
    sched::TeamView v;
    v.name = name;
    v.usage = usage;
    auto rules = teams_.find(name);
    if (rules != teams_.end()) {
      v.quota = rules->second.quota;
      v.borrow_limit = rules->second.borrow_limit;
      v.weight = rules->second.weight;
    }
    auto reclaimed = reclaims_.find(name);
    if (reclaimed != reclaims_.end()) {
      v.reclaims.assign(reclaimed->second.begin(), reclaimed->second.end());
    }
    snap.teams.push_back(std::move(v));
  }
}

}  // namespace berth
