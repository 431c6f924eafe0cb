#include "sched_testing.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "common/resources.h"
#include "sched/matching.h"

namespace berth::sched::testing {

NodeView MakeNode(const std::string& name, int cpus, int memory_gib, const std::string& gpu_type,
                  int gpus) {
  NodeView node;
  node.name = name;
  node.cpus_total = node.cpus_free = cpus * kMilliPerCpu;
  node.memory_total = node.memory_free = memory_gib * kGib;
  AddGpus(node, gpu_type, gpus);
  return node;
}

void AddGpus(NodeView& node, const std::string& type, int count) {
  int next = 0;
  for (const Device& d : node.gpus) next = std::max(next, d.index + 1);
  for (int i = 0; i < count; ++i) node.gpus.push_back({next + i, type, kMilliPerGpu});
}

void SetGpus(ResourceRequest& request, const std::string& gpus) {
  request.gpu_type.clear();
  request.gpu_milli = 0;
  if (gpus.empty()) return;
  const size_t colon = gpus.find(':');
  std::optional<int64_t> milli =
      ParseMilli(colon == std::string::npos ? "1" : gpus.substr(colon + 1));
  if (!milli) {
    std::fprintf(stderr, "bad GPU request in a test: %s\n", gpus.c_str());
    std::abort();
  }
  request.gpu_type = gpus.substr(0, colon);
  request.gpu_milli = *milli;
}

JobRequest MakeJob(JobId id, const std::string& gpus, int priority) {
  JobRequest job;
  job.id = id;
  job.priority = priority;
  SetGpus(job.per_node, gpus);
  return job;
}

NodeView& FindNode(Snapshot& snapshot, const std::string& name) {
  for (NodeView& n : snapshot.nodes) {
    if (n.name == name) return n;
  }
  std::fprintf(stderr, "no node %s in the test snapshot\n", name.c_str());
  std::abort();
}

namespace {

Device* FindDevice(NodeView& node, int index) {
  for (Device& d : node.gpus) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

// Adds `sign` times a job's share of one node to the node's free amounts. Returns "" or what went
// out of range.
std::string Adjust(NodeView& node, const ResourceRequest& request, const NodeGrant& grant,
                   int sign) {
  std::string problems;
  node.cpus_free += sign * request.cpus;
  node.memory_free += sign * request.memory;
  if (node.cpus_free < 0) problems += " cpus oversubscribed on " + node.name + ";";
  if (node.memory_free < 0) problems += " memory oversubscribed on " + node.name + ";";
  for (const GpuGrant& g : grant.gpus) {
    Device* d = FindDevice(node, g.index);
    if (d == nullptr) {
      problems += " " + node.name + " has no GPU " + std::to_string(g.index) + ";";
      continue;
    }
    d->free += sign * g.milli;
    if (d->free < 0 || d->free > kMilliPerGpu) {
      problems += " GPU " + std::to_string(g.index) + " on " + node.name + " oversubscribed;";
    }
  }
  return problems;
}

}  // namespace

std::string Hold(Snapshot& snapshot, const RunningJob& job) {
  std::string problems;
  for (const NodeGrant& grant : job.placement) {
    problems += Adjust(FindNode(snapshot, grant.node), job.per_node, grant, -1);
  }
  snapshot.running.push_back(std::make_shared<const RunningJob>(job));
  return problems;
}

namespace {

std::string TeamOf(const Snapshot& snapshot, const std::string& user) {
  for (const UserView& u : snapshot.users) {
    if (u.name == user) return u.team;
  }
  return "";
}

RunningJob Started(const JobRequest& job, const Placement& placement, TimeMs now) {
  RunningJob running;
  running.id = job.id;
  running.user = job.user;
  running.priority = job.priority;
  running.per_node = job.per_node;
  running.exclusive = job.exclusive;
  running.placement = placement;
  running.started_at = now;
  running.time_limit = job.time_limit;
  return running;
}

}  // namespace

std::vector<JobId> Apply(Snapshot& snapshot, const PassResult& result, PreemptMode mode) {
  auto take_pending = [&](JobId id) -> std::optional<JobRequest> {
    auto it = std::find_if(snapshot.pending.begin(), snapshot.pending.end(),
                           [&](const JobRequest& j) { return j.id == id; });
    if (it == snapshot.pending.end()) return std::nullopt;
    JobRequest job = *it;
    snapshot.pending.erase(it);
    return job;
  };
  for (const PlaceDecision& d : result.placements) {
    if (std::optional<JobRequest> job = take_pending(d.job)) {
      Hold(snapshot, Started(*job, d.placement, snapshot.now));
    }
  }
  std::vector<JobId> requeued;
  for (const PreemptDecision& d : result.preemptions) {
    if (mode == PreemptMode::kStop) {
      for (auto& r : snapshot.running) {
        if (std::find(d.victims.begin(), d.victims.end(), r->id) != d.victims.end()) {
          auto stopping = std::make_shared<RunningJob>(*r);
          stopping->stopping = true;
          r = std::move(stopping);
        }
      }
      continue;
    }
    std::optional<JobRequest> preemptor = take_pending(d.preemptor);
    if (!preemptor) continue;
    std::vector<JobId> gone = d.victims;
    gone.insert(gone.end(), d.waits_for.begin(), d.waits_for.end());
    for (JobId id : gone) {
      auto it = std::find_if(snapshot.running.begin(), snapshot.running.end(),
                             [&](const auto& r) { return r->id == id; });
      if (it == snapshot.running.end()) continue;
      const RunningJob& was = **it;
      JobRequest again;
      again.id = was.id;
      again.user = was.user;
      again.priority = was.priority;
      again.num_nodes = static_cast<int>(was.placement.size());
      again.per_node = was.per_node;
      again.exclusive = was.exclusive;
      again.submitted_at = snapshot.now;
      again.time_limit = was.time_limit;
      Finish(snapshot, id);
      snapshot.pending.push_back(again);
      requeued.push_back(id);
    }
    Hold(snapshot, Started(*preemptor, d.placement, snapshot.now));
  }
  return requeued;
}

bool Finish(Snapshot& snapshot, JobId id) {
  auto it = std::find_if(snapshot.running.begin(), snapshot.running.end(),
                         [&](const auto& j) { return j->id == id; });
  if (it == snapshot.running.end()) return false;
  for (const NodeGrant& grant : (*it)->placement) {
    Adjust(FindNode(snapshot, grant.node), (*it)->per_node, grant, +1);
  }
  snapshot.running.erase(it);
  return true;
}

std::string FormatPlacement(const Placement& placement) {
  std::string out;
  for (const NodeGrant& grant : placement) {
    if (!out.empty()) out += " and ";
    out += grant.node;
    if (grant.gpus.empty()) continue;
    out += " gpus=";
    for (size_t i = 0; i < grant.gpus.size(); ++i) {
      if (i) out += ",";
      out += std::to_string(grant.gpus[i].index);
      if (grant.gpus[i].milli != kMilliPerGpu) out += ":" + FormatMilli(grant.gpus[i].milli);
    }
  }
  return out;
}

std::vector<std::string> FormatDecisions(const PassResult& result) {
  std::vector<std::string> lines;
  for (const PlaceDecision& d : result.placements) {
    lines.push_back("place " + std::to_string(d.job) + " on " + FormatPlacement(d.placement));
  }
  auto ids = [](const std::vector<JobId>& list) {
    std::string out;
    for (JobId id : list) out += (out.empty() ? "" : ",") + std::to_string(id);
    return out;
  };
  for (const PreemptDecision& d : result.preemptions) {
    lines.push_back((d.reclaim ? "reclaim " : "preempt ") + std::to_string(d.preemptor) +
                    " victims=" + ids(d.victims) + " on " + FormatPlacement(d.placement) +
                    (d.waits_for.empty() ? "" : " waits_for=" + ids(d.waits_for)));
  }
  for (const HoldDecision& d : result.holds) {
    lines.push_back((d.reclaim ? "hold (reclaim) " : "hold ") + std::to_string(d.job) + " on " +
                    FormatPlacement(d.placement) + " waits_for=" + ids(d.waits_for));
  }
  for (const auto& [id, reason] : result.waiting) {
    lines.push_back("wait " + std::to_string(id) + ": " + reason);
  }
  return lines;
}

std::string FormatNode(const NodeView& node) {
  std::string out = node.name + ": cpus " + FormatMilli(node.cpus_free) + "/" +
                    FormatMilli(node.cpus_total) + " free, mem " + FormatMib(node.memory_free) +
                    "/" + FormatMib(node.memory_total) + " free";
  std::vector<std::string> types;
  for (const Device& d : node.gpus) {
    if (std::find(types.begin(), types.end(), d.type) == types.end()) types.push_back(d.type);
  }
  for (const std::string& type : types) {
    std::vector<const Device*> devices;
    for (const Device& d : node.gpus) {
      if (d.type == type) devices.push_back(&d);
    }
    std::sort(devices.begin(), devices.end(),
              [](const Device* a, const Device* b) { return a->index < b->index; });
    out += ", " + type + " [";
    for (size_t i = 0; i < devices.size(); ++i)
      out += (i ? " " : "") + FormatMilli(devices[i]->free);
    out += "]";
  }
  if (!node.schedulable) out += " (draining)";
  return out;
}

std::vector<std::string> CheckInvariants(const Snapshot& snapshot, const PassResult& result) {
  std::vector<std::string> broken;
  std::map<JobId, const JobRequest*> pending;
  for (const JobRequest& j : snapshot.pending) pending[j.id] = &j;
  std::map<JobId, const RunningJob*> running;
  for (const auto& r : snapshot.running) running[r->id] = r.get();
  auto find_node = [](Snapshot& s, const std::string& name) -> NodeView* {
    auto it = std::find_if(s.nodes.begin(), s.nodes.end(),
                           [&](const NodeView& n) { return n.name == name; });
    return it == s.nodes.end() ? nullptr : &*it;
  };
  auto label_of = [&](const std::string& node,
                      const std::string& key) -> std::optional<std::string> {
    for (const NodeView& n : snapshot.nodes) {
      if (n.name != node) continue;
      auto it = n.labels.find(key);
      if (it != n.labels.end()) return it->second;
    }
    return std::nullopt;
  };

  // `after` is the cluster as the pass leaves it: placements taken while every victim still holds
  // its resources, then the victims gone and the preemptors in.
  Snapshot after = snapshot;
  std::set<JobId> decided;
  // Checks one job's placement and takes it from `after`.
  auto check = [&](JobId id, const Placement& placement, bool preemptor) {
    const std::string job = "job " + std::to_string(id);
    auto it = pending.find(id);
    if (it == pending.end()) {
      broken.push_back(job + (preemptor ? " preempts" : " placed") + " but not pending");
      return;
    }
    if (!decided.insert(id).second) broken.push_back(job + " decided twice");
    if (!preemptor && result.waiting.count(id)) broken.push_back(job + " both placed and waiting");
    if (preemptor && !result.waiting.count(id)) broken.push_back(job + " waits without a reason");
    const JobRequest& req = *it->second;
    if (placement.size() != static_cast<size_t>(req.num_nodes)) {
      broken.push_back(job + " got " + std::to_string(placement.size()) + " nodes");
    }
    std::set<std::string> names;
    std::optional<std::string> domain;
    for (size_t rank = 0; rank < placement.size(); ++rank) {
      const NodeGrant& grant = placement[rank];
      if (!names.insert(grant.node).second) broken.push_back(job + " got " + grant.node + " twice");
      if (grant.rank != static_cast<int>(rank)) broken.push_back(job + " ranks out of order");
      NodeView* node = find_node(after, grant.node);
      if (node == nullptr) {
        broken.push_back(job + " placed on unknown node " + grant.node);
        continue;
      }
      if (!node->schedulable) broken.push_back(job + " placed on unschedulable " + grant.node);
      if (!InPoolAndSelector(*node, req)) broken.push_back(job + " outside its pool/selector");
      if (static_cast<int>(grant.gpus.size()) != req.per_node.gpu_devices()) {
        broken.push_back(job + " got " + std::to_string(grant.gpus.size()) + " GPUs on " +
                         grant.node);
      }
      for (const GpuGrant& g : grant.gpus) {
        const MilliGpu want = req.per_node.fractional_gpu() ? req.per_node.gpu_milli : kMilliPerGpu;
        if (g.milli != want) broken.push_back(job + " got a wrong GPU share");
        for (const Device& dev : node->gpus) {
          if (dev.index == g.index && dev.type != req.per_node.gpu_type) {
            broken.push_back(job + " got a " + dev.type + " instead of " + req.per_node.gpu_type);
          }
        }
      }
      if (!req.exclusive.empty()) {
        auto label = node->labels.find(req.exclusive);
        if (label == node->labels.end()) {
          broken.push_back(job + " exclusive on unlabelled " + grant.node);
        } else if (domain && *domain != label->second) {
          broken.push_back(job + " spans two '" + req.exclusive + "' domains");
        } else {
          domain = label->second;
        }
      }
      std::string problems = Adjust(*node, req.per_node, grant, -1);
      if (!problems.empty()) broken.push_back(job + ":" + problems);
    }
  };
  for (const PlaceDecision& d : result.placements) check(d.job, d.placement, false);

  // The resources of victims (and of stopping jobs waited for) are the waiting job's for the rest
  // of the pass, even what it does not use: nothing on any node becomes free for later decisions.
  auto keep_held = [&](const std::vector<NodeView>& before) {
    for (size_t k = 0; k < after.nodes.size(); ++k) {
      NodeView& n = after.nodes[k];
      n.cpus_free = std::min(n.cpus_free, before[k].cpus_free);
      n.memory_free = std::min(n.memory_free, before[k].memory_free);
      for (size_t g = 0; g < n.gpus.size(); ++g) {
        n.gpus[g].free = std::min(n.gpus[g].free, before[k].gpus[g].free);
      }
    }
  };
  std::set<JobId> gone;  // victims and the stopping jobs preemptors wait for
  // Holds take what is free and what stopping jobs give back, never what victims hold.
  for (const HoldDecision& d : result.holds) {
    const std::string job = "job " + std::to_string(d.job);
    auto it = pending.find(d.job);
    const int priority = it == pending.end() ? 0 : it->second->priority;
    if (d.waits_for.empty()) broken.push_back(job + " holds resources but waits for nobody");
    const std::vector<NodeView> before = after.nodes;
    for (JobId id : d.waits_for) {
      const std::string who = "job " + std::to_string(id);
      auto r = running.find(id);
      if (r == running.end() || !r->second->stopping ||
          (!d.reclaim && r->second->priority >= priority)) {
        broken.push_back(who + " waited for by " + job + " but not a stopping lower-priority job");
        continue;
      }
      if (!gone.insert(id).second) broken.push_back(who + " waited for twice");
      for (const NodeGrant& g : r->second->placement) {
        if (NodeView* n = find_node(after, g.node)) Adjust(*n, r->second->per_node, g, +1);
      }
    }
    check(d.job, d.placement, true);
    keep_held(before);
  }
  for (const PreemptDecision& d : result.preemptions) {
    const std::string job = "job " + std::to_string(d.preemptor);
    auto preemptor = pending.find(d.preemptor);
    const int priority = preemptor == pending.end() ? 0 : preemptor->second->priority;
    std::optional<std::string> preemptor_team;
    if (preemptor != pending.end()) preemptor_team = TeamOf(snapshot, preemptor->second->user);
    const std::string* req_team = preemptor_team ? &*preemptor_team : nullptr;
    std::vector<const RunningJob*> leaving;
    for (int pass = 0; pass < 2; ++pass) {
      const bool victims = pass == 0;
      for (JobId id : victims ? d.victims : d.waits_for) {
        const std::string who = "job " + std::to_string(id);
        auto it = running.find(id);
        if (it == running.end()) {
          broken.push_back(who + " evicted by " + job + " but not running");
          continue;
        }
        const RunningJob& r = *it->second;
        if (r.stopping != !victims) {
          broken.push_back(who +
                           (victims ? " is stopping, yet a victim of "
                                    : " is not stopping, yet waited for by ") +
                           job);
        }
        if (d.reclaim) {
          // A reclaim evicts other teams' work, of any priority.
          if (req_team != nullptr && TeamOf(snapshot, r.user) == *req_team) {
            broken.push_back(who + " of the same team reclaimed by " + job);
          }
        } else if (r.priority >= priority) {
          broken.push_back(who + " (priority " + std::to_string(r.priority) + ") evicted by " +
                           job + " (priority " + std::to_string(priority) + ")");
        }
        if (!gone.insert(id).second) broken.push_back(who + " evicted twice");
        leaving.push_back(&r);
      }
    }
    if (d.victims.empty()) broken.push_back(job + " preempts nobody");
    // Every victim is needed: the placement uses what it holds, or it holds (or runs in) a domain
    // the preemptor enters.
    const JobRequest* req = preemptor == pending.end() ? nullptr : preemptor->second;
    for (const RunningJob* v : leaving) {
      if (v->stopping || req == nullptr) continue;
      Snapshot trial = after;
      for (const RunningJob* other : leaving) {
        if (other == v) continue;
        for (const NodeGrant& g : other->placement) {
          if (NodeView* n = find_node(trial, g.node)) Adjust(*n, other->per_node, g, +1);
        }
      }
      bool needed = false;
      for (const NodeGrant& g : d.placement) {
        NodeView* n = find_node(trial, g.node);
        if (n != nullptr && !Adjust(*n, req->per_node, g, -1).empty()) needed = true;
      }
      auto shares_domain = [&](const std::string& key, const Placement& a, const Placement& b) {
        for (const NodeGrant& x : a) {
          std::optional<std::string> value = label_of(x.node, key);
          if (!value) continue;
          for (const NodeGrant& y : b) {
            if (label_of(y.node, key) == value) return true;
          }
        }
        return false;
      };
      if (!v->exclusive.empty() && shares_domain(v->exclusive, v->placement, d.placement)) {
        needed = true;
      }
      if (!req->exclusive.empty() && shares_domain(req->exclusive, d.placement, v->placement)) {
        needed = true;
      }
      if (!needed) {
        broken.push_back("job " + std::to_string(v->id) + " evicted by " + job + " but not needed");
      }
    }
    const std::vector<NodeView> before = after.nodes;
    for (const RunningJob* r : leaving) {
      for (const NodeGrant& g : r->placement) {
        if (NodeView* n = find_node(after, g.node)) Adjust(*n, r->per_node, g, +1);
      }
    }
    check(d.preemptor, d.placement, true);
    keep_held(before);
  }
  for (const JobRequest& j : snapshot.pending) {
    if (!decided.count(j.id) && !result.waiting.count(j.id)) {
      broken.push_back("job " + std::to_string(j.id) + " neither placed nor waiting");
    }
  }

  // Exclusivity, in the cluster the pass leaves: no other job on a node of a domain an exclusive
  // job holds, where at least one of the two is new.
  struct Holder {
    JobId id;
    std::string exclusive;
    const Placement* placement;
    bool is_new;
  };
  std::vector<Holder> holders;
  for (const auto& r : snapshot.running) {
    if (!gone.count(r->id)) holders.push_back({r->id, r->exclusive, &r->placement, false});
  }
  for (const PlaceDecision& d : result.placements) {
    if (auto it = pending.find(d.job); it != pending.end()) {
      holders.push_back({d.job, it->second->exclusive, &d.placement, true});
    }
  }
  for (const PreemptDecision& d : result.preemptions) {
    if (auto it = pending.find(d.preemptor); it != pending.end()) {
      holders.push_back({d.preemptor, it->second->exclusive, &d.placement, true});
    }
  }
  for (const HoldDecision& d : result.holds) {
    if (auto it = pending.find(d.job); it != pending.end()) {
      holders.push_back({d.job, it->second->exclusive, &d.placement, true});
    }
  }
  for (const Holder& e : holders) {
    if (e.exclusive.empty() || e.placement->empty()) continue;
    std::optional<std::string> value = label_of(e.placement->front().node, e.exclusive);
    if (!value) continue;
    for (const Holder& other : holders) {
      if (other.id == e.id || (!e.is_new && !other.is_new)) continue;
      for (const NodeGrant& g : *other.placement) {
        if (label_of(g.node, e.exclusive) == value) {
          broken.push_back("job " + std::to_string(other.id) + " on " + g.node + " inside '" +
                           e.exclusive + "=" + *value + "' held by job " + std::to_string(e.id));
        }
      }
    }
  }
  return broken;
}

PassResult CheckedPass(const Snapshot& snapshot, const Config& config) {
  PassResult result = Schedule(snapshot, config);
  EXPECT_THAT(CheckInvariants(snapshot, result), ::testing::IsEmpty());
  return result;
}

}  // namespace berth::sched::testing
