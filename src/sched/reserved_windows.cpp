// ReservedWindows (reserved_windows.h) and PickReservedNodes (scheduler.h).
#include "sched/reserved_windows.h"

#include <algorithm>
#include <map>
#include <set>

#include "sched/describe.h"
#include "sched/scheduler.h"

namespace berth::sched {
namespace internal {
namespace {

// "2026-12-03T14:00:00Z" (whole seconds: windows start and end on them).
std::string At(TimeMs t) {
  std::string text = FormatRfc3339(t);
  if (text.size() > 5 && text.compare(text.size() - 5, 5, ".000Z") == 0) {
    text.erase(text.size() - 5, 4);
  }
  return text;
}

}  // namespace

ReservedWindows::ReservedWindows(const Snapshot& snapshot, const NodeState& state,
                                 const Shares& shares)
    : snapshot_(snapshot), state_(state), shares_(shares) {
  if (snapshot.reserved.empty()) return;
  on_node_.assign(state.size(), OnNode{});
  for (const ReservedWindow& view : snapshot.reserved) {
    const int w = static_cast<int>(windows_.size());
    Window& window = windows_.emplace_back();
    window.view = &view;
    if (!view.team.empty()) {
      auto it = std::find(teams_.begin(), teams_.end(), view.team);
      window.team = static_cast<int>(it - teams_.begin());
      if (it == teams_.end()) teams_.push_back(view.team);
    }
    if (view.all_nodes) {
      for (NodeIdx i = 0; i < state.size(); ++i) window.nodes.push_back(i);
    } else {
      for (const std::string& name : view.nodes) {
        if (NodeIdx i = state.Find(name); i != kNoNode) window.nodes.push_back(i);
      }
    }
    const bool active = view.start <= snapshot.now && snapshot.now < view.end;
    if (active && window.team >= 0) {
      team_in_force_.resize(teams_.size(), 0);
      team_in_force_[static_cast<size_t>(window.team)] = 1;
    }
    for (NodeIdx i : window.nodes) {
      OnNode& on = on_node_[i];
      if (active) {
        on.active = w;
      } else if (view.start > snapshot.now &&
                 (on.next < 0 || view.start < windows_[static_cast<size_t>(on.next)].view->start)) {
        on.next = w;
      }
    }
  }
}

const ReservedWindows::Member& ReservedWindows::MemberOf(const JobRequest& job) const {
  if (memo_.request == &job && memo_.job == job.id) return memo_;
  return Membership(job);
}

const ReservedWindows::Member& ReservedWindows::Membership(const JobRequest& job) const {
  memo_ = Member{};
  memo_.request = &job;
  memo_.job = job.id;
  if (!job.reservation.empty()) {
    for (size_t w = 0; w < windows_.size(); ++w) {
      const ReservedWindow& v = *windows_[w].view;
      if (v.name != job.reservation) continue;
      memo_.window = static_cast<int>(w);
      const bool listed = std::find(v.users.begin(), v.users.end(), job.user) != v.users.end();
      memo_.denied = !v.users.empty() && !listed;
      break;
    }
  }
  if (!teams_.empty()) {
    const int user = shares_.UserIndex(job.user);
    const std::string& team = shares_.TeamName(shares_.TeamOf(user));
    auto it = std::find(teams_.begin(), teams_.end(), team);
    if (it != teams_.end()) memo_.team = static_cast<int>(it - teams_.begin());
  }
  // A team's reservation admits its users' jobs that name it, whatever its user list says.
  if (memo_.denied && memo_.team >= 0 &&
      windows_[static_cast<size_t>(memo_.window)].team == memo_.team) {
    memo_.denied = false;
  }
  return memo_;
}

bool ReservedWindows::MemberInForce(const JobRequest& job) const {
  if (windows_.empty()) return false;
  const Member& m = MemberOf(job);
  if (m.window >= 0) {
    const ReservedWindow& v = *windows_[static_cast<size_t>(m.window)].view;
    return !m.denied && !v.maintenance && v.start <= snapshot_.now && snapshot_.now < v.end;
  }
  return m.team >= 0 && static_cast<size_t>(m.team) < team_in_force_.size() &&
         team_in_force_[static_cast<size_t>(m.team)] != 0;
}

bool ReservedWindows::Admits(int window, const Member& m) const {
  const Window& w = windows_[static_cast<size_t>(window)];
  if (w.view->maintenance) return false;
  return (m.window == window && !m.denied) || (m.team >= 0 && m.team == w.team);
}

bool ReservedWindows::Blocks(NodeIdx i, const JobRequest& job) const {
  if (windows_.empty()) return false;
  const Member& m = MemberOf(job);
  const OnNode& on = on_node_[i];
  if (m.window >= 0 && (m.denied || on.active != m.window)) return true;
  if (on.active >= 0 && !Admits(on.active, m)) return true;
  if (on.next < 0) return false;
  const TimeMs start = windows_[static_cast<size_t>(on.next)].view->start;
  return !(job.time_limit && snapshot_.now + *job.time_limit <= start);
}

std::string ReservedWindows::NotInForce(const JobRequest& job) const {
  if (windows_.empty() || job.reservation.empty()) return "";
  const Member& m = MemberOf(job);
  if (m.window < 0) return "";
  const ReservedWindow& v = *windows_[static_cast<size_t>(m.window)].view;
  if (m.denied) {
    return "waiting: user " + (job.user.empty() ? std::string("(anonymous)") : job.user) +
           " may not use reservation '" + v.name + "' (its users: " + ListNames(v.users) + ")";
  }
  if (v.maintenance) return "waiting: reservation '" + v.name + "' is a maintenance window";
  if (snapshot_.now < v.start) {
    return "waiting for reservation '" + v.name + "', which starts at " + At(v.start) + " (in " +
           FormatDuration(v.start - snapshot_.now) + ")";
  }
  return "";
}

std::string ReservedWindows::Names(const std::vector<NodeIdx>& nodes) const {
  std::vector<std::string> names;
  for (NodeIdx i : nodes) {
    if (names.size() == 4) break;
    names.push_back(state_.name(i));
  }
  return ListNames(names) + (nodes.size() == 1 ? " is" : " are");
}

std::string ReservedWindows::Reason(const JobRequest& job,
                                    const std::vector<NodeIdx>& blocked) const {
  const Member& m = MemberOf(job);
  if (m.window >= 0) {
    const Window& w = windows_[static_cast<size_t>(m.window)];
    return "waiting for resources in reservation '" + w.view->name + "': its " +
           CountNodes(static_cast<int>(w.nodes.size())) + " have not enough free for " +
           DescribeRequest(job.per_node) + " on " + CountNodes(job.num_nodes) + " (it ends at " +
           At(w.view->end) + ")";
  }
  const OnNode& on = on_node_[blocked.front()];
  if (on.active >= 0 && !Admits(on.active, m)) {
    const ReservedWindow& v = *windows_[static_cast<size_t>(on.active)].view;
    if (v.maintenance) {
      return "waiting: " + Names(blocked) + " in maintenance window '" + v.name + "' until " +
             At(v.end);
    }
    const std::string whose = !v.team.empty()   ? "team " + v.team
                              : v.users.empty() ? std::string("its jobs")
                                                : "users " + ListNames(v.users);
    return "waiting: " + Names(blocked) + " reserved by '" + v.name + "' (for " + whose +
           ") until " + At(v.end);
  }
  const ReservedWindow& v = *windows_[static_cast<size_t>(on.next)].view;
  return "waiting: " + Names(blocked) + " reserved by '" + v.name + "' from " + At(v.start) +
         " (in " + FormatDuration(v.start - snapshot_.now) +
         "); only a job whose time_limit ends by then may start there" +
         (job.time_limit ? "" : " (this job has no time_limit)");
}

int ReservedWindows::ShapeKey(const JobRequest& job) const {
  if (windows_.empty()) return -1;
  const Member& m = MemberOf(job);
  if (m.window >= 0) return m.denied ? -2 : m.window;
  return m.team >= 0 ? (1 << 24) + m.team : -1;
}

}  // namespace internal

namespace {

int GpusOf(const NodeView& node, const std::string& type) {
  return static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(),
                                        [&](const Device& d) { return d.type == type; }));
}

