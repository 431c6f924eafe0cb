// The dashboard (docs/dashboard.md): its embedded files, the way in (one-time login links and
// sessions, server/http/web_sessions.h), and the two reads only it needs — cluster totals and a
// queue sorted, filtered and paged on the server, so that a browser is never sent 100,000 jobs.
#include "server/http/dashboard_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "common/quantity.h"
#include "common/strings.h"
#include "server/http/api_docs.h"
#include "server/http/job_json.h"
#include "server/http/responses.h"
#include "server/http/web_assets.h"
#include "server/listing.h"

namespace berth {

namespace {

// What every page of ours says to the browser: run only our own files, never inside a frame,
// send no Referer (the login link carries a code).
void AddPageHeaders(net::HttpResponse& r) {
  r.headers.push_back(
      {"Content-Security-Policy",
       "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"});
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"X-Frame-Options", "DENY"});
  r.headers.push_back({"Referrer-Policy", "no-referrer"});
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

void DashboardApi::AddRoutes(RouteTable& t, DashboardApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  // The dashboard's ways in, answered before anyone is identified (its files: HandleWebAsset).
  t.Add(
      "GET", "/login", R::kIoThread,
      [self](const RouteCall& c) { return self->HandleLoginPage(*c.req); }, LoginPage(),
      Callers::kAnyone);
  t.Add(
      "POST", "/v1/dashboard/login", R::kRead,
      [self](const RouteCall& c) { return self->HandleSessionLogin(*c.req); }, SessionLogin(),
      Callers::kAnyone);
  // The dashboard.
  t.Add(
      "POST", "/v1/dashboard/link", R::kState,
      [self](const RouteCall& c) { return self->HandleLoginLink(*c.req, *c.by); }, LoginLink());
  t.Add(
      "GET", "/v1/dashboard/session", R::kRead,
      [self](const RouteCall& c) { return self->HandleSessionInfo(*c.req, *c.by); }, SessionInfo());
  t.Add(
      "POST", "/v1/dashboard/logout", R::kRead,
      [self](const RouteCall& c) { return self->HandleLogout(*c.req); }, Logout());
  t.Add(
      "GET", "/v1/dashboard/overview", R::kRead,
      [self](const RouteCall&) { return self->HandleOverview(); }, Overview());
  t.Add(
      "GET", "/v1/dashboard/queue", R::kRead,
      [self](const RouteCall& c) { return self->HandleDashboardQueue(*c.req); }, DashboardQueue());
}

std::string DashboardApi::SessionCookie(const std::string& id, int64_t max_age_s) const {
  return fmt::format("{}_{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
                     WebSessions::kCookie, c_.http.port(), id, max_age_s,
                     c_.tls_fingerprint.empty() ? "" : "; Secure");
}

std::optional<net::HttpResponse> DashboardApi::HandleWebAsset(const net::HttpRequest& req) {
  const WebAsset* asset = FindWebAsset(req.path);
  if (asset == nullptr) return std::nullopt;
  net::HttpResponse r;
  AddPageHeaders(r);
  // Revalidated every time (a new binary serves new files), answered with 304 when unchanged.
  r.headers.push_back({"Cache-Control", "no-cache"});
  r.headers.push_back({"ETag", std::string(asset->etag)});
  if (req.Header("if-none-match") == asset->etag) {
    r.status = 304;
    r.content_type = "";
    return r;
  }
  r.content_type = std::string(asset->content_type);
  r.body = std::string(asset->body);
  return r;
}

net::HttpResponse DashboardApi::HandleLoginPage(const net::HttpRequest& req) {
  net::HttpResponse r;
  AddPageHeaders(r);
  r.headers.push_back({"Cache-Control", "no-store"});
  r.content_type = "text/html; charset=utf-8";
  auto started = c_.sessions.Redeem(req.Query("code"));
  if (!started.ok()) {
    r.status = 401;
    r.body =
        "<!doctype html><meta charset=utf-8><title>berth: login link refused</title>"
        "<link rel=stylesheet href=/app.css><main class=login><h1>berth</h1><p class=error>" +
        HtmlEscape(started.status().message()) +
        "</p><p><a href=/>Log in with a token instead</a></p></main>";
    return r;
  }
  r.headers.push_back({"Set-Cookie", SessionCookie(started->id, WebSessions::kSessionTtl / 1000)});
  // A page, not a redirect: the dashboard is then opened by our own origin, so the SameSite=Strict
  // cookie rides along whatever site the link was clicked on; `replace` keeps the spent code out
  // of the browser's history.
  r.body =
      "<!doctype html><meta charset=utf-8><title>berth</title>"
      "<meta http-equiv=refresh content=\"0;url=/\"><p>Logged in. <a href=/>Open the "
      "dashboard</a></p>";
  return r;
}

net::HttpResponse DashboardApi::HandleSessionLogin(const net::HttpRequest& req) {
  // A JSON body only: a form of another site cannot send one without the browser asking us first.
  if (req.Header("content-type").rfind("application/json", 0) != 0) {
    return ErrorResponse(Status::Invalid("log in with a JSON body {\"token\": ...}"));
  }
  auto body = ParseJson(req.body);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object())
    return ErrorResponse(Status::Invalid("request body must be a JSON object"));
  auto secret = GetString(body->as_object(), "token");
  if (!secret.ok()) return ErrorResponse(secret.status());
  if (secret->empty()) return ErrorResponse(Status::Invalid("'token' is empty"));
  // A token is checked exactly as the API checks it (a private server, the cluster token).
  net::HttpRequest as_bearer;
  as_bearer.peer = req.peer;
  as_bearer.headers["authorization"] = "Bearer " + *secret;
  auto who = c_.identity.Identify(as_bearer);
  if (!who.ok()) return ErrorResponse(who.status());
  if (!who->is_user) {
    return ErrorResponse(Status::Forbidden(
        "the cluster token identifies nodes, not users: log in with your own token"));
  }
  std::optional<DurationMs> valid_for;
  if (who->token_expires) valid_for = *who->token_expires - c_.clock.Now();
  StartedSession s = c_.sessions.Start(who->user, *secret, valid_for);
  net::HttpResponse r =
      JsonResponse(200, json::object{{"user", who->user}, {"csrf", s.session.csrf}});
  const DurationMs ttl =
      valid_for ? std::min(*valid_for, WebSessions::kSessionTtl) : WebSessions::kSessionTtl;
  r.headers.push_back({"Set-Cookie", SessionCookie(s.id, std::max<DurationMs>(0, ttl) / 1000)});
  return r;
}

