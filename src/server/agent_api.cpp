// The agents' protocol (docs/api.md, "Agent protocol"): register, watch stream, heartbeat, reports,
// log shipping and spec fetch. Every report names (job, attempt, rank); only the current attempt is
// applied and anything else is told to stop (fencing).
#include <fmt/format.h>

#include "common/log.h"
#include "common/strings.h"
#include "server/responses.h"
#include "server/server.h"

namespace berth {

Result<Server::NodeRuntime*> Server::AuthenticateAgent(const json::object& body) {
  auto name = GetString(body, "node");
  auto session = GetString(body, "session");
  if (!name.ok()) return name.status();
  if (!session.ok()) return session.status();
  auto it = nodes_.find(*name);
  if (it == nodes_.end() || it->second.session.empty() || it->second.session != *session) {
    return Status::Conflict("unknown agent session for node '" + *name + "'; register again");
  }
  return &it->second;
}

void Server::HoldEndedAttempts(const NodeRuntime& node,
                               const std::set<std::tuple<int64_t, int, int>>& running) {
  // An agent still runs an attempt that the store says has ended: the job was cancelled (or failed,
  // or timed out) and its processes were still being stopped when this server started. Its
  // resources stay held until they are gone, as they would have been without the restart, so that
  // no new job lands on devices the dying one still uses. The node is not schedulable before this
  // runs (it had no session).
  for (const auto& [job_id, attempt, rank] : running) {
    if (jobs_.count(job_id)) continue;
    auto rows = store_->GetJobs({job_id});
    if (!rows.ok() || rows->empty()) continue;
    const JobRow& row = rows->front();
    if (!IsTerminal(row.status) || row.attempt != attempt || row.placement.empty()) continue;
    ActiveJob job;
    job.row = row;
    job.spec = SpecFor(row.spec_id);
    if (!job.spec) job.spec = std::make_shared<const JobSpec>();
    job.ranks.resize(static_cast<size_t>(std::max(1, row.num_nodes)));
    bool any_running = false;
    for (const auto& grant : row.placement) {
      if (static_cast<size_t>(grant.rank) >= job.ranks.size()) continue;
      bool here = grant.node == node.row.name;
      auto other = nodes_.find(grant.node);
      // Ranks on nodes that already re-registered without this job are gone; those on nodes not
      // heard from yet are held until they register (or their lease runs out).
      bool gone = here ? !running.count({job_id, attempt, grant.rank})
                       : other == nodes_.end() || !other->second.session.empty() ||
                             other->second.row.state == NodeState::kDown;
      job.ranks[grant.rank].exited = gone;
      any_running = any_running || !gone;
    }
    if (!any_running) continue;
    LogInfo("job {} attempt {} is still stopping on {}; its resources stay held until it is gone",
            job_id, attempt, node.row.name);
    job.terminating = true;
    Allocate(job.row, +1);
    jobs_.emplace(job_id, std::move(job));
  }
}

net::HttpResponse Server::HandleRegister(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object())
    return ErrorResponse(400, "register: body must be a JSON object");
  const json::object& o = body->as_object();
  auto name = GetString(o, "name");
  auto node_id = GetString(o, "node_id");
  auto address = GetString(o, "address");
  auto pool = GetString(o, "pool");
  auto cpus = GetInt(o, "cpus_milli");
  auto memory = GetInt(o, "memory_mib");
  for (const Status* st : {&name.status(), &node_id.status(), &address.status(), &pool.status(),
                           &cpus.status(), &memory.status()}) {
    if (!st->ok()) return ErrorResponse(400, "register: " + st->message());
  }
  if (!IsValidName(*name)) return ErrorResponse(400, "register: invalid node name '" + *name + "'");
  if (node_id->size() < 8) return ErrorResponse(400, "register: node_id is missing");
  if (*cpus <= 0 || *memory < 0)
    return ErrorResponse(400, "register: cpus must be positive and memory not negative");
  if (!pool->empty() && !IsValidName(*pool))
    return ErrorResponse(400, "register: invalid pool name");
  std::map<std::string, std::string> labels;
  if (const auto* l = o.if_contains("labels"); l && l->is_object()) {
    for (const auto& [k, v] : l->as_object()) {
      if (!v.is_string() || !IsValidName(k) || !IsValidName(v.as_string())) {
        return ErrorResponse(400, "register: labels must be name=value pairs of [A-Za-z0-9._-]");
      }
      labels[std::string(k)] = std::string(v.as_string());
    }
  }
  std::vector<GpuDevice> gpus;
  if (const auto* g = o.if_contains("gpus"); g && g->is_array()) {
    for (const auto& d : g->as_array()) {
      if (!d.is_object()) return ErrorResponse(400, "register: gpus must be objects");
      auto index = GetInt(d.as_object(), "index", -1);
      auto type = GetString(d.as_object(), "type");
      if (!index.ok() || !type.ok() || *index < 0 || !IsValidName(*type)) {
        return ErrorResponse(400, "register: each GPU needs an index and a type");
      }
      gpus.push_back({static_cast<int>(*index), *type});
    }
  }
  std::set<std::tuple<int64_t, int, int>> running;  // (job, attempt, rank) the agent has
  if (const auto* r = o.if_contains("running"); r && r->is_array()) {
    for (const auto& e : r->as_array()) {
      if (!e.is_object()) continue;
      auto job = GetInt(e.as_object(), "job");
      auto attempt = GetInt(e.as_object(), "attempt");
      auto rank = GetInt(e.as_object(), "rank");
      if (job.ok() && attempt.ok() && rank.ok()) {
        running.insert({*job, static_cast<int>(*attempt), static_cast<int>(*rank)});
      }
    }
  }

