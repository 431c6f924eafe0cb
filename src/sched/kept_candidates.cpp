#include "sched/kept_candidates.h"

#include <algorithm>
#include <tuple>

namespace berth::sched::internal {

KeptCandidates::Key KeptCandidates::KeyOf(const Need& need, int preferred) {
  return {need.cpus, need.memory, need.type, need.milli, need.devices, need.fractional, preferred};
}

const KeptCandidates::Level& KeptCandidates::LevelOf(int level) {
  auto [it, added] = levels_.try_emplace(level);
  Level& l = it->second;
  if (!added) return l;
  int domains = topology_.domains(level);
  l.of.resize(nodes_);
  for (NodeIdx i = 0; i < nodes_; ++i) {
    const int d = topology_.DomainOf(level, i);
    l.of[i] = d >= 0 ? d : domains++;  // alone: a domain of its own, in node order
  }
  l.start.assign(static_cast<size_t>(domains) + 1, 0);
  for (int d : l.of) ++l.start[static_cast<size_t>(d) + 1];
  for (size_t d = 1; d < l.start.size(); ++d) l.start[d] += l.start[d - 1];
  l.nodes.resize(nodes_);
  std::vector<int> next(l.start.begin(), l.start.end() - 1);
  for (NodeIdx i = 0; i < nodes_; ++i) {
    l.nodes[static_cast<size_t>(next[static_cast<size_t>(l.of[i])]++)] = i;
  }
  return l;
}

const KeptCandidates::Nesting& KeptCandidates::NestingOf(int preferred, int required) {
  auto [it, added] = nestings_.try_emplace({preferred, required});
  Nesting& n = it->second;
  if (!added) return n;
  const Level& pref = LevelOf(preferred);
  const size_t domains = pref.start.size() - 1;
  const size_t outer = required >= 0 ? static_cast<size_t>(topology_.domains(required)) : 1;
  n.parent.resize(domains);
  n.start.assign(outer + 1, 0);
  std::vector<int> widest(outer, 0);  // per required domain: its largest preferred domain
  for (size_t p = 0; p < domains; ++p) {
    const NodeIdx first = pref.nodes[static_cast<size_t>(pref.start[p])];
    const int r = required >= 0 ? topology_.DomainOf(required, first) : 0;
    n.parent[p] = r;
    if (r < 0) continue;
    ++n.start[static_cast<size_t>(r) + 1];
    widest[static_cast<size_t>(r)] =
        std::max(widest[static_cast<size_t>(r)], pref.start[p + 1] - pref.start[p]);
  }
  for (size_t r = 1; r <= outer; ++r) n.start[r] += n.start[r - 1];
  n.children.resize(static_cast<size_t>(n.start[outer]));
  std::vector<int> next(n.start.begin(), n.start.end() - 1);
  for (size_t p = 0; p < domains; ++p) {
    if (const int r = n.parent[p]; r >= 0) {
      n.children[static_cast<size_t>(next[static_cast<size_t>(r)]++)] = static_cast<int>(p);
    }
  }
  n.offset.assign(outer + 1, 0);
  for (size_t r = 0; r < outer; ++r) n.offset[r + 1] = n.offset[r] + widest[r] + 1;
  return n;
}

KeptCandidates::Entry& KeptCandidates::EntryFor(const Key& key,
                                                const std::function<bool(NodeIdx)>& fits,
                                                const std::vector<NodeIdx>& changed,
                                                uint64_t epoch) {
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries_.end() && entries_.size() == kMaxEntries) {
    it = std::min_element(entries_.begin(), entries_.end(),
                          [](const Entry& a, const Entry& b) { return a.used < b.used; });
    it->epoch = epoch + 1;  // rebuilt below
  }
  if (it == entries_.end()) {
    it = entries_.emplace(entries_.end());
    it->epoch = epoch + 1;
  }
  Entry& e = *it;
  e.used = ++clock_;
  if (e.key == key && e.epoch == epoch) {
    for (size_t k = e.synced; k < changed.size(); ++k) Set(e, changed[k], fits(changed[k]));
    e.synced = changed.size();
    return e;
  }
  const Level& level = LevelOf(key.preferred);
  e.key = key;
  e.epoch = epoch;
  e.synced = changed.size();
  e.fits.assign(nodes_, 0);
  e.count.assign(level.start.size() - 1, 0);
  e.fitting = 0;
  e.sums.clear();
  for (NodeIdx i = 0; i < nodes_; ++i) {
    if (!fits(i)) continue;
    e.fits[i] = 1;
    ++e.count[static_cast<size_t>(level.of[i])];
    ++e.fitting;
  }
  return e;
}

KeptCandidates::Sums& KeptCandidates::SumsFor(Entry& entry, int required) {
  for (Sums& s : entry.sums) {
    if (s.required == required) return s;
  }
  Sums& s = entry.sums.emplace_back();
  s.required = required;
  s.nesting = &NestingOf(entry.key.preferred, required);
  const Nesting& n = *s.nesting;
  s.total.assign(n.offset.size() - 1, 0);
  s.hist.assign(static_cast<size_t>(n.offset.back()), 0);
  for (size_t p = 0; p < n.parent.size(); ++p) {
    const int r = n.parent[p];
    if (r < 0) continue;
    s.total[static_cast<size_t>(r)] += entry.count[p];
    ++s.hist[static_cast<size_t>(n.offset[static_cast<size_t>(r)] + entry.count[p])];
  }
  return s;
}