net::HttpResponse DashboardApi::HandleLoginLink(const net::HttpRequest& req, const Principal& by) {
  // A link is a new session: only for a user identified by the kernel or their own token. Not for
  // a dashboard session (it would outlive its token and renew itself for ever), nor for a user a
  // node speaks for (a node's word is capped at operator; a session would not be).
  if (!req.Header("x-berth-on-behalf-of").empty()) {
    return ErrorResponse(Status::Forbidden(
        "a dashboard link cannot be made through a node's socket: ask on the server's machine, or "
        "with your own token (berth login)"));
  }
  if (by.via.rfind("dashboard", 0) == 0) {
    return ErrorResponse(
        Status::Forbidden("a dashboard session cannot make login links: use `berth dashboard`"));
  }
  std::string secret;
  if (std::string auth = req.Header("authorization"); auth.rfind("Bearer ", 0) == 0) {
    secret = auth.substr(7);  // the session stays bound to the token that asked for it
  }
  const std::string path = "/login?code=" + c_.sessions.NewLoginCode(by.user, secret);
  return JsonResponse(201, json::object{{"user", by.user},
                                        {"path", path},
                                        {"url", ServerUrl(c_) + path},
                                        {"expires_in_s", WebSessions::kCodeTtl / 1000}});
}

net::HttpResponse DashboardApi::HandleSessionInfo(const net::HttpRequest& req,
                                                  const Principal& by) {
  json::object o{{"user", by.user},          {"role", std::string(RoleName(by.role))},
                 {"team", by.team},          {"via", by.via},
                 {"version", BERTH_VERSION}, {"csrf", nullptr}};
  if (auto s = c_.sessions.FindInCookies(req.Header("cookie"))) o["csrf"] = s->session.csrf;
  return JsonResponse(200, o);
}

net::HttpResponse DashboardApi::HandleLogout(const net::HttpRequest& req) {
  if (auto s = c_.sessions.FindInCookies(req.Header("cookie"))) c_.sessions.End(s->id);
  net::HttpResponse r = JsonResponse(200, json::object{{"ok", true}});
  r.headers.push_back({"Set-Cookie", SessionCookie("", 0)});
  return r;
}