  std::lock_guard lock(mu_);
  TimeMs now = clock_.Now();
  auto it = nodes_.find(*name);
  if (it != nodes_.end() && it->second.row.node_id != *node_id &&
      it->second.row.state != NodeState::kDown && it->second.lease_expires > now) {
    return ErrorResponse(
        409, "node name '" + *name + "' is held by another live agent; pick another --name");
  }
  NodeRuntime& node = nodes_[*name];
  if (node.watch) node.watch->End();  // the old session is replaced at once
  node.watch.reset();
  node.outbox.clear();
  bool is_new = node.row.name.empty();
  node.row.name = *name;
  node.row.node_id = *node_id;
  node.row.state = NodeState::kUp;
  node.row.pool = *pool;
  node.row.labels = labels;
  node.row.address = address->empty() ? req.remote_address : *address;
  node.row.cpus = *cpus;
  node.row.memory = *memory;
  node.row.gpus = gpus;
  if (is_new) node.row.registered_at = now;
  node.row.last_seen = now;
  node.row.down_since.reset();
  node.session = RandomHex(12);
  node.lease_expires = now + options_.lease_ms;

  // Reconcile: launches the agent never got are sent again; attempts it runs that are not current
  // are told to stop.
  HoldEndedAttempts(node, running);
  bool released = false;
  for (auto& [id, job] : jobs_) {
    if (job.terminating) {
      // A rank the agent no longer has is gone: its exit was reported, or it never started.
      for (const auto& grant : job.row.placement) {
        if (grant.node != *name || running.count({id, job.row.attempt, grant.rank})) continue;
        if (static_cast<size_t>(grant.rank) < job.ranks.size()) job.ranks[grant.rank].exited = true;
      }
      bool all = true;
      for (const auto& r : job.ranks) all = all && r.exited;
      if (all) {
        Release(job);
        released = true;
      }
      continue;
    }
    if (!IsActive(job.row.status) || launch_held_.count(id)) continue;
    for (const auto& grant : job.row.placement) {
      if (grant.node != *name) continue;
      if (!running.count({id, job.row.attempt, grant.rank}))
        SendToNode(node, LaunchMessage(job, grant.rank));
    }
  }
  if (released) ReapFinished();
  // Dying attempts: ranks here the agent no longer has are gone. Earlier attempts of queued or
  // running jobs that it still runs (a server restart forgot them) are held again until they are
  // gone.
  std::vector<std::tuple<int64_t, int, int>> gone;
  for (const auto& [key, dying] : dying_) {
    for (const auto& grant : dying.placement) {
      if (grant.node == *name && dying.alive.count(grant.rank) &&
          !running.count({key.first, key.second, grant.rank})) {
        gone.emplace_back(key.first, key.second, grant.rank);
      }
    }
  }
  for (const auto& [job_id, attempt, rank] : gone) DyingRankGone(job_id, attempt, rank);
  for (const auto& [job_id, attempt, rank] : running) {
    auto j = jobs_.find(job_id);
    if (j == jobs_.end() || j->second.row.attempt == attempt || dying_.count({job_id, attempt}))
      continue;
    auto attempts = store_->GetAttempts(job_id);
    if (!attempts.ok()) continue;
    for (const auto& a : *attempts) {
      if (a.attempt != attempt) continue;
      DyingAttempt dying{a.placement, j->second.row.resources, {}};
      for (const auto& grant : a.placement) {
        if (grant.node != *name || running.count({job_id, attempt, grant.rank}))
          dying.alive.insert(grant.rank);
      }
      JobRow held;
      held.placement = dying.placement;
      held.resources = dying.per_node;
      Allocate(held, +1);
      dying_[{job_id, attempt}] = std::move(dying);
    }
  }
  for (const auto& [job_id, attempt, rank] : running) {
    auto j = jobs_.find(job_id);
    bool current = j != jobs_.end() && j->second.row.attempt == attempt &&
                   IsActive(j->second.row.status) && !j->second.terminating;
    if (!current) {
      SendToNode(node, json::object{{"type", "stop"},
                                    {"job", job_id},
                                    {"attempt", attempt},
                                    {"rank", rank},
                                    {"reason", "not the current attempt"}});
    }
  }
  Batch batch;
  batch.nodes.push_back(node.row);
  Status st = CommitLocked(batch);
  if (!st.ok()) return ErrorResponse(500, st.message());
  LogInfo("node {} registered ({} GPUs, {} CPUs) at {}", *name, gpus.size(), FormatMilli(*cpus),
          node.row.address);
  pass_requested_ = true;
  sched_cv_.notify_one();
  return JsonResponse(
      200, json::object{{"session", node.session},
                        {"lease_ms", options_.lease_ms},
                        {"heartbeat_ms", std::max<DurationMs>(100, options_.lease_ms / 4)}});
}

