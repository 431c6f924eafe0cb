#include "sched/fair_share.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "common/quantity.h"
#include "common/resources.h"
#include "sched/running_sweep.h"
#include "sched/short_text.h"

namespace berth::sched::internal {
namespace {

// User names are looked up once per pending sweep and running job (HashName, sched/short_text.h).
// Names -> numbers in the order first seen: open addressing in a power-of-two table (a cluster has
// hundreds of users and ~100,000 jobs to look up; no division, no node per name).
class NameNumbers {
 public:
  NameNumbers() : slots_(64, -1) {}
  int Note(std::string_view name) {
    size_t k = HashName(name) & (slots_.size() - 1);
    while (slots_[k] >= 0) {
      if (SameText(names_[static_cast<size_t>(slots_[k])], name)) return slots_[k];
      k = (k + 1) & (slots_.size() - 1);
    }
    slots_[k] = static_cast<int>(names_.size());
    names_.push_back(name);
    if (2 * names_.size() > slots_.size()) Grow();
    return static_cast<int>(names_.size() - 1);
  }
  const std::vector<std::string_view>& names() const { return names_; }

 private:
  void Grow() {
    slots_.assign(2 * slots_.size(), -1);
    for (size_t n = 0; n < names_.size(); ++n) {
      size_t k = HashName(names_[n]) & (slots_.size() - 1);
      while (slots_[k] >= 0) k = (k + 1) & (slots_.size() - 1);
      slots_[k] = static_cast<int>(n);
    }
  }
  std::vector<int> slots_;
  std::vector<std::string_view> names_;
};

// "8 GPUs", "1 GPU", "0.5 GPUs".
std::string CountGpus(MilliGpu milli) {
  return FormatMilli(milli) + (milli == kMilliPerGpu ? " GPU" : " GPUs");
}

}  // namespace

Shares::Shares(const Snapshot& snapshot, const Config& config) : config_(config) {
  // Users and teams are numbered in name order, so that index order breaks ties as names do.
  std::unordered_map<std::string_view, const UserView*> user_views;
  for (const UserView& u : snapshot.users) user_views[u.name] = &u;
  // Names get provisional numbers as they are first seen, then their places in name order.
  NameNumbers seen;
  for (const UserView& u : snapshot.users) seen.Note(u.name);
  pending_users_.resize(PendingCount(snapshot));
  const std::string* last = nullptr;  // a sweep's jobs share an owner: one lookup for all
  int provisional = 0;
  for (size_t k = 0; k < pending_users_.size(); ++k) {
    const JobRequest& j = PendingRequest(snapshot, k);
    if (last == nullptr || !SameText(j.user, *last)) {
      provisional = seen.Note(j.user);
    }
    last = &j.user;
    pending_users_[k] = provisional;
  }
  // One sweep over the running jobs for their owners and what they hold (running_sweep.h: each is
  // a cache miss); the holdings are added once users have their places.
  struct Holding {
    int user;  // provisional
    const std::string* type;
    MilliGpu milli;
  };
  std::vector<Holding> holdings;
  std::vector<char> runs_without_gpus;  // by provisional user: runs work that holds no GPU
  last = nullptr;
  running_users_.resize(snapshot.running.size());
  for (size_t k = 0; k < snapshot.running.size(); ++k) {
    PrefetchRunning(snapshot.running, k + kRunningPrefetchAhead);
    const RunningJob& r = *snapshot.running[k];
    if (last == nullptr || !SameText(r.user, *last)) {
      provisional = seen.Note(r.user);
    }
    last = &r.user;
    running_users_[k] = provisional;
    if (r.stopping) continue;
    if (r.per_node.gpu_milli > 0) {
      holdings.push_back({provisional, &r.per_node.gpu_type,
                          r.per_node.gpu_milli * static_cast<MilliGpu>(r.placement.size())});
    } else {
      if (runs_without_gpus.size() <= static_cast<size_t>(provisional)) {
        runs_without_gpus.resize(static_cast<size_t>(provisional) + 1, 0);
      }
      runs_without_gpus[static_cast<size_t>(provisional)] = 1;
    }
  }
  std::vector<std::string_view> user_names = seen.names();
  std::vector<int> order(user_names.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return user_names[static_cast<size_t>(a)] < user_names[static_cast<size_t>(b)];
  });
  std::vector<int> final_index(order.size());
  for (size_t k = 0; k < order.size(); ++k) final_index[static_cast<size_t>(order[k])] = int(k);
  for (int& u : pending_users_) u = final_index[static_cast<size_t>(u)];
  for (int& u : running_users_) u = final_index[static_cast<size_t>(u)];
  {
    std::vector<std::string_view> sorted(user_names.size());
    for (size_t k = 0; k < order.size(); ++k) sorted[k] = user_names[static_cast<size_t>(order[k])];
    user_names = std::move(sorted);
  }