json::array DashboardApi::IdleGpusJson() {
  // Who holds idle GPUs now (docs/idle.md): the running attempts whose sampled GPUs are all idle,
  // longest idle first, at most kMaxIdleShown.
  constexpr size_t kMaxIdleShown = 20;
  std::vector<std::pair<std::pair<int64_t, int>, JobGpuUse>> idle;
  for (const auto& [attempt, use] : c_.gpu_usage.All(c_.clock.Now())) {
    if (use.known && use.idle_for_ms > 0) idle.emplace_back(attempt, use);
  }
  std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) {
    return a.second.idle_for_ms > b.second.idle_for_ms;
  });
  json::array out;
  for (const auto& [attempt, use] : idle) {
    if (out.size() >= kMaxIdleShown) break;
    auto found = c_.core.reads().JobRowOf(attempt.first);
    if (!found.ok() || !found->second || found->first.attempt != attempt.second) continue;
    const JobRow& row = found->first;
    out.push_back(json::object{
        {"job", row.id},
        {"user", row.user},
        {"gpus", static_cast<double>(TotalGpuMilli(row.resources, row.placement)) / kMilliPerGpu},
        {"idle_for_seconds", use.idle_for_ms / 1000},
        {"mean_sm", use.mean_sm}});
  }
  return out;
}

net::HttpResponse DashboardApi::HandleOverview() {
  ReadModel::Totals t = c_.core.reads().ClusterTotals();
  json::object jobs;
  for (const auto& [status, n] : t.jobs) jobs[status] = n;
  json::object nodes;
  for (const auto& [state, n] : t.nodes) nodes[state] = n;
  json::array gpus;
  for (const auto& [type, g] : t.gpus) {
    gpus.push_back(json::object{{"type", type},
                                {"total", static_cast<double>(g.total) / kMilliPerGpu},
                                {"used", static_cast<double>(g.used) / kMilliPerGpu},
                                {"down", static_cast<double>(g.down) / kMilliPerGpu}});
  }
  // The newest failures, for the overview's list.
  JobQuery q;
  q.finished_only = true;
  q.limit = 500;
  json::array failures;
  if (auto finished = c_.store.ListJobs(q); finished.ok()) {
    for (const JobRow& row : *finished) {
      if (row.status != JobStatus::kFailed) continue;
      failures.push_back(JobJson(row, ""));
      if (failures.size() == 10) break;
    }
  }
  return JsonResponse(200,
                      json::object{{"jobs", std::move(jobs)},
                                   {"nodes", std::move(nodes)},
                                   {"gpus", std::move(gpus)},
                                   {"idle_gpus", IdleGpusJson()},
                                   {"cpus", json::object{{"total", CpusFromMilli(t.cpus)},
                                                         {"used", CpusFromMilli(t.cpus_used)}}},
                                   {"memory", json::object{{"total", GibFromMib(t.memory)},
                                                           {"used", GibFromMib(t.memory_used)}}},
                                   {"recent_failures", std::move(failures)}});
}

net::HttpResponse DashboardApi::HandleDashboardQueue(const net::HttpRequest& req) {
  auto offset_param = listing::IntParam(req, "offset", 0, 0, listing::kMaxOffset);
  if (!offset_param.ok()) return ErrorResponse(offset_param.status());
  auto limit_param = listing::IntParam(req, "limit", 100, 1, listing::kMaxDashboardPage);
  if (!limit_param.ok()) return ErrorResponse(limit_param.status());
  auto filter_param = listing::RowFilter::FromRequest(req);
  if (!filter_param.ok()) return ErrorResponse(filter_param.status());
  const int offset = static_cast<int>(*offset_param);
  const int limit = static_cast<int>(*limit_param);
  const listing::RowFilter& filter = *filter_param;
  const std::string view = req.Query("view", "active");
  if (view != "active" && view != "finished") {
    return ErrorResponse(
        Status::Invalid("view must be 'active' or 'finished', got '" + view + "'"));
  }
  std::string sort = req.Query("sort", "-id");
  const bool descending = !sort.empty() && sort[0] == '-';
  if (descending) sort.erase(0, 1);
  static const std::set<std::string> kSorts = {"id", "priority", "user", "status"};
  if (!kSorts.count(sort)) {
    return ErrorResponse(Status::Invalid(
        "sort must be one of id, priority, user, status (with '-' for descending), got '" +
        req.Query("sort") + "'"));
  }

  json::object page{{"view", view}, {"offset", offset}, {"limit", limit}};
  Status filled = view == "finished"
                      ? DashboardFinishedPage(filter, offset, limit, page)
                      : DashboardActivePage(filter, sort, descending, offset, limit, page);
  if (!filled.ok()) return ErrorResponse(filled);
  return JsonResponse(200, page);
}