void KeptCandidates::Set(Entry& entry, NodeIdx i, bool fits) {
  if (static_cast<bool>(entry.fits[i]) == fits) return;
  entry.fits[i] = fits ? 1 : 0;
  const int p = levels_.at(entry.key.preferred).of[i];
  int& count = entry.count[static_cast<size_t>(p)];
  const int before = count;
  const int delta = fits ? 1 : -1;
  count += delta;
  entry.fitting += delta;
  for (Sums& s : entry.sums) {
    const int r = s.nesting->parent[static_cast<size_t>(p)];
    if (r < 0) continue;
    const int offset = s.nesting->offset[static_cast<size_t>(r)];
    s.total[static_cast<size_t>(r)] += delta;
    --s.hist[static_cast<size_t>(offset + before)];
    ++s.hist[static_cast<size_t>(offset + count)];
  }
}

size_t KeptCandidates::Plan(const int* hist, int width, size_t count, Takes* takes) {
  // Topology::Choose's rule read off the histogram: whole domains from the largest count down,
  // until one holds what is left; then the smallest that does.
  int top = width - 1;
  int used_top = 0;  // domains of count `top` taken whole
  while (top > 0 && hist[top] == 0) --top;
  size_t left = count;
  size_t spans = 0;
  while (top > 0) {
    if (static_cast<size_t>(top) >= left) {
      int v = static_cast<int>(left);
      while (hist[v] - (v == top ? used_top : 0) == 0) ++v;
      takes->emplace_back(v, static_cast<int>(left));
      return spans + 1;
    }
    takes->emplace_back(top, top);
    left -= static_cast<size_t>(top);
    ++spans;
    if (++used_top == hist[top]) {
      used_top = 0;
      do --top;
      while (top > 0 && hist[top] == 0);
    }
  }
  return 0;
}

std::vector<NodeIdx> KeptCandidates::Choose(const Key& key,
                                            const std::function<bool(NodeIdx)>& fits,
                                            const std::vector<NodeIdx>& changed, uint64_t epoch,
                                            size_t count, const JobRequest& job,
                                            const std::function<FitOrder(NodeIdx)>& order,
                                            Shortfall* shortfall) {
  Entry& e = EntryFor(key, fits, changed, epoch);
  if (static_cast<size_t>(e.fitting) < count) return {};  // the caller's reason
  const int required = Topology::RequiredOf(job);
  const Sums& s = SumsFor(e, required);
  const Nesting& n = *s.nesting;
  // The required domain spanning the fewest preferred ones, then holding the fewest that fit
  // (best fit), then the first by value.
  Takes takes;
  int best = -1;
  size_t best_spans = 0;
  int most = 0;
  int most_domain = -1;
  for (size_t r = 0; r < s.total.size(); ++r) {
    const int total = s.total[r];
    if (total > most) {
      most = total;
      most_domain = static_cast<int>(r);
    }
    if (static_cast<size_t>(total) < count) continue;
    if (best >= 0 && best_spans == 1 && total >= s.total[static_cast<size_t>(best)]) continue;
    takes.clear();
    const int offset = n.offset[r];
    const size_t spans =
        Plan(&s.hist[static_cast<size_t>(offset)], n.offset[r + 1] - offset, count, &takes);
    if (spans == 0) continue;
    if (best < 0 || std::tie(spans, total) < std::tie(best_spans, s.total[size_t(best)])) {
      best = static_cast<int>(r);
      best_spans = spans;
    }
  }
  if (best < 0) {
    if (required < 0) return {};
    topology_.Short(required, most, most_domain, shortfall);
    return {};
  }
  // Name the preferred domains taken: in value order, the first of each count wanted (whole ones
  // before the one partly taken).
  takes.clear();
  const int offset = n.offset[static_cast<size_t>(best)];
  Plan(&s.hist[static_cast<size_t>(offset)], n.offset[static_cast<size_t>(best) + 1] - offset,
       count, &takes);
  std::sort(takes.begin(), takes.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  std::vector<int> wanted(static_cast<size_t>(n.offset[static_cast<size_t>(best) + 1] - offset));
  for (const auto& [value, nodes] : takes) ++wanted[static_cast<size_t>(value)];
  const Level& level = levels_.at(key.preferred);
  std::vector<NodeIdx> chosen;
  std::vector<FitOrder> members;
  size_t left = takes.size();
  for (int k = n.start[static_cast<size_t>(best)];
       left > 0 && k < n.start[static_cast<size_t>(best) + 1]; ++k) {
    const int p = n.children[static_cast<size_t>(k)];
    const int c = e.count[static_cast<size_t>(p)];
    if (c == 0 || wanted[static_cast<size_t>(c)] == 0) continue;
    --wanted[static_cast<size_t>(c)];
    --left;
    auto take =
        std::find_if(takes.begin(), takes.end(), [&](const auto& t) { return t.first == c; });
    const size_t want = static_cast<size_t>(take->second);
    take->first = -1;  // used
    members.clear();
    for (int m = level.start[static_cast<size_t>(p)]; m < level.start[static_cast<size_t>(p) + 1];
         ++m) {
      const NodeIdx i = level.nodes[static_cast<size_t>(m)];
      if (e.fits[i]) members.push_back(order(i));
    }
    std::partial_sort(members.begin(), members.begin() + static_cast<std::ptrdiff_t>(want),
                      members.end());
    for (size_t t = 0; t < want; ++t) chosen.push_back(members[t].node);
  }
  topology_.RankOrder(chosen);
  return chosen;
}

}  // namespace berth::sched::internal