  std::set<std::string, std::less<>> team_names = {""};
  for (const TeamView& t : snapshot.teams) team_names.insert(t.name);
  for (const UserView& u : snapshot.users) team_names.insert(u.team);
  std::map<std::string, int, std::less<>> team_index;
  for (const std::string& name : team_names) {
    team_index[name] = static_cast<int>(teams_.size());
    teams_.push_back(Team{.name = name, .reclaims_left = config.reclaim_limit});
  }
  for (const auto& [type, weight] : config.gpu_weights) TypeId(type);
  for (const TeamView& v : snapshot.teams) {
    Team& t = teams_[static_cast<size_t>(team_index[v.name])];
    for (const auto& [type, milli] : v.quota) {
      if (milli <= 0) continue;
      const int k = TypeId(type);
      if (t.quota.size() <= static_cast<size_t>(k)) t.quota.resize(static_cast<size_t>(k) + 1, 0);
      t.quota[static_cast<size_t>(k)] = milli;
      t.has_quota = true;
      any_quota_ = true;
    }
    for (const auto& [type, milli] : v.borrow_limit) {
      const int k = TypeId(type);
      if (t.limit.size() <= static_cast<size_t>(k)) t.limit.resize(static_cast<size_t>(k) + 1, -1);
      t.limit[static_cast<size_t>(k)] = std::max<MilliGpu>(0, milli);
      any_limits_ = true;
    }
    t.weight = v.weight > 0 ? v.weight : 1;
    t.usage = v.usage;
    for (TimeMs at : v.reclaims) {
      if (at > snapshot.now - config.reclaim_window) {
        --t.reclaims_left;
        t.reclaims.push_back(at);
      }
    }
    std::sort(t.reclaims.begin(), t.reclaims.end());
  }
  users_.reserve(user_names.size());
  for (std::string_view name : user_names) {
    User u{.name = std::string(name)};
    auto it = user_views.find(name);
    if (it != user_views.end()) {
      u.team = team_index[it->second->team];
      u.usage = it->second->usage;
      u.cap = it->second->max_running_gpus;
      any_limits_ = any_limits_ || u.cap.has_value();
    } else {
      u.team = team_index[""];
    }
    users_.push_back(std::move(u));
  }
  for (size_t k = 0; k < users_.size(); ++k)
    user_index_.emplace(users_[k].name, static_cast<int>(k));
  for (const Holding& h : holdings) {
    Hold(final_index[static_cast<size_t>(h.user)], TypeId(*h.type), h.milli);
  }
  for (size_t u = 0; u < runs_without_gpus.size(); ++u) {
    if (!runs_without_gpus[u]) continue;
    teams_[static_cast<size_t>(users_[static_cast<size_t>(final_index[u])].team)].may_borrow = true;
  }
  // A team holds borrowed work only if it holds more than its quota of some type (work without a
  // quota is all borrowed); see MayBorrowOutside().
  for (Team& t : teams_) {
    for (size_t k = 0; k < t.held.size(); ++k) {
      if (t.held[k] > At(t.quota, static_cast<int>(k), 0)) t.may_borrow = true;
    }
    if (t.may_borrow) ++borrowing_teams_;
  }
  for (int u : pending_users_) {
    if (u != pending_users_.front()) {
      plain_ = false;
      break;
    }
  }
}

