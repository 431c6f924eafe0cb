#include "sched/topology.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace berth::sched::internal {
namespace {

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

int Topology::domains(int level) const {
  if (!built_) Build();
  return static_cast<int>(values_[static_cast<size_t>(level)].size());
}

const std::string& Topology::ValueOf(int level, int domain) const {
  if (!built_) Build();
  return values_[static_cast<size_t>(level)][static_cast<size_t>(domain)];
}

std::vector<NodeIdx> Topology::Choose(const std::vector<NodeIdx>& fitting, size_t count,
                                      const JobRequest& job,
                                      const std::function<FitOrder(NodeIdx)>& order,
                                      Shortfall* shortfall) const {
  if (!built_) Build();
  const int required = RequiredOf(job);
  const int preferred = std::max(PreferredOf(job), required);
  const std::vector<int>& pref_of = domain_[static_cast<size_t>(preferred)];
  // A preferred domain lies inside one required domain (domains are paths), so counting the
  // candidates per preferred domain says everything: per required domain, how many and how spread.
  // A candidate outside every preferred domain is a domain of its own (numbered after the real
  // ones); one outside every required domain is no candidate.
  const int real = static_cast<int>(values_[static_cast<size_t>(preferred)].size());
  std::vector<int>& counts = counts_;
  std::vector<int> used;       // the domains with a candidate
  std::vector<NodeIdx> first;  // a candidate of each (for its required domain)
  std::vector<NodeIdx> alone;
  auto tally = [&](int p, NodeIdx i) {
    if (static_cast<size_t>(p) >= counts.size()) counts.resize(static_cast<size_t>(p) + 1, 0);
    if (counts[static_cast<size_t>(p)]++ == 0) {
      used.push_back(p);
      first.push_back(i);
    }
  };
  for (NodeIdx i : fitting) {
    if (required >= 0 && DomainOf(required, i) < 0) continue;
    if (pref_of[i] < 0) {
      alone.push_back(i);
    } else {
      tally(pref_of[i], i);
    }
  }
  // Alone nodes numbered in node order (as KeptCandidates numbers them), not the order found.
  std::sort(alone.begin(), alone.end());
  for (size_t k = 0; k < alone.size(); ++k) tally(real + static_cast<int>(k), alone[k]);
  // By required domain, then most candidates first, then by value: one 64-bit key each (required
  // domain, then 2^21 - count, then preferred domain, 21 bits apiece), sorted as integers.
  constexpr uint64_t kBits = 21;
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  std::vector<uint64_t> by(used.size());
  for (size_t k = 0; k < used.size(); ++k) {
    const uint64_t req = required >= 0 ? static_cast<uint64_t>(DomainOf(required, first[k])) : 0;
    const uint64_t count_key = kMask - static_cast<uint64_t>(counts[static_cast<size_t>(used[k])]);
    by[k] = (req << (2 * kBits)) | (count_key << kBits) | static_cast<uint64_t>(used[k]);
  }
  std::sort(by.begin(), by.end());
  auto req_of = [&](uint64_t key) { return static_cast<int>(key >> (2 * kBits)); };
  auto count_of = [&](uint64_t key) { return static_cast<int>(kMask - ((key >> kBits) & kMask)); };
  auto domain_of = [&](uint64_t key) { return static_cast<int>(key & kMask); };
  struct Plan {
    size_t spans = 0;  // preferred domains used
    size_t size = 0;   // candidates in the required domain
    int domain = 0;
    std::vector<std::pair<int, size_t>> take;  // (preferred domain, how many of its nodes)
    bool Better(const Plan& o) const {
      return std::tie(spans, size, domain) < std::tie(o.spans, o.size, o.domain);
    }
  };
  std::optional<Plan> best;
  size_t most = 0;
  int most_domain = -1;
  for (size_t start = 0; start < by.size();) {
    size_t end = start;
    size_t total = 0;
    while (end < by.size() && req_of(by[end]) == req_of(by[start])) total += count_of(by[end++]);
    const int dom = req_of(by[start]);
    if (total > most) {
      most = total;
      most_domain = dom;
    }
    if (total >= count) {
      // The fewest domains: whole ones largest first, then for what is left the smallest domain
      // (not yet used) that holds it; ties by value.
      Plan plan;
      plan.size = total;
      plan.domain = dom;
      size_t got = 0;
      for (size_t k = start; got < count; ++k) {
        const size_t left = count - got;
        size_t pick = k;
        for (size_t j = k; j < end && static_cast<size_t>(count_of(by[j])) >= left; ++j) {
          if (count_of(by[j]) < count_of(by[pick])) pick = j;
        }
        const size_t n = std::min(left, static_cast<size_t>(count_of(by[pick])));
        plan.take.emplace_back(domain_of(by[pick]), n);
        std::swap(by[k], by[pick]);
        got += n;
        ++plan.spans;
      }
      if (!best || plan.Better(*best)) best = std::move(plan);
    }
    start = end;
  }
  if (!best) {
    for (int p : used) counts[static_cast<size_t>(p)] = 0;
    if (required < 0) return {};  // fewer candidates than nodes: the caller's reason
    Short(required, static_cast<int>(most), most_domain, shortfall);
    return {};
  }
  // The nodes: in each preferred domain taken, its best fits (`counts` now marks a taken domain
  // with its position in `take`, plus one).
  for (int p : used) counts[static_cast<size_t>(p)] = 0;
  const auto& take = best->take;
  for (size_t t = 0; t < take.size(); ++t) counts[static_cast<size_t>(take[t].first)] = int(t) + 1;
  std::vector<std::vector<FitOrder>> members(take.size());
  for (size_t k = 0; k < alone.size(); ++k) {
    if (const int t = counts[static_cast<size_t>(real) + k]; t > 0) {
      members[static_cast<size_t>(t - 1)].push_back(order(alone[k]));
    }
  }
  for (NodeIdx i : fitting) {
    const int p = pref_of[i];
    if (p < 0 || counts[static_cast<size_t>(p)] == 0) continue;
    if (required >= 0 && DomainOf(required, i) < 0) continue;
    members[static_cast<size_t>(counts[static_cast<size_t>(p)] - 1)].push_back(order(i));
  }
  for (const auto& [p, n] : take) counts[static_cast<size_t>(p)] = 0;
  std::vector<NodeIdx> nodes;
  for (size_t t = 0; t < take.size(); ++t) {
    std::vector<FitOrder>& m = members[t];
    const size_t n = take[t].second;
    std::partial_sort(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(n), m.end());
    for (size_t k = 0; k < n; ++k) nodes.push_back(m[k].node);
  }
  RankOrder(nodes);
  return nodes;
}

NodeIdx Topology::Pack(const std::vector<NodeIdx>& best_first) const {
  if (!built_) Build();
  if (!packing_) {
    packing_ = true;
    const size_t n = state_.size();
    busy_node_.assign(n, 0);
    busy_.assign(values_[0].size(), 0);
    for (NodeIdx i = 0; i < n; ++i) {
      const NodeView& v = state_.view(i);
      const bool idle = state_.cpus_free(i) >= v.cpus_total &&
                        state_.memory_free(i) >= v.memory_total &&
                        state_.free_all(i) >= static_cast<MilliGpu>(v.gpus.size()) * kMilliPerGpu;
      if (idle) continue;
      busy_node_[i] = 1;
      if (domain_[0][i] >= 0) ++busy_[static_cast<size_t>(domain_[0][i])];
    }
  }
  for (NodeIdx i : best_first) {
    const int dom = domain_[0][i];
    if (dom < 0 || busy_[static_cast<size_t>(dom)] > 0) return i;
  }
  return best_first.front();
}

void Topology::Took(NodeIdx i) {
  if (!packing_ || busy_node_[i]) return;
  busy_node_[i] = 1;
  if (domain_[0][i] >= 0) ++busy_[static_cast<size_t>(domain_[0][i])];
}

void Topology::Short(int required, int most, int domain, Shortfall* shortfall) const {
  shortfall->domain = domain;
  shortfall->why =
      "at most " + std::to_string(most) + " fit under one now" +
      (domain >= 0 ? " (" + level_name(required) + " " + ValueOf(required, domain) + ")" : "");
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