// The store's newest finished jobs, filtered here; newest first only.
Status DashboardApi::DashboardFinishedPage(const listing::RowFilter& filter, int offset, int limit,
                                           json::object& page) {
  json::array out_rows;
  {
    JobQuery q;
    q.finished_only = true;
    q.group = filter.group;
    if (offset + limit > listing::kMaxFinishedScan) {
      return Status::Invalid(fmt::format(
          "the finished view pages through the newest {} finished jobs only (offset + limit)",
          listing::kMaxFinishedScan));
    }
    const bool filtered = !filter.user.empty() || !filter.team.empty() || filter.status;
    q.limit = filtered ? listing::kMaxFinishedScan
                       : std::min(offset + limit + 1, listing::kMaxFinishedScan);
    auto rows = c_.store.ListJobs(q);
    if (!rows.ok()) return rows.status();
    filter.Keep(*rows, [this](const std::string& u) { return c_.core.reads().TeamOf(u); });
    for (int i = offset; i < static_cast<int>(rows->size()) && i < offset + limit; ++i) {
      json::object o = JobJson((*rows)[static_cast<size_t>(i)], "");
      o["kind"] = "job";
      out_rows.push_back(std::move(o));
    }
    page["more"] = static_cast<int>(rows->size()) > offset + limit;
    page["total"] = nullptr;  // not counted: the finished history is unbounded
    page["rows"] = std::move(out_rows);
  }
  return Status::Ok();
}

// Active jobs from the core's memory; a bulk group is one row (its newest matching job stands for
// it) unless the view is of that group.
Status DashboardApi::DashboardActivePage(const listing::RowFilter& filter, const std::string& sort,
                                         bool descending, int offset, int limit,
                                         json::object& page) {
  json::array out_rows;
  std::vector<ReadModel::QueueEntry> entries = c_.core.reads().ActiveEntries(filter);
  struct Row {
    ReadModel::QueueEntry entry;
    int64_t members = 1;  // matching active jobs it stands for
  };
  std::vector<Row> rows;
  rows.reserve(entries.size());
  std::unordered_map<int64_t, size_t> group_row;
  for (ReadModel::QueueEntry& e : entries) {
    if (e.group && !filter.group) {
      auto [it, fresh] = group_row.try_emplace(*e.group, rows.size());
      if (!fresh) {
        ++rows[it->second].members;
        continue;
      }
    }
    rows.push_back(Row{std::move(e), 1});
  }
  auto key_less = [&](const Row& a, const Row& b) {
    const ReadModel::QueueEntry& x = a.entry;
    const ReadModel::QueueEntry& y = b.entry;
    if (sort == "priority" && x.priority != y.priority) return x.priority < y.priority;
    if (sort == "user" && x.user != y.user) return x.user < y.user;
    if (sort == "status" && x.status != y.status) return x.status < y.status;
    return x.id < y.id;
  };
  if (sort != "id" || !descending) {
    std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
      return descending ? key_less(b, a) : key_less(a, b);
    });
  }
  const size_t first = std::min(rows.size(), static_cast<size_t>(offset));
  const size_t last = std::min(rows.size(), first + static_cast<size_t>(limit));
  std::vector<int64_t> ids;
  std::vector<int64_t> groups;
  std::vector<int64_t> pending;
  for (size_t i = first; i < last; ++i) {
    const ReadModel::QueueEntry& e = rows[i].entry;
    ids.push_back(e.id);
    if (e.group && !filter.group) {
      groups.push_back(*e.group);
    } else if (e.status == JobStatus::kPending) {
      pending.push_back(e.id);
    }
  }
  auto job_rows = c_.store.GetJobs(ids);
  if (!job_rows.ok()) return job_rows.status();
  auto counts = c_.core.reads().GroupCounts(groups);
  if (!counts.ok()) return counts.status();
  auto waiting = c_.core.reads().WaitingReasons(pending);
  std::unordered_map<int64_t, const JobRow*> by_id;
  for (const JobRow& r : *job_rows) by_id[r.id] = &r;
  for (size_t i = first; i < last; ++i) {
    auto found = by_id.find(rows[i].entry.id);
    if (found == by_id.end()) continue;  // gone meanwhile
    const JobRow& row = *found->second;
    if (row.group && !filter.group) {
      json::object g = GroupRowJson(row, (*counts)[*row.group]);
      g["matching"] = rows[i].members;
      out_rows.push_back(std::move(g));
      continue;
    }
    auto w = waiting.find(row.id);
    json::object o = JobJson(row, w == waiting.end() ? "" : w->second);
    o["kind"] = "job";
    out_rows.push_back(std::move(o));
  }
  page["total"] = static_cast<int64_t>(rows.size());
  page["more"] = last < rows.size();
  page["rows"] = std::move(out_rows);
  return Status::Ok();
}

}  // namespace berth
