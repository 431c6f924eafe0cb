#include "sched_testing.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "common/resources.h"
#include "sched/node_fit.h"

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
  snapshot.running.push_back(job);
  return problems;
}

void Apply(Snapshot& snapshot, const PassResult& result) {
  for (const PlaceDecision& d : result.placements) {
    auto it = std::find_if(snapshot.pending.begin(), snapshot.pending.end(),
                           [&](const JobRequest& j) { return j.id == d.job; });
    if (it == snapshot.pending.end()) continue;
    RunningJob running;
    running.id = it->id;
    running.priority = it->priority;
    running.per_node = it->per_node;
    running.exclusive = it->exclusive;
    running.placement = d.placement;
    running.started_at = snapshot.now;
    running.time_limit = it->time_limit;
    snapshot.pending.erase(it);
    Hold(snapshot, running);
  }
}

bool Finish(Snapshot& snapshot, JobId id) {
  auto it = std::find_if(snapshot.running.begin(), snapshot.running.end(),
                         [&](const RunningJob& j) { return j.id == id; });
  if (it == snapshot.running.end()) return false;
  for (const NodeGrant& grant : it->placement) {
    Adjust(FindNode(snapshot, grant.node), it->per_node, grant, +1);
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

  Snapshot after = snapshot;
  std::set<JobId> placed;
  for (const PlaceDecision& d : result.placements) {
    const std::string job = "job " + std::to_string(d.job);
    auto it = pending.find(d.job);
    if (it == pending.end()) {
      broken.push_back(job + " placed but not pending");
      continue;
    }
    if (!placed.insert(d.job).second) broken.push_back(job + " placed twice");
    if (result.waiting.count(d.job)) broken.push_back(job + " both placed and waiting");
    const JobRequest& req = *it->second;
    if (d.placement.size() != static_cast<size_t>(req.num_nodes)) {
      broken.push_back(job + " got " + std::to_string(d.placement.size()) + " nodes");
    }
    std::set<std::string> names;
    std::optional<std::string> domain;
    for (size_t rank = 0; rank < d.placement.size(); ++rank) {
      const NodeGrant& grant = d.placement[rank];
      if (!names.insert(grant.node).second) broken.push_back(job + " got " + grant.node + " twice");
      if (grant.rank != static_cast<int>(rank)) broken.push_back(job + " ranks out of order");
      auto node = std::find_if(after.nodes.begin(), after.nodes.end(),
                               [&](const NodeView& n) { return n.name == grant.node; });
      if (node == after.nodes.end()) {
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
  }
  for (const JobRequest& j : snapshot.pending) {
    if (!placed.count(j.id) && !result.waiting.count(j.id)) {
      broken.push_back("job " + std::to_string(j.id) + " neither placed nor waiting");
    }
  }

  // Exclusivity: no other job, running or just placed, on a node of a domain an exclusive job
  // holds, where at least one of the two was placed in this pass.
  struct Holder {
    JobId id;
    std::string exclusive;
    const Placement* placement;
    bool is_new;
  };
  std::vector<Holder> holders;
  for (const RunningJob& r : snapshot.running) {
    holders.push_back({r.id, r.exclusive, &r.placement, false});
  }
  for (const PlaceDecision& d : result.placements) {
    if (auto it = pending.find(d.job); it != pending.end()) {
      holders.push_back({d.job, it->second->exclusive, &d.placement, true});
    }
  }
  auto label_of = [&](const std::string& node,
                      const std::string& key) -> std::optional<std::string> {
    for (const NodeView& n : snapshot.nodes) {
      if (n.name != node) continue;
      auto it = n.labels.find(key);
      if (it != n.labels.end()) return it->second;
    }
    return std::nullopt;
  };
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

}  // namespace berth::sched::testing
