// The user-facing HTTP API (docs/api.md): submit, list, show, cancel, logs, nodes, drain.
#include <fmt/format.h>

#include "common/log.h"
#include "server/responses.h"
#include "server/server.h"

namespace berth {

namespace {

std::optional<int64_t> ParseId(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  for (char c : s) {
    if (!isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::stoll(s);
}

// Constant-time comparison, so that response timing does not leak the token.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

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

}  // namespace

json::object Server::JobJson(const JobRow& row, const std::string& waiting) const {
  json::object o;
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
  o["placement"] = PlacementJson(row.placement);
  o["reason"] = row.status == JobStatus::kPending && !waiting.empty() ? waiting : row.reason;
  return o;
}

json::object Server::NodeJson(const NodeRuntime& node) const {
  const NodeRow& row = node.row;
  json::object o;
  o["name"] = row.name;
  NodeState state = row.state == NodeState::kUp && row.draining ? NodeState::kDraining : row.state;
  o["state"] = std::string(NodeStateName(state));
  o["pool"] = row.pool;
  json::object labels;
  for (const auto& [k, v] : row.labels) labels[k] = v;
  o["labels"] = std::move(labels);
  o["address"] = row.address;
  json::object cap_gpus;
  json::object free_gpus;
  json::array devices;
  for (const auto& d : row.gpus) {
    auto used = node.gpu_used.find(d.index);
    MilliGpu held = used == node.gpu_used.end() ? 0 : used->second;
    cap_gpus[d.type] = (cap_gpus.contains(d.type) ? cap_gpus[d.type].as_int64() : 0) + 1;
    double free_share = static_cast<double>(kMilliPerGpu - held) / kMilliPerGpu;
    double prior = free_gpus.contains(d.type) ? free_gpus[d.type].to_number<double>() : 0.0;
    double sum = prior + free_share;
    if (sum == static_cast<int64_t>(sum)) {
      free_gpus[d.type] = static_cast<int64_t>(sum);
    } else {
      free_gpus[d.type] = sum;
    }
    devices.push_back(json::object{{"index", d.index}, {"type", d.type}, {"free", free_share}});
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
  return o;
}

void Server::Handle(net::HttpRequest&& req, std::shared_ptr<net::Responder> res) {
  if (options_.require_token) {
    std::string auth = req.Header("authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) != 0 || !SameToken(auth.substr(prefix.size()), token_)) {
      res->Send(ErrorResponse(Status::Unauthorized(
          "this berth server requires the cluster token (Authorization: Bearer ...); "
          "pass --token, set BERTH_TOKEN or use --token-file")));
      return;
    }
  }
  const std::string& m = req.method;
  const std::string& p = req.path;
  std::vector<std::string> parts = Split(p, '/');  // "", "v1", ...
  auto route = [&]() -> std::optional<net::HttpResponse> {
    if (parts.size() < 3 || parts[1] != "v1") return std::nullopt;
    const std::string& top = parts[2];
    if (top == "health" && m == "GET") {
      return JsonResponse(200, json::object{{"ok", true}, {"version", "0.1.0"}});
    }
    if (top == "jobs") {
      if (parts.size() == 3 && m == "POST") return HandleSubmit(req);
      if (parts.size() == 3 && m == "GET") return HandleListJobs(req);
      if (parts.size() == 4 && parts[3] == "cancel" && m == "POST") return HandleCancel(req);
      if (parts.size() >= 4) {
        auto id = ParseId(parts[3]);
        if (!id)
          return ErrorResponse(
              Status::Invalid("job id must be a positive integer, got '" + parts[3] + "'"));
        if (parts.size() == 4 && m == "GET") return HandleShowJob(*id);
        if (parts.size() == 5 && parts[4] == "logs" && m == "GET") {
          HandleLogs(*id, req, res);
          return net::HttpResponse{.status = 0};
        }
      }
    }
    if (top == "nodes") {
      if (parts.size() == 3 && m == "GET") return HandleNodes();
      if (parts.size() == 5 && m == "POST" && (parts[4] == "drain" || parts[4] == "undrain")) {
        return HandleDrain(parts[3], parts[4] == "drain");
      }
    }
    if (top == "specs" && parts.size() == 4 && m == "GET") {
      auto id = ParseId(parts[3]);
      if (!id) return ErrorResponse(Status::Invalid("bad spec id"));
      return HandleGetSpec(*id);
    }
    if (top == "agent" && parts.size() == 4) {
      const std::string& what = parts[3];
      if (what == "register" && m == "POST") return HandleRegister(req);
      if (what == "heartbeat" && m == "POST") return HandleHeartbeat(req);
      if (what == "report" && m == "POST") return HandleReport(req);
      if (what == "logs" && m == "POST") return HandleLogAppend(req);
      if (what == "watch" && m == "GET") {
        HandleWatch(req, res);
        return net::HttpResponse{.status = 0};
      }
    }
    return std::nullopt;
  };
  std::optional<net::HttpResponse> out;
  try {
    out = route();
  } catch (const std::exception& e) {
    LogError("{} {}: {}", m, p, e.what());
    out = ErrorResponse(Status::Internal(std::string("internal error: ") + e.what()));
  }
  if (!out) {
    res->Send(ErrorResponse(Status::NotFound("no such endpoint: " + m + " " + p)));
  } else if (out->status != 0) {  // 0: the handler answers (or streams) by itself
    res->Send(std::move(*out));
  }
}

net::HttpResponse Server::HandleSubmit(const net::HttpRequest& req) {
  uint64_t received_at_seq;
  {
    std::lock_guard lock(mu_);
    received_at_seq = cancel_seq_;
  }
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object())
    return ErrorResponse(Status::Invalid("request body must be a JSON object"));
  const json::object& o = body->as_object();
  for (const auto& [key, value] : o) {
    if (key != "spec" && key != "yaml" && key != "num_jobs" && key != "user") {
      return ErrorResponse(
          Status::Invalid("unknown field '" + std::string(key) + "' in submission"));
    }
  }
  JobSpec spec;
  json::array warnings;
  if (const auto* yaml = o.if_contains("yaml")) {
    if (!yaml->is_string()) return ErrorResponse(Status::Invalid("'yaml' must be a string"));
    auto parsed = ParseTaskYaml(std::string(yaml->as_string()), "task.yaml");
    if (!parsed.ok()) return ErrorResponse(parsed.status());
    spec = parsed->spec;
    for (const auto& w : parsed->warnings) warnings.push_back(json::value(w));
  } else if (const auto* s = o.if_contains("spec")) {
    auto parsed = SpecFromJson(*s);
    if (!parsed.ok()) return ErrorResponse(parsed.status());
    spec = std::move(*parsed);
  } else {
    return ErrorResponse(
        Status::Invalid("submission needs 'spec' (a JSON spec) or 'yaml' (a task file's text)"));
  }
  auto user = GetString(o, "user", "unknown");
  if (!user.ok()) return ErrorResponse(user.status());
  auto num_jobs = GetInt(o, "num_jobs", 0);
  if (!num_jobs.ok()) return ErrorResponse(num_jobs.status());
  if (*num_jobs < 0 || (o.contains("num_jobs") && *num_jobs == 0)) {
    return ErrorResponse(Status::Invalid("num_jobs must be at least 1"));
  }
  if (*num_jobs > options_.max_jobs_per_submit) {
    return ErrorResponse(
        Status::Invalid(fmt::format("num_jobs {} is over the limit of {} jobs per submission",
                                    *num_jobs, options_.max_jobs_per_submit)));
  }
  if (spec.name.empty()) spec.name = "job";

  Submission sub;
  sub.spec_json = SerializeJson(SpecToJson(spec));
  sub.name = spec.name;
  sub.user = *user;
  sub.priority = spec.priority;
  sub.num_nodes = spec.num_nodes;
  sub.resources = spec.resources;
  sub.as_group = o.contains("num_jobs");
  sub.count = sub.as_group ? static_cast<int>(*num_jobs) : 1;

  std::lock_guard lock(mu_);
  sched::JobRequest probe;
  probe.num_nodes = spec.num_nodes;
  probe.per_node = spec.resources;
  probe.pool = spec.pool;
  probe.node_selector = spec.node_selector;
  probe.exclusive = spec.exclusive;
  Status feasible = sched::CheckFeasible(NodeViews(), probe);
  if (!feasible.ok())
    return ErrorResponse(Status::Infeasible("this job can never run here: " + feasible.message()));
  sub.now = clock_.Now();
  auto result = store_->Submit(sub);
  if (!result.ok()) return ErrorResponse(result.status());
  auto shared = std::make_shared<const JobSpec>(std::move(spec));
  specs_[result->spec_id] = shared;
  json::array ids;
  auto user_seq = cancel_user_seq_.find(*user);
  bool cancelled_in_flight =
      cancel_all_users_seq_ > received_at_seq ||
      (user_seq != cancel_user_seq_.end() && user_seq->second > received_at_seq);
  Batch cancel_batch;
  for (size_t i = 0; i < result->ids.size(); ++i) {
    ActiveJob job;
    job.row.id = result->ids[i];
    job.row.spec_id = result->spec_id;
    job.row.group = result->group;
    if (result->group) job.row.rank = static_cast<int>(i);
    job.row.name = sub.name;
    job.row.user = sub.user;
    job.row.priority = sub.priority;
    job.row.num_nodes = sub.num_nodes;
    job.row.resources = sub.resources;
    job.row.status = JobStatus::kPending;
    job.row.reason = "submitted";
    job.row.submitted_at = sub.now;
    job.spec = shared;
    job.group_size = sub.count;
    job.ranks.resize(static_cast<size_t>(sub.num_nodes));
    auto& stored = jobs_.emplace(job.row.id, std::move(job)).first->second;
    if (cancelled_in_flight) {
      EndJob(stored, JobStatus::kCancelled,
             "cancelled by a cancel --all that arrived while it was submitted", std::nullopt,
             sub.now, cancel_batch);
    }
    ids.push_back(result->ids[i]);
  }
  if (cancelled_in_flight) {
    Status st = CommitLocked(cancel_batch);
    if (!st.ok()) LogError("recording cancelled submission: {}", st.message());
    ReapFinished();
  }
  pass_requested_ = true;
  sched_cv_.notify_one();
  json::object out{{"group", result->group ? json::value(*result->group) : json::value(nullptr)},
                   {"jobs", std::move(ids)}};
  if (!warnings.empty()) out["warnings"] = std::move(warnings);
  return JsonResponse(201, out);
}

net::HttpResponse Server::HandleListJobs(const net::HttpRequest& req) {
  JobQuery q;
  q.all = req.Query("all") == "1" || req.Query("all") == "true";
  try {
    q.limit = std::stoi(req.Query("limit", "0"));
    q.page = std::stoi(req.Query("page", "0"));
    if (!req.Query("group").empty()) q.group = std::stoll(req.Query("group"));
    if (!req.Query("before").empty()) q.before_id = std::stoll(req.Query("before"));
  } catch (...) {
    return ErrorResponse(Status::Invalid("limit, page, group and before must be integers"));
  }
  if (q.limit < 0 || q.page < 0)
    return ErrorResponse(Status::Invalid("limit and page must not be negative"));
  auto rows = store_->ListJobs(q);
  if (!rows.ok()) return ErrorResponse(rows.status());
  // Rows come from the store (every change is committed before it is visible) and the scheduler's
  // reasons from their own small lock: a listing never waits for a scheduling pass.
  json::array jobs;
  std::lock_guard lock(waiting_mu_);
  for (const auto& row : *rows) {
    auto it = row.status == JobStatus::kPending ? waiting_.find(row.id) : waiting_.end();
    jobs.push_back(JobJson(row, it == waiting_.end() ? "" : it->second));
  }
  bool more = !q.all && q.page > 0 && static_cast<int>(rows->size()) == q.page;
  return JsonResponse(200, json::object{{"jobs", std::move(jobs)}, {"more", more}});
}

net::HttpResponse Server::HandleShowJob(int64_t id) {
  auto rows = store_->GetJobs({id});
  if (!rows.ok()) return ErrorResponse(rows.status());
  if (rows->empty()) return ErrorResponse(Status::NotFound(fmt::format("no job {}", id)));
  const JobRow& row = rows->front();
  std::string waiting;
  {
    std::lock_guard lock(waiting_mu_);
    auto it = waiting_.find(id);
    if (it != waiting_.end()) waiting = it->second;
  }
  json::object o = JobJson(row, waiting);
  auto spec = store_->GetSpec(row.spec_id);
  if (spec.ok()) {
    auto v = ParseJson(*spec, "stored spec");
    if (v.ok()) o["spec"] = std::move(*v);
  }
  auto events = store_->GetEvents(id);
  if (events.ok()) {
    json::array ev;
    for (const auto& e : *events) {
      ev.push_back(json::object{{"at", FormatRfc3339(e.at)},
                                {"status", std::string(JobStatusName(e.status))},
                                {"attempt", e.attempt},
                                {"reason", e.reason}});
    }
    o["events"] = std::move(ev);
  }
  auto attempts = store_->GetAttempts(id);
  if (attempts.ok()) {
    json::array at;
    for (const auto& a : *attempts) {
      at.push_back(json::object{
          {"attempt", a.attempt},
          {"placement", PlacementJson(a.placement)},
          {"placed_at", TimeToJson(a.placed_at)},
          {"ended_at", TimeToJson(a.ended_at)},
          {"outcome",
           a.outcome ? json::value(std::string(JobStatusName(*a.outcome))) : json::value(nullptr)},
          {"reason", a.reason},
          {"exit_code", a.exit_code ? json::value(*a.exit_code) : json::value(nullptr)}});
    }
    o["attempts"] = std::move(at);
  }
  return JsonResponse(200, o);
}

net::HttpResponse Server::HandleCancel(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object())
    return ErrorResponse(Status::Invalid("request body must be a JSON object"));
  const json::object& o = body->as_object();
  auto all = GetBool(o, "all");
  auto all_users = GetBool(o, "all_users");
  auto user = GetString(o, "user");
  auto group = GetInt(o, "group", -1);
  for (auto* st : {&all.status(), &all_users.status(), &user.status(), &group.status()}) {
    if (!st->ok()) return ErrorResponse(*st);
  }
  std::vector<int64_t> ids;
  if (const auto* v = o.if_contains("ids")) {
    if (!v->is_array()) return ErrorResponse(Status::Invalid("'ids' must be an array of job ids"));
    for (const auto& e : v->as_array()) {
      auto id = AsInt(e);
      if (!id || *id <= 0)
        return ErrorResponse(Status::Invalid("'ids' must hold positive integers"));
      ids.push_back(*id);
    }
  }
  bool by_filter = *all || *all_users || *group >= 0;
  if (ids.empty() && !by_filter)
    return ErrorResponse(Status::Invalid("say which jobs: 'ids', 'group' or 'all'"));

  std::lock_guard lock(mu_);
  TimeMs now = clock_.Now();
  if (*all_users) cancel_all_users_seq_ = ++cancel_seq_;
  if (*all && !*all_users) cancel_user_seq_[*user] = ++cancel_seq_;
  if (by_filter) {
    for (const auto& [id, job] : jobs_) {
      if (job.terminating || IsTerminal(job.row.status)) continue;
      if (*group >= 0 && job.row.group != *group) continue;
      if (*all && !*all_users && job.row.user != *user) continue;
      ids.push_back(id);
    }
  }
  json::array cancelled;
  json::array finished;
  json::array not_found;
  std::vector<int64_t> unknown;
  Batch batch;
  for (int64_t id : ids) {
    auto it = jobs_.find(id);
    // Ended for the user (perhaps still stopping): reported as finished, never ended a second time.
    if (it == jobs_.end() || it->second.terminating || IsTerminal(it->second.row.status)) {
      unknown.push_back(id);
      continue;
    }
    EndJob(it->second, JobStatus::kCancelled, "cancelled by " + (user->empty() ? "user" : *user),
           std::nullopt, now, batch);
    cancelled.push_back(id);
  }
  if (!unknown.empty()) {
    auto rows = store_->GetJobs(unknown);
    std::set<int64_t> known;
    if (rows.ok()) {
      for (const auto& r : *rows) known.insert(r.id);
    }
    for (int64_t id : unknown) (known.count(id) ? finished : not_found).push_back(id);
  }
  Status st = CommitLocked(batch);
  if (!st.ok()) return ErrorResponse(st);
  ReapFinished();
  pass_requested_ = true;
  sched_cv_.notify_one();
  return JsonResponse(200, json::object{{"cancelled", std::move(cancelled)},
                                        {"already_finished", std::move(finished)},
                                        {"not_found", std::move(not_found)}});
}

net::HttpResponse Server::HandleNodes() {
  json::array nodes;
  std::lock_guard lock(mu_);
  for (const auto& [name, node] : nodes_) nodes.push_back(NodeJson(node));
  return JsonResponse(200, json::object{{"nodes", std::move(nodes)}});
}

net::HttpResponse Server::HandleDrain(const std::string& name, bool drain) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return ErrorResponse(Status::NotFound("no node named '" + name + "'"));
  it->second.row.draining = drain;
  Batch batch;
  batch.nodes.push_back(it->second.row);
  Status st = CommitLocked(batch);
  if (!st.ok()) return ErrorResponse(st);
  pass_requested_ = true;
  sched_cv_.notify_one();
  return JsonResponse(200, NodeJson(it->second));
}

void Server::HandleLogs(int64_t id, const net::HttpRequest& req,
                        std::shared_ptr<net::Responder> res) {
  int64_t offset = 0;
  int rank = LogStore::kAllRanks;  // no rank: every rank of a multi-node job, interleaved
  int attempt = 0;
  int wait_ms = 0;
  try {
    offset = std::stoll(req.Query("offset", "0"));
    if (!req.Query("rank").empty()) rank = std::stoi(req.Query("rank"));
    attempt = std::stoi(req.Query("attempt", "0"));
    wait_ms = std::stoi(req.Query("wait_ms", "0"));
  } catch (...) {
    res->Send(ErrorResponse(Status::Invalid("offset, rank, attempt and wait_ms must be integers")));
    return;
  }
  if (offset < 0 || rank < LogStore::kAllRanks || attempt < 0 || wait_ms < 0) {
    res->Send(
        ErrorResponse(Status::Invalid("offset, rank, attempt and wait_ms must not be negative")));
    return;
  }
  wait_ms = std::min(wait_ms, 60'000);
  JobRow row;
  bool live = false;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) {
      row = it->second.row;
      live = !IsTerminal(row.status) || it->second.terminating;
    }
  }
  if (row.id == 0) {
    auto rows = store_->GetJobs({id});
    if (!rows.ok() || rows->empty()) {
      res->Send(ErrorResponse(Status::NotFound(fmt::format("no job {}", id))));
      return;
    }
    row = rows->front();
  }
  if (rank >= row.num_nodes) {
    res->Send(ErrorResponse(
        Status::Invalid(fmt::format("job {} has ranks 0..{}", id, row.num_nodes - 1))));
    return;
  }
  if (rank == LogStore::kAllRanks && row.num_nodes == 1)
    rank = 0;  // a single node's output, exactly
  if (attempt == 0) attempt = row.attempt;
  constexpr size_t kMaxChunk = 1 << 20;
  auto answer = [this, id, attempt, rank, offset, res, status = row.status, live]() {
    std::string data = attempt > 0 ? logs_->Read(id, attempt, rank, offset, kMaxChunk) : "";
    net::HttpResponse r;
    r.content_type = "application/octet-stream";
    r.headers.push_back(
        {"X-Berth-Offset", std::to_string(offset + static_cast<int64_t>(data.size()))});
    r.headers.push_back({"X-Berth-Attempt", std::to_string(attempt)});
    r.headers.push_back({"X-Berth-Status", std::string(JobStatusName(status))});
    r.headers.push_back({"X-Berth-Done", !live && data.size() < kMaxChunk ? "1" : "0"});
    r.body = std::move(data);
    res->Send(std::move(r));
  };
  bool has_data = attempt > 0 && logs_->Size(id, attempt, rank) > offset;
  if (has_data || !live || wait_ms == 0) {
    answer();
    return;
  }
  // Long poll: answer when output arrives or the job ends, or at the deadline with nothing.
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  bool still_live =
      it != jobs_.end() && (!IsTerminal(it->second.row.status) || it->second.terminating);
  if (!still_live || it->second.row.attempt != attempt || stopping_) {
    http_->Post([this, id, req, res]() mutable {
      net::HttpRequest again = req;
      again.query["wait_ms"] = "0";
      HandleLogs(id, again, res);
    });
    return;
  }
  auto fired = std::make_shared<std::atomic<bool>>(false);
  auto fire = [this, id, req, res, fired]() mutable {
    if (fired->exchange(true)) return;
    net::HttpRequest again = req;
    again.query["wait_ms"] = "0";
    HandleLogs(id, again, res);
  };
  log_waiters_.emplace(id, LogWaiter{id, res, fire});
  http_->RunAfter(wait_ms, [this, id, res, fire]() mutable {
    {
      // The deadline came first: forget the waiter, so that a silent job's followers do not pile
      // up.
      std::lock_guard lock(mu_);
      auto range = log_waiters_.equal_range(id);
      for (auto w = range.first; w != range.second; ++w) {
        if (w->second.responder == res) {
          log_waiters_.erase(w);
          break;
        }
      }
    }
    fire();
  });
}

}  // namespace berth