int Shares::UserIndex(std::string_view name) const {
  auto it = user_index_.find(name);
  return it == user_index_.end() ? 0 : it->second;
}

int Shares::TypeId(const std::string& type) {
  const int known = FindType(type);
  if (known >= 0) return known;
  int counted = -1, sevenths = 7;
  if (std::optional<SliceShare> slice = SliceShareOf(type)) {
    counted = TypeId(slice->gpu_type);  // (interned first: a whole type counts as itself)
    sevenths = slice->sevenths;
  }
  const int id = static_cast<int>(type_names_.size());
  type_names_.push_back(type);
  type_index_.emplace(type, id);
  type_weight_.push_back(GpuTypeWeight(config_.gpu_weights, type));  // a slice: its share
  counted_type_.push_back(counted < 0 ? id : counted);
  counted_sevenths_.push_back(sevenths);
  return id;
}

int Shares::FindType(const std::string& type) const {
  // Clusters have a handful of GPU types: a walk beats hashing the name for every running job.
  if (type_names_.size() <= 8) {
    for (size_t k = 0; k < type_names_.size(); ++k) {
      if (SameText(type_names_[k], type)) return int(k);
    }
    return -1;
  }
  auto it = type_index_.find(type);
  return it == type_index_.end() ? -1 : it->second;
}

Ask Shares::AskOf(const JobRequest& job) {
  const MilliGpu gpus = JobGpus(job);
  if (gpus <= 0) return Ask{};
  const auto [type, counted] = Counted(TypeId(job.per_node.gpu_type), gpus);
  return Ask{type, counted};
}

void Shares::Hold(int user, int type, MilliGpu milli) {
  User& u = users_[static_cast<size_t>(user)];
  Team& t = teams_[static_cast<size_t>(u.team)];
  const double weighted =
      static_cast<double>(milli) / kMilliPerGpu * type_weight_[static_cast<size_t>(type)];
  std::tie(type, milli) = Counted(type, milli);  // (what quotas and caps see)
  u.held += milli;
  u.weighted += weighted;
  t.weighted += weighted;
  if (t.held.size() <= static_cast<size_t>(type)) t.held.resize(static_cast<size_t>(type) + 1, 0);
  t.held[static_cast<size_t>(type)] += milli;
}

double Shares::UserUsage(int user) const {
  const User& u = users_[static_cast<size_t>(user)];
  return u.usage + config_.admission_charge_s * u.weighted;
}

double Shares::TeamUsage(int team) const {
  const Team& t = teams_[static_cast<size_t>(team)];
  return t.usage + config_.admission_charge_s * t.weighted;
}

MilliGpu Shares::TeamHolds(int team, int type) const {
  return At(teams_[static_cast<size_t>(team)].held, type, 0);
}

MilliGpu Shares::TeamQuota(int team, int type) const {
  return At(teams_[static_cast<size_t>(team)].quota, type, 0);
}

std::optional<MilliGpu> Shares::TeamBorrowLimit(int team, int type) const {
  const MilliGpu limit = At(teams_[static_cast<size_t>(team)].limit, type, -1);
  if (limit < 0) return std::nullopt;
  return limit;
}

bool Shares::Limited(int user, const Ask& ask) const {
  if (ask.gpus <= 0) return false;
  const User& u = users_[static_cast<size_t>(user)];
  if (u.cap && u.held + ask.gpus > *u.cap) return true;
  const MilliGpu borrow = At(teams_[static_cast<size_t>(u.team)].limit, ask.type, -1);
  return borrow >= 0 &&
         TeamHolds(u.team, ask.type) + ask.gpus > TeamQuota(u.team, ask.type) + borrow;
}