void Server::HandleWatch(const net::HttpRequest& req, std::shared_ptr<net::Responder> res) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(req.Query("node"));
  if (it == nodes_.end() || it->second.session.empty() ||
      it->second.session != req.Query("session") || stopping_) {
    res->Send(ErrorResponse(409, "unknown agent session; register again"));
    return;
  }
  NodeRuntime& node = it->second;
  if (node.watch) node.watch->End();
  node.watch = res;
  res->StartStream(200, "application/x-ndjson");
  res->Write(SerializeJson(json::object{{"type", "hello"}}) + "\n");
  while (!node.outbox.empty()) {
    res->Write(std::move(node.outbox.front()));
    node.outbox.pop_front();
  }
}

net::HttpResponse Server::HandleHeartbeat(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object())
    return ErrorResponse(400, "heartbeat: body must be a JSON object");
  std::lock_guard lock(mu_);
  auto node = AuthenticateAgent(body->as_object());
  if (!node.ok()) return ErrorResponse(409, node.status().message());
  TimeMs now = clock_.Now();
  (*node)->lease_expires = now + options_.lease_ms;
  (*node)->row.last_seen = now;
  return JsonResponse(200, json::object{{"ok", true}, {"lease_ms", options_.lease_ms}});
}

net::HttpResponse Server::HandleReport(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object())
    return ErrorResponse(400, "report: body must be a JSON object");
  const json::object& o = body->as_object();
  const json::value* reports = o.if_contains("reports");
  if (!reports || !reports->is_array())
    return ErrorResponse(400, "report: 'reports' must be an array");
  std::lock_guard lock(mu_);
  auto node_or = AuthenticateAgent(o);
  if (!node_or.ok()) return ErrorResponse(409, node_or.status().message());
  NodeRuntime& node = **node_or;
  TimeMs now = clock_.Now();
  node.lease_expires = now + options_.lease_ms;
  Batch batch;
  json::array results;
  bool ended = false;
  for (const auto& rv : reports->as_array()) {
    if (!rv.is_object()) return ErrorResponse(400, "report: each report must be an object");
    const json::object& r = rv.as_object();
    auto job_id = GetInt(r, "job");
    auto attempt = GetInt(r, "attempt");
    auto rank = GetInt(r, "rank");
    auto event = GetString(r, "event");
    auto reason = GetString(r, "reason");
    auto phase = GetString(r, "phase", "run");
    if (!job_id.ok() || !attempt.ok() || !rank.ok() || !event.ok() || !reason.ok() || !phase.ok()) {
      return ErrorResponse(400, "report: job, attempt, rank and event are required");
    }
    std::optional<int> exit_code;
    if (const auto* c = r.if_contains("exit_code"); c && !c->is_null()) {
      auto v = AsInt(*c);
      if (v) exit_code = static_cast<int>(*v);
    }
    json::object result{{"job", *job_id}, {"attempt", *attempt}, {"rank", *rank}, {"action", "ok"}};
    auto it = jobs_.find(*job_id);
    bool exited = *event == "exited";
    ActiveJob* job = it == jobs_.end() ? nullptr : &it->second;
    bool on_this_node = false;
    if (job) {
      for (const auto& g : job->row.placement)
        on_this_node = on_this_node || (g.node == node.row.name && g.rank == *rank);
    }
    if (auto d = dying_.find({*job_id, static_cast<int>(*attempt)}); d != dying_.end()) {
      // An earlier attempt being stopped: it holds its resources until each rank is reported gone.
      if (exited) {
        DyingRankGone(*job_id, static_cast<int>(*attempt), static_cast<int>(*rank));
      } else {
        result["action"] = "stop";
      }
      results.push_back(std::move(result));
      continue;
    }
    if (!job || job->row.attempt != *attempt || !on_this_node ||
        *rank >= static_cast<int64_t>(job->ranks.size())) {
      // Not the current attempt: fenced. A process still running must stop.
      if (!exited) result["action"] = "stop";
      results.push_back(std::move(result));
      continue;
    }
    RankState& rs = job->ranks[static_cast<size_t>(*rank)];
    if (job->terminating || IsTerminal(job->row.status)) {
      if (exited) {
        rs.exited = true;
        bool all = true;
        for (const auto& x : job->ranks) all = all && x.exited;
        if (all) {
          Release(*job);
          ended = true;  // reap it: a finished job left in jobs_ would look cancellable again
        }
      } else {
        result["action"] = "stop";
      }
      results.push_back(std::move(result));
      continue;
    }
    if (*event == "setting_up") {
      rs.setting_up = true;
      if (job->row.status == JobStatus::kStarting)
        Transition(*job, JobStatus::kSettingUp, "setup running", now, batch);
    } else if (*event == "running") {
      rs.running = true;
      bool all = true;
      for (const auto& x : job->ranks) all = all && (x.running || x.exited);
      if (all && job->row.status != JobStatus::kRunning)
        Transition(*job, JobStatus::kRunning, "running", now, batch);
    } else if (exited) {
      rs.exited = true;
      rs.exit_code = exit_code.value_or(-1);
      std::string where =
          job->row.num_nodes > 1 ? fmt::format(" on rank {} ({})", *rank, node.row.name) : "";
      if (*phase == "launch") {
        EndJob(*job, JobStatus::kFailed, "could not start" + where + ": " + *reason, exit_code, now,
               batch);
        ended = true;
      } else if (!exit_code || *exit_code != 0) {
        JobStatus status = *phase == "setup" ? JobStatus::kFailedSetup : JobStatus::kFailed;
        std::string what = exit_code ? fmt::format("exit code {}", *exit_code) : "no exit code";
        if (!reason->empty()) what += " (" + *reason + ")";
        EndJob(*job, status, std::string(*phase == "setup" ? "setup failed: " : "") + what + where,
               exit_code, now, batch);
        ended = true;
      } else {
        bool all = true;
        for (const auto& x : job->ranks) all = all && x.exited;
        if (all) {
          EndJob(*job, JobStatus::kSucceeded, "exit code 0", 0, now, batch);
          ended = true;
        }
      }
    }
    results.push_back(std::move(result));
  }
  Status st = CommitLocked(batch);
  if (!st.ok()) return ErrorResponse(500, "report not recorded: " + st.message());
  if (ended) {
    ReapFinished();
    pass_requested_ = true;
    sched_cv_.notify_one();
  }
  return JsonResponse(200, json::object{{"results", std::move(results)}});
}

