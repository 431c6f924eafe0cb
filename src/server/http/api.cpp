// JobsApi (jobs_api.h): submit, list, show, cancel, requeue, groups, the queue, logs, nodes, drain.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "common/log.h"
#include "common/strings.h"
#include "server/http/api_docs.h"
#include "server/http/http_metrics.h"
#include "server/http/job_json.h"
#include "server/http/jobs_api.h"
#include "server/http/notify_api.h"
#include "server/http/responses.h"
#include "server/listing.h"

namespace berth {

// The API's routes; each names who may call it and where it runs (server/http/routes.h).
void JobsApi::AddRoutes(RouteTable& t, JobsApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  // Jobs, groups and the queue.
  t.Add(
      "POST", "/v1/jobs", R::kState,
      [self](const RouteCall& c) { return self->HandleSubmit(*c.req, *c.by); }, Submit());
  t.Add(
      "GET", "/v1/jobs", R::kRead,
      [self](const RouteCall& c) { return self->HandleListJobs(*c.req); }, ListJobs());
  t.Add(
      "POST", "/v1/jobs/cancel", R::kState,
      [self](const RouteCall& c) { return self->HandleCancel(*c.req, *c.by); }, Cancel());
  t.Add(
      "GET", "/v1/jobs/{id}", R::kRead,
      [self](const RouteCall& c) { return self->HandleShowJob(c.id, *c.by); }, ShowJob());
  t.Add(
      "POST", "/v1/jobs/{id}/requeue", R::kState,
      [self](const RouteCall& c) { return self->HandleRequeue(c.id, *c.by); }, Requeue());
  t.Add(
      "GET", "/v1/jobs/{id}/logs", R::kRead,
      [self](const RouteCall& c) {
        self->HandleLogs(c.id, *c.req, *c.by, c.res);
        return StreamedAnswer();
      },
      Logs());
  t.Add(
      "GET", "/v1/groups/{id}", R::kRead,
      [self](const RouteCall& c) { return self->HandleGroup(c.id); }, ShowGroup());
  t.Add(
      "POST", "/v1/groups/{id}", R::kState,
      [self](const RouteCall& c) { return self->HandleUpdateGroup(c.id, *c.req, *c.by); },
      UpdateGroup());
  t.Add(
      "GET", "/v1/queue", R::kRead,
      [self](const RouteCall& c) { return self->HandleQueue(*c.req); }, Queue());
  // Accounting and nodes.
  t.Add(
      "GET", "/v1/usage", R::kRead,
      [self](const RouteCall& c) { return self->HandleUsage(*c.req); }, Usage());
  t.Add(
      "GET", "/v1/teams", R::kRead, [self](const RouteCall&) { return self->HandleListTeams(); },
      Teams());
  t.Add(
      "GET", "/v1/nodes", R::kRead,
      [self](const RouteCall& c) { return self->HandleNodes(c.req->Query("holders") == "1"); },
      Nodes());
  for (const bool drain : {true, false}) {
    t.Add(
        "POST", drain ? "/v1/nodes/{node}/drain" : "/v1/nodes/{node}/undrain", R::kState,
        [self, drain](const RouteCall& c) {
          return self->HandleDrain(c.params[0], drain, c.req->Query("force") == "1", *c.by);
        },
        Drain(drain));
  }
}

net::HttpResponse JobsApi::HandleSubmit(const net::HttpRequest& req, const Principal& by) {
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
  SubmitRequest request;
  json::array warnings;
  if (const auto* yaml = o.if_contains("yaml")) {
    if (!yaml->is_string()) return ErrorResponse(Status::Invalid("'yaml' must be a string"));
    auto parsed = ParseTaskYaml(std::string(yaml->as_string()), "task.yaml");
    if (!parsed.ok()) return ErrorResponse(parsed.status());
    request.spec = parsed->spec;
    for (const auto& w : parsed->warnings) warnings.push_back(json::value(w));
  } else if (const auto* s = o.if_contains("spec")) {
    auto parsed = SpecFromJson(*s);
    if (!parsed.ok()) return ErrorResponse(parsed.status());
    request.spec = std::move(*parsed);
  } else {
    return ErrorResponse(
        Status::Invalid("submission needs 'spec' (a JSON spec) or 'yaml' (a task file's text)"));
  }
  // Jobs belong to, and run as, whoever submits them: a body naming someone else is refused.
  auto user = GetString(o, "user", by.user);
  if (!user.ok()) return ErrorResponse(user.status());
  if (*user != by.user) {
    return ErrorResponse(Status::Forbidden("jobs run as the user who submits them: you are " +
                                           by.user + " (" + by.via + "), the request says '" +
                                           *user + "'"));
  }
  if (by.user == "root" && !c_.options.allow_root_jobs) {
    return ErrorResponse(Status::Forbidden(
        "this server refuses jobs of root (they would run as root on the nodes); submit as "
        "another user, or start the server with --allow-root-jobs"));
  }
  for (const FileMount& m : request.spec.file_mounts) {
    if (m.upload.empty()) {
      return ErrorResponse(Status::Invalid(
          "file_mounts: " + m.target + ": the source must be uploaded first (berth exec does)"));
    }
  }
  if (Status st = c_.uploads.CheckSpec(by.user, request.spec); !st.ok()) return ErrorResponse(st);
  if (by.max_priority && request.spec.priority > *by.max_priority) {
    return ErrorResponse(Status::Forbidden(fmt::format(
        "priority {} is over your limit: {} may submit at priority {} at most (an admin raises "
        "it with `berth admin user set {} --max-priority N`)",
        request.spec.priority, by.user, *by.max_priority, by.user)));
  }
  if (!request.spec.reservation.empty()) {
    Status may = c_.core.reservations().MayUse(request.spec.reservation, by.user, by.team);
    if (!may.ok()) return ErrorResponse(may);
  }
  auto num_jobs = GetInt(o, "num_jobs", 0);
  if (!num_jobs.ok()) return ErrorResponse(num_jobs.status());
  request.key = req.Header("idempotency-key");
  if (request.key.size() > 255 ||
      std::any_of(request.key.begin(), request.key.end(),
                  [](unsigned char c) { return c <= ' ' || c >= 0x7f; })) {
    return ErrorResponse(Status::Invalid(
        "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces"));
  }
  request.user = by.user;
  request.depend_on_any = by.Has(Role::kOperator);
  request.as_group = o.contains("num_jobs");
  // Its range (at least 1, at most the server's jobs per submission) is the Core's rule
  // (Admission::PrepareSubmission); a count past an int is past any limit.
  request.count =
      request.as_group ? static_cast<int>(std::clamp<int64_t>(*num_jobs, -1, INT32_MAX)) : 1;
  auto answer = c_.core.admission().Submit(std::move(request));
  if (!answer.ok()) return ErrorResponse(answer.status());
  json::array ids;
  for (int64_t id : answer->ids) ids.push_back(id);
  json::object out{{"group", answer->group ? json::value(*answer->group) : json::value(nullptr)},
                   {"jobs", std::move(ids)}};
  for (const std::string& w : answer->warnings) warnings.push_back(json::value(w));
  if (!warnings.empty()) out["warnings"] = std::move(warnings);
  return JsonResponse(201, out);
}

net::HttpResponse JobsApi::HandleListJobs(const net::HttpRequest& req) {
  JobQuery q;
  q.all = req.Query("all") == "1" || req.Query("all") == "true";
  auto limit = listing::IntParam(req, "limit", 0, 0, INT32_MAX);
  if (!limit.ok()) return ErrorResponse(limit.status());
  auto page_asked = listing::IntParam(req, "page", 0, 0, INT32_MAX);
  if (!page_asked.ok()) return ErrorResponse(page_asked.status());
  auto before = listing::IntParam(req, "before", 0, 1, INT64_MAX);
  if (!before.ok()) return ErrorResponse(before.status());
  auto filter = listing::RowFilter::FromRequest(req);
  if (!filter.ok()) return ErrorResponse(filter.status());
  q.limit = static_cast<int>(*limit);
  q.group = filter->group;
  if (*before > 0) q.before_id = *before;
  // Always a page: a listing of 100,000 jobs in one answer would cost the server seconds and tens
  // of megabytes. `next` is the cursor of the following page (before=next).
  int page = *page_asked == 0 ? listing::kDefaultPage : static_cast<int>(*page_asked);
  if (q.all && q.limit > 0) page = std::min(page, q.limit);  // `limit` with `all`: a page size
  if (page > listing::kMaxPage) {
    return ErrorResponse(Status::Invalid(
        fmt::format("page {} is over the maximum of {} jobs: ask for pages and follow 'next'", page,
                    listing::kMaxPage)));
  }
  // `berth queue --user U | --team T`: only their jobs. The store cannot filter by user or team,
  // so pages of its rows are read and filtered until this page is full or the rows run out: a
  // page of other users' newer jobs never hides theirs.
  std::vector<JobRow> rows;
  bool more = false;
  for (;;) {
    JobQuery chunk = q;
    if (q.all) {
      chunk.limit = page + 1;
    } else {
      chunk.page = page + 1;
    }
    auto got = c_.store.ListJobs(chunk);
    if (!got.ok()) return ErrorResponse(got.status());
    const bool exhausted = static_cast<int>(got->size()) <= page;
    const std::optional<int64_t> last =
        got->empty() ? std::nullopt : std::optional<int64_t>(got->back().id);
    filter->Keep(*got, [this](const std::string& u) { return c_.core.reads().TeamOf(u); });
    for (JobRow& row : *got) rows.push_back(std::move(row));
    if (static_cast<int>(rows.size()) > page) {
      rows.resize(page);
      more = true;
      break;
    }
    if (exhausted) break;
    q.before_id = last;
  }
  // Rows come from the store (every change is committed before it is visible) and the scheduler's
  // reasons from their own small lock: a listing never waits for a scheduling pass.
  std::vector<int64_t> pending;
  for (const auto& row : rows) {
    if (row.status == JobStatus::kPending) pending.push_back(row.id);
  }
  auto waiting = c_.core.reads().WaitingReasons(pending);
  json::array jobs;
  for (const auto& row : rows) {
    auto it = waiting.find(row.id);
    jobs.push_back(JobJson(row, it == waiting.end() ? "" : it->second));
  }
  json::value next = more ? json::value(rows.back().id) : json::value(nullptr);
  return JsonResponse(200, json::object{{"jobs", std::move(jobs)}, {"more", more}, {"next", next}});
}

net::HttpResponse JobsApi::HandleQueue(const net::HttpRequest& req) {
  auto limit_param = listing::IntParam(req, "limit", 50, 0, listing::kMaxPage);
  if (!limit_param.ok()) return ErrorResponse(limit_param.status());
  auto active_cap_param = listing::IntParam(req, "active_cap", 1000, 0, listing::kMaxQueueActive);
  if (!active_cap_param.ok()) return ErrorResponse(active_cap_param.status());
  const int limit = static_cast<int>(*limit_param);
  const int active_cap = static_cast<int>(*active_cap_param);
  // By user and team only: the summary's active rows come from the core's counts by group.
  const listing::RowFilter filter{.user = req.Query("user"), .team = req.Query("team")};
  ReadModel::QueueOverview ov = c_.core.reads().Overview(filter);
  // The newest finished jobs (grouped ones stand for their group), filtered like the active ones.
  JobQuery finished_query;
  finished_query.finished_only = true;
  finished_query.limit = limit;
  auto finished = c_.store.ListJobs(finished_query);
  if (!finished.ok()) return ErrorResponse(finished.status());
  const bool more_finished = limit > 0 && static_cast<int>(finished->size()) == limit;
  filter.Keep(*finished, [this](const std::string& u) { return c_.core.reads().TeamOf(u); });
  // Every group to show, with the row that stands for it: its newest active job, or (for a group
  // with nothing active) its newest finished one.
  std::map<int64_t, int64_t> group_row;  // group -> job id
  for (const auto& [group, newest] : ov.groups) group_row[group] = newest;
  for (const JobRow& row : *finished) {
    if (row.group) group_row.try_emplace(*row.group, row.id);
  }
  const size_t shown_active = std::min(ov.ungrouped.size(), static_cast<size_t>(active_cap));
  std::vector<int64_t> ids(ov.ungrouped.begin(), ov.ungrouped.begin() + shown_active);
  for (const auto& [group, id] : group_row) ids.push_back(id);
  auto rows = c_.store.GetJobs(ids);
  if (!rows.ok()) return ErrorResponse(rows.status());
  std::map<int64_t, const JobRow*> by_id;
  for (const JobRow& row : *rows) by_id[row.id] = &row;
  for (const JobRow& row : *finished) by_id.try_emplace(row.id, &row);
  std::vector<int64_t> groups;
  for (const auto& [group, id] : group_row) groups.push_back(group);
  auto counts = c_.core.reads().GroupCounts(groups);
  if (!counts.ok()) return ErrorResponse(counts.status());

  std::vector<int64_t> pending;
  for (const JobRow& row : *rows) {
    if (row.status == JobStatus::kPending && !row.group) pending.push_back(row.id);
  }
  auto waiting = c_.core.reads().WaitingReasons(pending);
  // Rows newest first: a group sorts by the job that stands for it.
  std::vector<std::pair<int64_t, json::object>> out;
  for (int64_t id : std::vector<int64_t>(ids.begin(), ids.begin() + shown_active)) {
    auto row = by_id.find(id);
    if (row == by_id.end()) continue;  // ended and reaped since
    auto w = waiting.find(id);
    json::object o = JobJson(*row->second, w == waiting.end() ? "" : w->second);
    o["kind"] = "job";
    out.emplace_back(id, std::move(o));
  }
  int finished_shown = 0;
  std::set<int64_t> listed;  // a job that ended since the overview was taken is listed once
  for (const auto& [id, o] : out) listed.insert(id);
  for (const JobRow& row : *finished) {
    if (row.group || listed.count(row.id)) continue;
    json::object o = JobJson(row, "");
    o["kind"] = "job";
    out.emplace_back(row.id, std::move(o));
    ++finished_shown;
  }
  for (const auto& [group, id] : group_row) {
    auto row = by_id.find(id);
    if (row == by_id.end()) continue;
    out.emplace_back(id, GroupRowJson(*row->second, (*counts)[group]));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  json::array listing;
  for (auto& [id, o] : out) listing.push_back(std::move(o));
  return JsonResponse(200, json::object{{"rows", std::move(listing)},
                                        {"active_not_shown",
                                         static_cast<int64_t>(ov.ungrouped.size() - shown_active)},
                                        {"finished_shown", finished_shown},
                                        {"more_finished", more_finished}});
}

net::HttpResponse JobsApi::HandleGroup(int64_t group) {
  Result<GroupTallies::Tally> g = c_.core.reads().Group(group);
  if (!g.ok()) return ErrorResponse(g.status());
  return JsonResponse(
      200, json::object{{"group", group},
                        {"jobs", g->size},
                        {"user", g->user},
                        {"max_running",
                         g->max_running ? json::value(*g->max_running) : json::value(nullptr)},
                        {"counts", StatusCountsJson(g->Counts())}});
}

net::HttpResponse JobsApi::HandleUpdateGroup(int64_t group, const net::HttpRequest& req,
                                             const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object()) return ErrorResponse(Status::Invalid("the body must be a JSON object"));
  const json::object& o = body->as_object();
  std::optional<int> max_running;
  bool given = false;
  for (const auto& [key, value] : o) {
    if (key != "max_running") {
      return ErrorResponse(Status::Invalid("unknown field '" + std::string(key) +
                                           "' in a group update (known: max_running)"));
    }
    given = true;
    if (value.is_null()) continue;
    if (!value.is_int64() || value.as_int64() < 1 || value.as_int64() > kMaxRunning) {
      return ErrorResponse(Status::Invalid(fmt::format(
          "max_running must be an integer from 1 to {}, or null for no limit", kMaxRunning)));
    }
    max_running = static_cast<int>(value.as_int64());
  }
  if (!given) return ErrorResponse(Status::Invalid("say what to change: max_running"));
  Status st =
      c_.core.admission().SetGroupLimit(group, max_running, by.user, by.Has(Role::kOperator));
  if (!st.ok()) return ErrorResponse(st);
  return HandleGroup(group);
}

net::HttpResponse JobsApi::HandleShowJob(int64_t id, const Principal& by) {
  auto rows = c_.store.GetJobs({id});
  if (!rows.ok()) return ErrorResponse(rows.status());
  if (rows->empty()) return ErrorResponse(Status::NotFound(fmt::format("no job {}", id)));
  const JobRow& row = rows->front();
  std::optional<WaitingDetail> waiting;
  if (row.status == JobStatus::kPending) waiting = c_.core.reads().WaitingDetailOf(id);
  json::object o = JobJson(row, waiting ? waiting->reason : "");
  o["waiting"] = waiting ? json::value(WaitingJson(*waiting)) : json::value(nullptr);
  // A job that asked for no memory is limited by each node's default (docs/security.md
  // "Isolation"): which, on the nodes it was placed on (null: that node enforces none).
  json::object memory_default;
  if (row.resources.memory == 0 && !row.placement.empty()) {
    const std::map<std::string, Mib> defaults = c_.core.reads().JobMemoryDefaults(row.placement);
    for (const NodeGrant& grant : row.placement) {
      auto it = defaults.find(grant.node);
      memory_default[grant.node] =
          it == defaults.end() || it->second == 0
              ? json::value(nullptr)
              : json::value(static_cast<double>(it->second) / static_cast<double>(kMibPerGib));
    }
  }
  o["memory_default"] = std::move(memory_default);
  // Where in the cluster's topology it runs: per level, its domains with how many of its nodes.
  const std::vector<std::string>& levels = c_.core.options().topology_levels;
  if (!levels.empty() && !row.placement.empty()) {
    json::object topology;
    const auto labels_of = c_.core.reads().NodeLabels(row.placement);
    for (const NodeGrant& grant : row.placement) {  // rank order: topology order
      auto labels = labels_of.find(grant.node);
      if (labels == labels_of.end()) continue;
      for (const auto& [level, domain] : NodeTopologyJson(levels, labels->second)) {
        if (!topology.contains(level)) topology[level] = json::object();
        const std::string key = domain.is_string() ? std::string(domain.as_string()) : "none";
        json::object& counts = topology[level].as_object();
        counts[key] = (counts.contains(key) ? counts[key].as_int64() : 0) + 1;
      }
    }
    o["topology"] = std::move(topology);
  }
  // Its notifications (and its group's summary), newest first (docs/notifications.md).
  json::array notices;
  if (auto rows = c_.store.ListNotices(row.user, id, 50); rows.ok()) {
    for (const NoticeRow& n : *rows) notices.push_back(NotifyApi::NoticeJson(n));
  }
  o["notifications"] = std::move(notices);
  // What its GPUs do: null unless it runs on nodes that sample them.
  o["gpu_usage"] = nullptr;
  if (row.status == JobStatus::kRunning) {
    if (auto use = c_.gpu_usage.Of(row.id, row.attempt, c_.clock.Now())) {
      o["gpu_usage"] = json::object{{"known", use->known},
                                    {"ranks", use->ranks},
                                    {"samples", use->samples},
                                    {"mean_sm", use->mean_sm},
                                    {"p95_sm", use->p95_sm},
                                    {"peak_memory_mib", use->peak_memory_mib},
                                    {"idle_seconds", use->idle_ms / 1000},
                                    {"idle_for_seconds", use->idle_for_ms / 1000}};
    }
  }
  // The spec holds the job's environment (often secrets): its owner's and operators' to read.
  o["spec"] = nullptr;
  // What it waits for is everyone's to see.
  o["depends_on"] = json::array();
  auto spec = c_.store.GetSpec(row.spec_id);
  if (spec.ok()) {
    auto v = ParseJson(*spec, "stored spec");
    if (v.ok() && v->is_object()) {
      if (const auto* deps = v->as_object().if_contains("depends_on")) o["depends_on"] = *deps;
      if (MayActOn(by, row)) o["spec"] = std::move(*v);
    }
  }
  auto events = c_.store.GetEvents(id);
  if (events.ok()) {
    json::array ev;
    for (const auto& e : *events) {
      ev.push_back(json::object{{"at", FormatRfc3339(e.at)},
                                {"status", std::string(JobStatusName(e.status))},
                                {"attempt", e.attempt},
                                {"reason", e.reason},
                                {"by", e.by.empty() ? json::value(nullptr) : json::value(e.by)}});
    }
    o["events"] = std::move(ev);
  }
  auto attempts = c_.store.GetAttempts(id);
  if (attempts.ok()) {
    json::array at;
    for (const auto& a : *attempts) at.push_back(AttemptJson(a, row));
    o["attempts"] = std::move(at);
  }
  return JsonResponse(200, o);
}

net::HttpResponse JobsApi::HandleCancel(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object())
    return ErrorResponse(Status::Invalid("request body must be a JSON object"));
  const json::object& o = body->as_object();
  auto all = GetBool(o, "all");
  auto all_users = GetBool(o, "all_users");
  auto user = GetString(o, "user");
  auto group = GetInt(o, "group", -1);
  auto why = GetString(o, "reason");
  for (auto* st :
       {&all.status(), &all_users.status(), &user.status(), &group.status(), &why.status()}) {
    if (!st->ok()) return ErrorResponse(*st);
  }
  if (why->size() > 200 ||
      std::any_of(why->begin(), why->end(), [](unsigned char c) { return c < ' ' || c == 0x7f; })) {
    return ErrorResponse(
        Status::Invalid("'reason' must be at most 200 characters on one line, without controls"));
  }
  CancelRequest request;
  if (const auto* v = o.if_contains("ids")) {
    if (!v->is_array()) return ErrorResponse(Status::Invalid("'ids' must be an array of job ids"));
    for (const auto& e : v->as_array()) {
      auto id = AsInt(e);
      if (!id || *id <= 0)
        return ErrorResponse(Status::Invalid("'ids' must hold positive integers"));
      request.ids.push_back(*id);
    }
  }
  request.all = *all;
  request.all_users = *all_users;
  if (*group >= 0) request.group = *group;
  if (!user->empty() && *user != by.user) {
    return ErrorResponse(Status::Forbidden("you are " + by.user + " (" + by.via +
                                           "), the request says '" + *user + "'"));
  }
  if (request.all_users) {
    BERTH_RESPOND_IF_ERROR(NeedRole(by, Role::kOperator, "cancelling every user's jobs"));
  }
  request.user = by.user;
  request.cancel_any = by.Has(Role::kOperator);
  request.why = *why;
  auto answer = c_.core.admission().Cancel(request);
  if (!answer.ok()) return ErrorResponse(answer.status());
  if (!answer->forbidden.empty() && answer->cancelled.empty() && answer->already_finished.empty() &&
      answer->not_found.empty()) {
    return ErrorResponse(Status::Forbidden(fmt::format(
        "job {} is not yours: cancelling another user's job needs the operator role ({} is {})",
        fmt::join(answer->forbidden, ", "), by.user, RoleName(by.role))));
  }
  auto ids = [](const std::vector<int64_t>& v) {
    json::array a;
    for (int64_t id : v) a.push_back(id);
    return a;
  };
  return JsonResponse(200, json::object{{"cancelled", ids(answer->cancelled)},
                                        {"already_finished", ids(answer->already_finished)},
                                        {"not_found", ids(answer->not_found)},
                                        {"forbidden", ids(answer->forbidden)}});
}