// The fewest of `candidates` (by index into nodes) whose GPUs reach `count`: most GPUs first.
std::vector<size_t> Fewest(const std::vector<NodeView>& nodes, std::vector<size_t> candidates,
                           const std::string& type, int count) {
  std::sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
    const int ga = GpusOf(nodes[a], type), gb = GpusOf(nodes[b], type);
    return ga != gb ? ga > gb : nodes[a].name < nodes[b].name;
  });
  std::vector<size_t> out;
  int have = 0;
  for (size_t k : candidates) {
    if (have >= count) break;
    out.push_back(k);
    have += GpusOf(nodes[k], type);
  }
  return have >= count ? out : std::vector<size_t>{};
}

}  // namespace

std::vector<std::string> PickReservedNodes(const std::vector<NodeView>& nodes,
                                           const std::string& type, int count,
                                           const std::string& pool,
                                           const std::vector<std::string>& topology_levels,
                                           const std::vector<std::string>& excluded,
                                           std::string* why) {
  const std::set<std::string> out_of(excluded.begin(), excluded.end());
  std::vector<size_t> candidates;
  int total = 0;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const NodeView& n = nodes[k];
    if ((!pool.empty() && n.pool != pool) || out_of.count(n.name) || GpusOf(n, type) == 0) {
      continue;
    }
    candidates.push_back(k);
    total += GpusOf(n, type);
  }
  if (total < count) {
    *why = "only " + std::to_string(total) + " " + type + " GPUs on nodes free of other " +
           "reservations then" + (pool.empty() ? "" : " in pool '" + pool + "'") + " (" +
           std::to_string(count) + " asked)";
    return {};
  }
  std::vector<size_t> chosen;
  // Finest level first: the domain with the fewest GPUs of the type that is still enough.
  for (auto level = topology_levels.rbegin(); level != topology_levels.rend() && chosen.empty();
       ++level) {
    std::map<std::string, std::vector<size_t>> domains;
    for (size_t k : candidates) {
      auto label = nodes[k].labels.find(*level);
      if (label != nodes[k].labels.end()) domains[label->second].push_back(k);
    }
    int best_total = 0;
    for (const auto& [value, members] : domains) {
      int sum = 0;
      for (size_t k : members) sum += GpusOf(nodes[k], type);
      if (sum < count || (!chosen.empty() && sum >= best_total)) continue;
      chosen = Fewest(nodes, members, type, count);
      best_total = sum;
    }
  }
  if (chosen.empty()) chosen = Fewest(nodes, candidates, type, count);
  std::vector<std::string> names;
  for (size_t k : chosen) names.push_back(nodes[k].name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace berth::sched