net::HttpResponse Server::HandleLogAppend(const net::HttpRequest& req) {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  int64_t offset = 0;
  try {
    job = std::stoll(req.Query("job"));
    attempt = std::stoi(req.Query("attempt"));
    rank = std::stoi(req.Query("rank", "0"));
    offset = std::stoll(req.Query("offset", "0"));
  } catch (...) {
    return ErrorResponse(400, "logs: job, attempt, rank and offset must be integers");
  }
  std::string
      prefix;  // multi-node jobs also get an interleaved log, each line tagged "(rank R, node) "
  {
    std::lock_guard lock(mu_);
    auto it = nodes_.find(req.Query("node"));
    if (it == nodes_.end() || it->second.session.empty() ||
        it->second.session != req.Query("session")) {
      return ErrorResponse(409, "unknown agent session; register again");
    }
    auto j = jobs_.find(job);
    if (j != jobs_.end() && j->second.row.num_nodes > 1)
      prefix = fmt::format("(rank {}, {}) ", rank, it->first);
  }
  if (job <= 0 || attempt <= 0 || rank < 0 || offset < 0)
    return ErrorResponse(400, "logs: bad job, attempt, rank or offset");
  auto size = logs_->Append(job, attempt, rank, offset, req.body, prefix);
  if (!size.ok()) {
    return JsonResponse(409, json::object{{"error", size.status().message()},
                                          {"size", logs_->Size(job, attempt, rank)}});
  }
  {
    std::lock_guard lock(mu_);
    WakeLogWaiters(job);
  }
  return JsonResponse(200, json::object{{"size", *size}});
}

net::HttpResponse Server::HandleGetSpec(int64_t spec_id) {
  auto text = store_->GetSpec(spec_id);
  if (!text.ok())
    return ErrorResponse(text.status().code() == Code::kNotFound ? 404 : 500,
                         text.status().message());
  net::HttpResponse r;
  r.body = *text;
  return r;
}

}  // namespace berth