net::HttpResponse JobsApi::HandleRequeue(int64_t id, const Principal& by) {
  Status st = c_.core.admission().Requeue(id, by.user, by.Has(Role::kOperator));
  if (st.code() == Code::kConflict) {
    auto found = c_.core.reads().JobRowOf(id);
    if (found.status().code() == Code::kNotFound) st = found.status();
  }
  if (!st.ok()) return ErrorResponse(st);
  return JsonResponse(200, json::object{{"id", id}, {"status", "PENDING"}});
}

net::HttpResponse JobsApi::HandleNodes(bool holders) {
  std::map<std::string, std::map<int, std::vector<ReadModel::Holder>>> held;
  if (holders) held = c_.core.reads().DeviceHolders();
  json::array nodes;
  const TimeMs now = c_.clock.Now();
  for (const auto& node : c_.core.reads().Nodes()) {
    json::object o = NodeJson(node);
    if (!c_.core.options().topology_levels.empty()) {
      o["topology"] = NodeTopologyJson(c_.core.options().topology_levels, node.row.labels);
    }
    // Each whole GPU's utilisation as the node last sampled it (docs/idle.md; none: not sampled).
    const std::map<int, proto::GpuNow> gpus_now = c_.gpu_usage.GpusOf(node.row.name, now);
    if (!gpus_now.empty()) {
      for (auto& dv : o["devices"].as_array()) {
        json::object& d = dv.as_object();
        auto it = gpus_now.find(static_cast<int>(AsInt(d["index"]).value_or(-1)));
        if (d.contains("gpu") || it == gpus_now.end()) continue;  // (a MIG slice: not sampled)
        d["sm"] = it->second.sm;
        d["memory_used_mib"] = it->second.memory_mib;
      }
    }
    if (holders) {
      // Each device's holders: {"id": job, "user": its owner} (two or more for shared devices).
      const auto& on_node = held[node.row.name];
      for (auto& dv : o["devices"].as_array()) {
        json::object& d = dv.as_object();
        json::array jobs;
        auto it = on_node.find(static_cast<int>(AsInt(d["index"]).value_or(-1)));
        if (it != on_node.end()) {
          for (const auto& [id, user] : it->second) {
            jobs.push_back(json::object{{"id", id}, {"user", user}});
          }
        }
        d["jobs"] = std::move(jobs);
      }
    }
    nodes.push_back(std::move(o));
  }
  return JsonResponse(200, json::object{{"nodes", std::move(nodes)}});
}

