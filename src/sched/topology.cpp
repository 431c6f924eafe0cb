#include "sched/topology.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace berth::sched::internal {
namespace {

// A node's label `key`, or nullptr. Nodes carry a few labels: a walk beats the map's search.
const std::string* LabelOf(const NodeView& node, const std::string& key) {
  if (node.labels.size() > 8) {
    auto it = node.labels.find(key);
    return it == node.labels.end() ? nullptr : &it->second;
  }
  for (const auto& [k, v] : node.labels) {
    if (k == key) return &v;
  }
  return nullptr;
}

// A domain's sort key where -1 (outside every domain) comes last.
int Last(int domain) { return domain < 0 ? std::numeric_limits<int>::max() : domain; }

}  // namespace

int Topology::PreferredOf(const JobRequest& job) const {
  return job.topology.preferred >= 0 ? job.topology.preferred : levels() - 1;
}

void Topology::Build() const {
  built_ = true;
  const size_t n = state_.size();
  domain_.assign(levels_.size(), std::vector<int>(n, -1));
  values_.assign(levels_.size(), {});
  // A node's path at level k: its values at levels 0..k ("" where it lacks a coarser one).
  std::vector<std::vector<std::string_view>> paths(n);
  for (size_t k = 0; k < levels_.size(); ++k) {
    std::map<std::vector<std::string_view>, int> ids;  // path -> first-seen id
    std::vector<int> first_seen(n, -1);
    std::vector<std::string_view> last_path;
    int last_id = -1;
    for (NodeIdx i = 0; i < n; ++i) {
      const std::string* value = LabelOf(state_.view(i), levels_[k]);
      paths[i].push_back(value == nullptr ? std::string_view() : std::string_view(*value));
      if (value == nullptr) continue;
      // Domains are usually runs of consecutive nodes: most cost no map lookup.
      if (last_id < 0 || paths[i] != last_path) {
        last_path = paths[i];
        last_id = ids.try_emplace(last_path, static_cast<int>(ids.size())).first->second;
      }
      first_seen[i] = last_id;
    }
    std::vector<int> renumber(ids.size());
    int next = 0;
    for (const auto& [path, id] : ids) {  // the map's order: by path, coarse values first
      renumber[static_cast<size_t>(id)] = next++;
      values_[k].emplace_back(path.back());
    }
    for (NodeIdx i = 0; i < n; ++i) {
      if (first_seen[i] >= 0) domain_[k][i] = renumber[static_cast<size_t>(first_seen[i])];
    }
  }
}

int Topology::DomainOf(int level, NodeIdx i) const {
  if (!built_) Build();
  return domain_[static_cast<size_t>(level)][i];
}

const std::string& Topology::ValueOf(int level, int domain) const {
  if (!built_) Build();
  return values_[static_cast<size_t>(level)][static_cast<size_t>(domain)];
}

std::vector<NodeIdx> Topology::Choose(const std::vector<FitOrder>& fits, size_t count,
                                      const JobRequest& job, std::string* why) const {
  const int required = RequiredOf(job);
  const int preferred = std::max(PreferredOf(job), required);
  // Candidates by required domain (one group when none is required), best fit first in each.
  std::unordered_map<int, std::vector<NodeIdx>> groups;
  for (const FitOrder& f : fits) {
    const int dom = required >= 0 ? DomainOf(required, f.node) : 0;
    if (dom >= 0) groups[dom].push_back(f.node);
  }
  struct Plan {
    size_t spans = 0;  // preferred domains used
    size_t size = 0;   // candidates in the required domain
    int domain = 0;
    std::vector<NodeIdx> nodes;
    bool Better(const Plan& o) const {
      return std::tie(spans, size, domain) < std::tie(o.spans, o.size, o.domain);
    }
  };
  std::optional<Plan> best;
  size_t most = 0;
  int most_domain = -1;
  for (const auto& [dom, members] : groups) {
    if (members.size() > most || (members.size() == most && dom < most_domain)) {
      most = members.size();
      most_domain = dom;
    }
    if (members.size() < count) continue;
    // Preferred domains in it, with their members (best fit first); a node outside every one is
    // a domain of its own.
    std::map<int, std::vector<NodeIdx>> by_pref;
    int alone = -2;
    for (NodeIdx i : members) {
      const int p = DomainOf(preferred, i);
      by_pref[p >= 0 ? p : alone--].push_back(i);
    }
    std::vector<const std::vector<NodeIdx>*> order;
    for (const auto& [p, nodes] : by_pref) order.push_back(&nodes);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto* a, const auto* b) { return a->size() > b->size(); });
    // The fewest domains: whole ones largest first, then for what is left the smallest domain
    // (not yet used) that holds it.
    Plan plan;
    plan.size = members.size();
    plan.domain = dom;
    size_t k = 0;
    while (plan.nodes.size() < count) {
      const size_t left = count - plan.nodes.size();
      size_t pick = k;
      for (size_t j = k; j < order.size() && order[j]->size() >= left; ++j) {
        if (order[j]->size() < order[pick]->size()) pick = j;  // ties: the first by value
      }
      if (order[pick]->size() < left) {
        plan.nodes.insert(plan.nodes.end(), order[k]->begin(), order[k]->end());
        ++k;
      } else {
        std::swap(order[k], order[pick]);
        plan.nodes.insert(plan.nodes.end(), order[k]->begin(),
                          order[k]->begin() + static_cast<std::ptrdiff_t>(left));
        ++k;
      }
      ++plan.spans;
    }
    if (!best || plan.Better(*best)) best = std::move(plan);
  }
  if (!best) {
    if (required < 0) return {};  // fewer candidates than nodes: the caller's reason
    *why =
        "at most " + std::to_string(most) + " fit under one now" +
        (most_domain >= 0 ? " (" + level_name(required) + " " + ValueOf(required, most_domain) + ")"
                          : "");
    return {};
  }
  RankOrder(best->nodes);
  return std::move(best->nodes);
}

void Topology::RankOrder(std::vector<NodeIdx>& nodes) const {
  if (levels_.empty()) return;
  std::stable_sort(nodes.begin(), nodes.end(), [&](NodeIdx a, NodeIdx b) {
    for (int k = 0; k < levels(); ++k) {
      const int x = Last(DomainOf(k, a));
      const int y = Last(DomainOf(k, b));
      if (x != y) return x < y;
    }
    return a < b;
  });
}

}  // namespace berth::sched::internal
