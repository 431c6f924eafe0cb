#include "server/http/job_json.h"

#include "common/quantity.h"

namespace berth {

json::object ResourcesJson(const ResourceRequest& r) {
  json::object o;
  if (r.gpu_milli > 0) {
    json::object acc;
    if (r.gpu_milli % kMilliPerGpu == 0) {
      acc[r.gpu_type] = r.gpu_milli / kMilliPerGpu;
    } else {
      acc[r.gpu_type] = static_cast<double>(r.gpu_milli) / kMilliPerGpu;
    }
    o["accelerators"] = std::move(acc);
  } else {
    o["accelerators"] = nullptr;
  }
  o["cpus"] = CpusFromMilli(r.cpus);
  o["memory"] = GibFromMib(r.memory);
  return o;
}

json::array PlacementJson(const Placement& placement) {
  json::array out;
  for (const auto& g : placement) {
    json::array gpus;
    json::array shares;
    for (const auto& d : g.gpus) {
      gpus.push_back(d.index);
      shares.push_back(static_cast<double>(d.milli) / kMilliPerGpu);
    }
    out.push_back(json::object{{"node", g.node},
                               {"rank", g.rank},
                               {"gpus", std::move(gpus)},
                               {"gpu_shares", std::move(shares)}});
  }
  return out;
}

json::object JobJson(const JobRow& row, const std::string& waiting) {
  json::object o;
  o.reserve(24);  // its 22 keys without a rehash
  o["id"] = row.id;
  o["name"] = row.name;
  o["user"] = row.user;
  o["status"] = std::string(JobStatusName(row.status));
  o["priority"] = row.priority;
  o["group"] = row.group ? json::value(*row.group) : json::value(nullptr);
  o["rank"] = row.rank ? json::value(*row.rank) : json::value(nullptr);
  o["num_nodes"] = row.num_nodes;
  o["resources"] = ResourcesJson(row.resources);
  o["submitted_at"] = TimeToJson(row.submitted_at);
  o["started_at"] = TimeToJson(row.started_at);
  o["ended_at"] = TimeToJson(row.ended_at);
  o["exit_code"] = row.exit_code ? json::value(*row.exit_code) : json::value(nullptr);
  o["attempt"] = row.attempt;
  o["restarts"] = row.restarts;
  o["preemptions"] = row.preemptions;
  o["requeues"] = row.requeues;
  o["not_before"] = TimeToJson(row.not_before);
  o["earlier_run_seconds"] = static_cast<double>(row.run_ms) / 1000;
  o["placement"] = PlacementJson(row.placement);
  o["reason"] = row.status == JobStatus::kPending && !waiting.empty() ? waiting : row.reason;
  // What scripts can test instead of the sentence: "oom" for an attempt the kernel killed for its
  // memory limit (docs/security.md "Isolation"); null otherwise.
  o["reason_code"] = IsOutOfMemory(row.reason) ? json::value("oom") : json::value(nullptr);
  return o;
}

json::object AttemptJson(const AttemptRow& a, const JobRow& row) {
  json::object o{{"attempt", a.attempt},
                 {"placement", PlacementJson(a.placement)},
                 {"placed_at", TimeToJson(a.placed_at)},
                 {"ended_at", TimeToJson(a.ended_at)},
                 {"outcome", a.outcome ? json::value(std::string(JobStatusName(*a.outcome)))
                                       : json::value(nullptr)},
                 {"reason", a.reason},
                 {"exit_code", a.exit_code ? json::value(*a.exit_code) : json::value(nullptr)},
                 {"peak_memory_bytes",
                  a.peak_memory_bytes ? json::value(*a.peak_memory_bytes) : json::value(nullptr)},
                 {"cpu_seconds", a.cpu_ms ? json::value(static_cast<double>(*a.cpu_ms) / 1000)
                                          : json::value(nullptr)}};
  // Against the request (like seff): the peak of a rank over the memory asked per node, and the
  // CPU time of all ranks over the CPUs asked for the attempt's time (setup included).
  json::value memory_efficiency = nullptr;
  if (a.peak_memory_bytes && row.resources.memory > 0) {
    memory_efficiency = static_cast<double>(*a.peak_memory_bytes) /
                        (static_cast<double>(row.resources.memory) * 1024 * 1024);
  }
  json::value cpu_efficiency = nullptr;
  if (a.cpu_ms && a.ended_at && *a.ended_at > a.placed_at && row.resources.cpus > 0) {
    const double allotted_ms = static_cast<double>(*a.ended_at - a.placed_at) *
                               static_cast<double>(row.resources.cpus) / kMilliPerCpu *
                               std::max(1, static_cast<int>(a.placement.size()));
    cpu_efficiency = static_cast<double>(*a.cpu_ms) / allotted_ms;
  }
  o["memory_efficiency"] = std::move(memory_efficiency);
  o["cpu_efficiency"] = std::move(cpu_efficiency);
  return o;
}

json::object NodeTopologyJson(const std::vector<std::string>& levels,
                              const std::map<std::string, std::string>& labels) {
  json::object o;
  std::string path;
  for (const std::string& level : levels) {
    auto it = labels.find(level);
    path += (path.empty() ? "" : "/") + (it == labels.end() ? std::string("?") : it->second);
    o[level] = it == labels.end() ? json::value(nullptr) : json::value(path);
  }
  return o;
}

json::object NodeJson(const NodeStatus& node) {
  const NodeRow& row = node.row;
  json::object o;
  o["name"] = row.name;
  NodeState state = ShownNodeState(row.state, row.draining || node.health.NodeFaulty());
  o["state"] = std::string(NodeStateName(state));
  o["pool"] = row.pool;
  json::object labels;
  for (const auto& [k, v] : row.labels) labels[k] = v;
  o["labels"] = std::move(labels);
  o["isolation"] = node.isolation.empty() ? "unknown" : node.isolation;
  o["sharing"] = node.sharing.empty() ? "unknown" : node.sharing;
  if (node.mig_reconfigure || !node.mig_changing.empty()) {
    json::object changing;
    for (const auto& [gpu, profiles] : node.mig_changing) {
      json::array p;
      for (const std::string& profile : profiles) p.emplace_back(profile);
      changing[std::to_string(gpu)] = std::move(p);
    }
    o["mig"] = json::object{
        {"reconfigure", node.mig_reconfigure},
        {"changing", std::move(changing)},
        {"error", node.mig_error.empty() ? json::value(nullptr) : json::value(node.mig_error)}};
  }
  o["job_memory_default"] = node.job_memory_default > 0
                                ? json::value(static_cast<double>(node.job_memory_default) /
                                              static_cast<double>(kMibPerGib))
                                : json::value(nullptr);
  o["address"] = row.address;
  if (!node.reserved.name.empty()) {
    o["reservation"] = json::object{{"name", node.reserved.name},
                                    {"start", TimeToJson(node.reserved.start)},
                                    {"end", TimeToJson(node.reserved.end)},
                                    {"active", node.reserved.active},
                                    {"maintenance", node.reserved.maintenance}};
  }
  if (!node.maintenance_hold.empty()) o["maintenance_hold"] = node.maintenance_hold;
  json::object cap_gpus;
  json::object free_gpus;
  json::array devices;
  for (const auto& d : row.gpus) {
    auto used = node.gpu_used.find(d.index);
    MilliGpu held = used == node.gpu_used.end() ? 0 : used->second;
    cap_gpus[d.type] = (cap_gpus.contains(d.type) ? cap_gpus[d.type].as_int64() : 0) + 1;
    // A GPU its node's probes fenced is free to nobody (as the scheduler sees it).
    const std::string fault = node.health.GpuReason(d.gpu());
    double free_share =
        fault.empty() ? static_cast<double>(kMilliPerGpu - held) / kMilliPerGpu : 0.0;
    double prior = free_gpus.contains(d.type) ? free_gpus[d.type].to_number<double>() : 0.0;
    double sum = prior + free_share;
    if (sum == static_cast<int64_t>(sum)) {
      free_gpus[d.type] = static_cast<int64_t>(sum);
    } else {
      free_gpus[d.type] = sum;
    }
    json::object device{{"index", d.index}, {"type", d.type}, {"free", free_share}};
    if (d.slice()) device["gpu"] = d.parent;         // a MIG slice: the GPU it is part of
    if (d.nvlink != 0) device["nvlink"] = d.nvlink;  // its topology (docs/topology.md)
    if (d.pcie != 0) device["pcie"] = d.pcie;
    if (d.numa >= 0) device["numa"] = d.numa;
    if (!fault.empty()) device["fault"] = fault;  // given to no job until it clears
    devices.push_back(std::move(device));
  }
  o["capacity"] = json::object{{"cpus", CpusFromMilli(row.cpus)},
                               {"memory", GibFromMib(row.memory)},
                               {"gpus", std::move(cap_gpus)}};
  o["free"] =
      json::object{{"cpus", CpusFromMilli(std::max<MilliCpu>(0, row.cpus - node.cpus_used))},
                   {"memory", GibFromMib(std::max<Mib>(0, row.memory - node.memory_used))},
                   {"gpus", std::move(free_gpus)}};
  o["devices"] = std::move(devices);
  o["last_seen"] = TimeToJson(row.last_seen);
  o["down_since"] = TimeToJson(row.down_since);
  o["drained_by_operator"] = row.draining;
  o["health"] = NodeHealthJson(node.health);
  return o;
}

json::object NodeHealthJson(const proto::NodeHealth& health) {
  json::object o;
  std::optional<TimeMs> since;
  json::array gpus;
  for (const auto& f : health.faults) {
    if (f.gpu < 0) {
      since = since ? std::min(*since, f.since_ms) : f.since_ms;
    } else {
      gpus.push_back(
          json::object{{"index", f.gpu}, {"reason", f.reason}, {"since", TimeToJson(f.since_ms)}});
    }
  }
  o["state"] = health.NodeFaulty() ? "drained" : gpus.empty() ? "ok" : "degraded";
  const std::string reason = health.NodeReason();
  o["reason"] = reason.empty() ? json::value(nullptr) : json::value("health: " + reason);
  o["since"] = TimeToJson(since);
  o["gpus"] = std::move(gpus);
  json::array faults;
  for (const auto& f : health.faults) {
    faults.push_back(json::object{{"probe", f.probe},
                                  {"gpu", f.gpu < 0 ? json::value(nullptr) : json::value(f.gpu)},
                                  {"reason", f.reason},
                                  {"since", TimeToJson(f.since_ms)},
                                  {"cleared_by", f.sticky ? "operator" : "clean probes"}});
  }
  o["faults"] = std::move(faults);
  json::array probes;
  for (const auto& p : health.probes) {
    probes.push_back(json::object{{"name", p.name},
                                  {"ok", p.ok},
                                  {"timed_out", p.timed_out},
                                  {"reason", p.reason},
                                  {"at", TimeToJson(p.at_ms)},
                                  {"duration_ms", p.duration_ms},
                                  {"failures", p.failures},
                                  {"timeouts", p.timeouts}});
  }
  o["probes"] = std::move(probes);
  return o;
}

json::object StatusCountsJson(const std::map<JobStatus, int>& counts) {
  json::object out;
  for (const auto& [status, n] : counts) out[std::string(JobStatusName(status))] = n;
  return out;
}

json::object GroupRowJson(const JobRow& stands_for, const std::map<JobStatus, int>& counts) {
  json::object o = JobJson(stands_for, "");
  int64_t total = 0;
  for (const auto& [status, n] : counts) total += n;
  o["kind"] = "group";
  o["counts"] = StatusCountsJson(counts);
  o["jobs"] = total;
  return o;
}

}  // namespace berth