net::HttpResponse JobsApi::HandleDrain(const std::string& name, bool drain, bool force,
                                       const Principal& by) {
  BERTH_RESPOND_IF_ERROR(
      NeedRole(by, Role::kOperator, std::string(drain ? "draining" : "undraining") + " a node"));
  auto node = c_.core.agents().Drain(name, drain, by.user, force);
  if (!node.ok()) return ErrorResponse(node.status());
  return JsonResponse(200, NodeJson(*node));
}

void JobsApi::HandleLogs(int64_t id, const net::HttpRequest& req, const Principal& by,
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
  auto found = c_.core.reads().JobRowOf(id);
  if (!found.ok()) {
    res->Send(ErrorResponse(found.status().code() == Code::kNotFound
                                ? found.status()
                                : Status::NotFound(fmt::format("no job {}", id))));
    return;
  }
  const auto& [row, live] = *found;
  if (!MayActOn(by, row)) {
    res->Send(ErrorResponse(Status::Forbidden(fmt::format(
        "job {} belongs to {}: reading another user's logs needs the operator role ({} is {})", id,
        row.user, by.user, RoleName(by.role)))));
    return;
  }
  if (rank >= row.num_nodes) {
    res->Send(ErrorResponse(
        Status::Invalid(fmt::format("job {} has ranks 0..{}", id, row.num_nodes - 1))));
    return;
  }
  if (rank == LogStore::kAllRanks && row.num_nodes == 1) rank = 0;  // a single node's output
  if (attempt == 0) attempt = row.attempt;
  constexpr size_t kMaxChunk = 1 << 20;
  bool has_data = attempt > 0 && c_.logs.Size(id, attempt, rank) > offset;
  if (has_data || !live || wait_ms == 0) {
    // With timestamps=1 each line is prefixed by when it arrived; the offset stays the log's.
    size_t raw = 0;
    std::string data;
    if (attempt > 0 && req.Query("timestamps") == "1") {
      data = c_.logs.ReadStamped(id, attempt, rank, offset, kMaxChunk, &raw);
    } else if (attempt > 0) {
      data = c_.logs.Read(id, attempt, rank, offset, kMaxChunk);
      raw = data.size();
    }
    net::HttpResponse r;
    r.content_type = "application/octet-stream";
    r.headers.push_back({"X-Berth-Offset", std::to_string(offset + static_cast<int64_t>(raw))});
    r.headers.push_back({"X-Berth-Attempt", std::to_string(attempt)});
    // The job's latest attempt: a follower of an earlier one learns that it moved on.
    r.headers.push_back({"X-Berth-Latest-Attempt", std::to_string(row.attempt)});
    r.headers.push_back({"X-Berth-Status", std::string(JobStatusName(row.status))});
    r.headers.push_back({"X-Berth-Done", !live && raw < kMaxChunk ? "1" : "0"});
    r.body = std::move(data);
    res->Send(std::move(r));
    return;
  }
  // Long poll: answer when output arrives or the job ends, or at the deadline with nothing. The
  // answer is made again from scratch (with no wait) on the read executor.
  auto fired = std::make_shared<std::atomic<bool>>(false);
  auto again = [this, id, req, by, res, fired]() {
    if (fired->exchange(true)) return;
    // Within the executor's cap like any request: a flood of followers is answered busy (the CLI
    // asks again), not queued without bound.
    const bool queued = c_.read_exec.TryPost(
        [this, id, req, by, res] {
          net::HttpRequest now = req;
          // Moved in rather than assigned from a literal, which gcc 12 warns about (-Wrestrict,
          // a false positive) in the release build.
          now.query.insert_or_assign("wait_ms", std::string("0"));
          HandleLogs(id, now, by, res);
        },
        kMaxQueuedRequests);
    if (!queued) res->Send(BusyResponse());
  };
  auto waiter = c_.core.reads().AddLogWaiter(id, attempt, again);
  if (!waiter) {  // ended (or moved to another attempt) meanwhile
    again();
    return;
  }
  if (c_.logs.Size(id, attempt, rank) > offset) {  // output arrived before the waiter was there
    c_.core.reads().RemoveLogWaiter(id, *waiter);
    again();
    return;
  }
  c_.http.RunAfter(wait_ms, [this, id, waiter, again] {
    // The deadline came first: forget the waiter, so that a silent job's followers do not pile up.
    // On the read executor: that takes the core's lock, which an I/O thread must never wait for
    // (it would hold up every connection dealt to that thread, and the first one accepts them all).
    const bool queued = c_.read_exec.TryPost(
        [this, id, waiter, again] {
          c_.core.reads().RemoveLogWaiter(id, *waiter);
          again();
        },
        kMaxQueuedRequests);
    // Busy: answered now; the waiter goes when the job writes or ends (the followers' own bound).
    if (!queued) again();
  });
}

}  // namespace berth