std::string Shares::LimitReason(int user, const Ask& ask) const {
  if (ask.gpus <= 0) return "";
  const User& u = users_[static_cast<size_t>(user)];
  if (u.cap && u.held + ask.gpus > *u.cap) {
    return "waiting: user " + u.name + "'s running jobs hold " + CountGpus(u.held) +
           " and this job needs " + FormatMilli(ask.gpus) +
           " more; the user's max-running-gpus is " + FormatMilli(*u.cap);
  }
  std::optional<MilliGpu> borrow = TeamBorrowLimit(u.team, ask.type);
  if (!borrow) return "";
  const MilliGpu quota = TeamQuota(u.team, ask.type);
  const MilliGpu holds = TeamHolds(u.team, ask.type);
  if (holds + ask.gpus <= quota + *borrow) return "";
  const std::string& type = type_names_[static_cast<size_t>(ask.type)];
  return "waiting: team " + TeamLabel(teams_[static_cast<size_t>(u.team)].name) + " holds " +
         FormatMilli(holds) + " " + type + " and this job needs " + FormatMilli(ask.gpus) +
         " more; its quota is " + FormatMilli(quota) + " and it may borrow " +
         FormatMilli(*borrow) + " beyond it";
}

bool Shares::InQuota(int user, const Ask& ask) const {
  if (ask.gpus <= 0) return false;
  const int team = TeamOf(user);
  const MilliGpu quota = TeamQuota(team, ask.type);
  return quota > 0 && TeamHolds(team, ask.type) + ask.gpus <= quota;
}

void Shares::Admit(int user, const Ask& ask) {
  if (ask.gpus > 0) Hold(user, ask.type, ask.gpus);
}

void Shares::Reclaimed(int team, TimeMs now) {
  Team& t = teams_[static_cast<size_t>(team)];
  --t.reclaims_left;
  t.reclaims.push_back(now);
}

TimeMs Shares::NextReclaimAt(int team) const {
  const Team& t = teams_[static_cast<size_t>(team)];
  // The limit allows one more once the oldest of the last `limit` reclaims leaves the window.
  const int limit = config_.reclaim_limit;
  if (limit <= 0 || t.reclaims.size() < static_cast<size_t>(limit)) return 0;
  return t.reclaims[t.reclaims.size() - static_cast<size_t>(limit)] + config_.reclaim_window;
}

FairOrder::FairOrder(Shares& shares, const std::vector<Ask>& asks, std::vector<QueueEntry> entries)
    : shares_(shares), asks_(asks), entries_(std::move(entries)) {
  // Order: priority (high first), team, user, id. A user's rank is its place in (team, user)
  // order. The server lists the queue by id and uses few priorities, so two stable counting sorts
  // (by rank, then by priority) usually do, in O(jobs + users); else a comparison sort.
  std::vector<int> by_team(shares_.user_count());
  for (size_t u = 0; u < by_team.size(); ++u) by_team[u] = static_cast<int>(u);
  std::stable_sort(by_team.begin(), by_team.end(),
                   [&](int a, int b) { return shares_.TeamOf(a) < shares_.TeamOf(b); });
  std::vector<uint32_t> rank(by_team.size());
  for (size_t r = 0; r < by_team.size(); ++r) rank[static_cast<size_t>(by_team[r])] = uint32_t(r);
  bool by_id = true;
  int lowest = std::numeric_limits<int>::max();
  int highest = std::numeric_limits<int>::min();
  for (size_t k = 0; k < entries_.size(); ++k) {
    if (k > 0 && entries_[k].id < entries_[k - 1].id) by_id = false;
    lowest = std::min(lowest, entries_[k].priority);
    highest = std::max(highest, entries_[k].priority);
  }
  if (entries_.empty()) return;
  if (!by_id || int64_t{highest} - lowest >= 4096) {
    std::sort(entries_.begin(), entries_.end(), [&](const QueueEntry& a, const QueueEntry& b) {
      if (a.priority != b.priority) return a.priority > b.priority;
      const uint32_t ra = rank[static_cast<size_t>(a.user)];
      const uint32_t rb = rank[static_cast<size_t>(b.user)];
      if (ra != rb) return ra < rb;
      if (a.id != b.id) return a.id < b.id;
      return a.pos < b.pos;
    });
    return;
  }
  auto counting_sort = [&](size_t buckets, auto bucket_of) {
    std::vector<size_t> start(buckets + 1, 0);
    for (const QueueEntry& e : entries_) ++start[bucket_of(e) + 1];
    for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
    std::vector<QueueEntry> out(entries_.size());
    for (const QueueEntry& e : entries_) out[start[bucket_of(e)]++] = e;
    entries_ = std::move(out);
  };
  counting_sort(rank.size(), [&](const QueueEntry& e) { return size_t{rank[size_t(e.user)]}; });
  counting_sort(static_cast<size_t>(highest - lowest) + 1,
                [&](const QueueEntry& e) { return static_cast<size_t>(highest - e.priority); });
}

FairOrder::Key FairOrder::UserKey(const UserQueue& u) const {
  const QueueEntry& head = entries_[u.next];
  return Key{shares_.InQuota(u.user, asks_[head.shape]) ? 0 : 1, shares_.UserScore(u.user), u.user};
}

FairOrder::Key FairOrder::TeamKey(const TeamQueue& t) const {
  return Key{t.users.begin()->first.cls, shares_.TeamScore(t.team), t.team};
}

bool FairOrder::EnterLevel() {
  users_.clear();
  teams_.clear();
  order_.clear();
  if (level_end_ >= entries_.size()) return false;
  const size_t begin = level_end_;
  const int priority = entries_[begin].priority;
  size_t k = begin;
  while (k < entries_.size() && entries_[k].priority == priority) {
    const int user = entries_[k].user;
    const int team = shares_.TeamOf(user);
    if (teams_.empty() || teams_.back().team != team) teams_.push_back(TeamQueue{.team = team});
    UserQueue u{.user = user, .next = k};
    while (k < entries_.size() && entries_[k].priority == priority && entries_[k].user == user) ++k;
    u.end = k;
    u.key = UserKey(u);
    teams_.back().users.emplace(u.key, users_.size());
    users_.push_back(u);
  }
  level_end_ = k;
  for (size_t t = 0; t < teams_.size(); ++t) {
    teams_[t].key = TeamKey(teams_[t]);
    order_.emplace(teams_[t].key, t);
  }
  return true;
}

bool FairOrder::Next(QueueEntry* out) {
  while (order_.empty()) {
    if (!EnterLevel()) return false;
  }
  current_team_ = order_.begin()->second;
  const TeamQueue& team = teams_[current_team_];
  current_user_ = team.users.begin()->second;
  UserQueue& user = users_[current_user_];
  *out = entries_[user.next];
  started_ = true;
  return true;
}

void FairOrder::Done(bool admitted) {
  if (!started_) return;
  started_ = false;
  TeamQueue& team = teams_[current_team_];
  UserQueue& user = users_[current_user_];
  ++user.next;
  // Nothing admitted: no score moved. If the user's next job has the same key, the user stays first
  // in its team and the team first overall: nothing to re-key (a long queue that cannot start).
  if (!admitted && user.next < user.end && UserKey(user) == user.key) return;
  // Re-keyed entries keep their set nodes (extract, then insert): no allocation per job.
  auto team_node = order_.extract({team.key, current_team_});
  auto user_node = team.users.extract({user.key, current_user_});
  if (admitted && shares_.HasQuota(team.team)) {
    // What the team holds grew: a user whose next job fitted in the quota may no longer fit.
    // (Holdings only grow in a pass, so a job that would borrow never comes back within it.)
    std::vector<size_t> crossed;
    for (const auto& [key, index] : team.users) {
      if (key.cls == 0 && UserKey(users_[index]).cls != 0) crossed.push_back(index);
    }
    for (size_t index : crossed) {
      auto node = team.users.extract({users_[index].key, index});
      users_[index].key = UserKey(users_[index]);
      node.value().first = users_[index].key;
      team.users.insert(std::move(node));
    }
  }
  if (user.next < user.end) {
    user.key = UserKey(user);
    user_node.value().first = user.key;
    team.users.insert(std::move(user_node));
  }
  if (team.users.empty()) return;
  team.key = TeamKey(team);
  team_node.value().first = team.key;
  order_.insert(std::move(team_node));
}

}  // namespace berth::sched::internal
