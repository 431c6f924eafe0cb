// Fair share over HTTP (docs/api.md "Fair share", docs/fair-share.md): usage reports, teams, and
// the numbers behind a waiting job.
#include <fmt/format.h>

#include <cmath>

#include "common/json_util.h"
#include "common/resources.h"
#include "server/http/jobs_api.h"
#include "server/http/responses.h"

namespace berth {
namespace {

constexpr TimeMs kHourMs = 3600 * 1000;

double Gpus(MilliGpu milli) { return static_cast<double>(milli) / kMilliPerGpu; }

json::object GpuAmountsJson(const std::map<std::string, MilliGpu>& amounts) {
  json::object o;
  for (const auto& [type, milli] : amounts) o[type] = Gpus(milli);
  return o;
}

const char* QuotaStateName(sched::Explanation::Quota q) {
  switch (q) {
    case sched::Explanation::Quota::kNoGpu:
      return "no GPU";
    case sched::Explanation::Quota::kWithin:
      return "within quota";
    case sched::Explanation::Quota::kBorrowing:
      return "borrowing";
    case sched::Explanation::Quota::kOverLimit:
      return "over borrow limit";
  }
  return "";
}

json::value TeamName(const std::string& team) {
  return team.empty() ? json::value(nullptr) : json::value(team);
}

// Efficiency: what was used over what was allotted, null where nothing was measured.
json::value Ratio(double used, double allotted) {
  return allotted > 0 ? json::value(used / allotted) : json::value(nullptr);
}

// Adds what still-running attempts used inside [since, until) to the rows from the rollup.
void AddRunning(std::map<std::string, UsageRow>& rows, const std::vector<RunningUsage>& running,
                TimeMs since, TimeMs until, bool by_team) {
  for (const RunningUsage& r : running) {
    UsageRow& row = rows[by_team ? r.team : r.user];
    const TimeMs from = std::max(r.placed_at, since);
    const TimeMs to = std::min(r.ended_at, until);
    if (to > from) {
      const double seconds = static_cast<double>(to - from) / 1000;
      if (r.gpu_milli > 0) row.gpu_seconds[r.gpu_type] += Gpus(r.gpu_milli) * seconds;
      row.cpu_seconds += static_cast<double>(r.cpu_milli) / kMilliPerCpu * seconds;
    }
    if (r.placed_at >= since && r.placed_at < until) {
      row.wait_seconds += static_cast<double>(r.wait_ms) / 1000;
      ++row.waits;
    }
  }
}

}  // namespace

json::object JobsApi::WaitingJson(const WaitingDetail& w) {
  json::object o{{"reason", w.reason}};
  if (!w.explanation || !w.pass) return o;
  const sched::Explanation& x = *w.explanation;
  const sched::Waiting& t = *w.pass;
  auto team_of = [&](int k) {
    return static_cast<size_t>(k) < t.teams().size() ? t.teams()[static_cast<size_t>(k)]
                                                     : std::string();
  };
  const std::string team = team_of(x.team);
  o["position"] = x.position;
  o["team_position"] = x.team_position;
  o["team"] = TeamName(team);
  json::object quota{{"state", QuotaStateName(x.quota_state)}};
  if (x.quota_state != sched::Explanation::Quota::kNoGpu) {
    quota["team_uses"] = Gpus(x.team_uses);
    quota["quota"] = Gpus(x.quota);
    quota["borrow_limit"] = x.borrow_limit ? json::value(Gpus(*x.borrow_limit)) : nullptr;
    quota["job_needs"] = Gpus(x.job_needs);
  }
  o["quota"] = std::move(quota);
  json::object share{{"user_usage", x.user_usage},
                     {"team_usage", x.team_usage},
                     {"team_weight", x.team_weight},
                     {"user_score", x.user_score},
                     {"team_score", x.team_score}};
  // The job that starts next when room appears, and where it stands, to compare with.
  json::value first = nullptr;
  if (x.first_waiting != 0) {
    json::object f{{"job", x.first_waiting}};
    if (auto fw = c_.core.reads().WaitingDetailOf(x.first_waiting); fw && fw->explanation) {
      const sched::Explanation& y = *fw->explanation;
      f["team"] = TeamName(team_of(y.team));
      f["user_score"] = y.user_score;
      f["team_score"] = y.team_score;
    }
    first = std::move(f);
  }
  share["first_waiting"] = std::move(first);
  o["fair_share"] = std::move(share);
  // How many teams the pass weighed: with one, team scores and quotas say nothing (berth show
  // leaves them out).
  o["teams"] = static_cast<int64_t>(t.teams().size());
  o["blocking"] = nullptr;
  if (x.blocking >= 0 && static_cast<size_t>(x.blocking) < t.blockings().size()) {
    const sched::Blocking& b = t.blockings()[static_cast<size_t>(x.blocking)];
    o["blocking"] =
        json::object{{"resource", b.resource},
                     {"needed", b.needed},
                     {"nodes_needed", b.nodes_needed},
                     {"nodes_with_enough", b.nodes_with_enough},
                     {"most_free", b.most_free},
                     {"most_free_node", b.most_free_node.empty() ? json::value(nullptr)
                                                                 : json::value(b.most_free_node)}};
    // Who holds what it needs: the users holding GPUs of that type, most first.
    if (b.resource != "cpus" && b.resource != "memory" && !b.resource.empty()) {
      json::array holders;
      for (const auto& [user, team, milli] : c_.core.reads().Holders(b.resource)) {
        if (holders.size() == 5) break;
        holders.push_back(
            json::object{{"user", user}, {"team", TeamName(team)}, {"gpus", Gpus(milli)}});
      }
      o["blocking"].as_object()["held_by"] = std::move(holders);
    }
  }
  o["reservation"] = nullptr;
  if (x.reservation >= 0 && static_cast<size_t>(x.reservation) < t.reservations().size()) {
    const sched::ReservationView& r = t.reservations()[static_cast<size_t>(x.reservation)];
    json::array nodes;
    for (const std::string& n : r.nodes) nodes.push_back(json::value(n));
    o["reservation"] =
        json::object{{"nodes", std::move(nodes)},
                     {"until", r.until ? TimeToJson(*r.until) : json::value(nullptr)}};
  }
  return o;
}

net::HttpResponse JobsApi::HandleUsage(const net::HttpRequest& req) {
  const TimeMs now = c_.clock.Now();
  auto when = [&](const std::string& name, TimeMs fallback) -> Result<TimeMs> {
    const std::string text = req.Query(name);
    if (text.empty()) return fallback;
    if (auto ago = ParseDuration(text)) return now - *ago;
    if (auto at = ParseRfc3339(text)) return *at;
    return Status::Invalid("'" + name + "' must be a duration back from now (7d, 12h) or a time " +
                           "(2026-11-01T00:00:00Z), not '" + text + "'");
  };
  auto since = when("since", now - 7 * 24 * kHourMs);
  if (!since.ok()) return ErrorResponse(since.status());
  auto until = when("until", now);
  if (!until.ok()) return ErrorResponse(until.status());
  const std::string by = req.Query("by", "user");
  if (by != "user" && by != "team") {
    return ErrorResponse(Status::Invalid("'by' must be user or team, not '" + by + "'"));
  }
  if (*until <= *since) return ErrorResponse(Status::Invalid("'until' must be after 'since'"));
  // The rollup keeps whole hours: the window starts at the hour `since` falls in.
  const TimeMs from = *since / kHourMs * kHourMs;
  auto stored = c_.store.QueryUsage(UsageQuery{from, *until, by == "team"});
  if (!stored.ok()) return ErrorResponse(stored.status());
  std::map<std::string, UsageRow> rows;
  for (UsageRow& r : *stored) rows[r.name] = std::move(r);
  AddRunning(rows, c_.core.reads().RunningAttempts(), from, std::min(*until, now), by == "team");
  json::array out;
  for (const auto& [name, r] : rows) {
    json::object gpu;
    std::map<std::string, double> whole;  // by GPU type, a MIG slice's by its share of its GPU
    for (const auto& [type, seconds] : r.gpu_seconds) {
      if (type.empty() || seconds <= 0) continue;
      gpu[type] = seconds;
      const std::optional<SliceShare> slice = SliceShareOf(type);
      whole[slice ? slice->gpu_type : type] += slice ? seconds * slice->sevenths / 7 : seconds;
    }
    json::object whole_gpu;
    for (const auto& [type, seconds] : whole) whole_gpu[type] = seconds;
    out.push_back(json::object{
        {by, by == "team" ? TeamName(name) : json::value(name)},
        {"gpu_seconds", std::move(gpu)},
        {"whole_gpu_seconds", std::move(whole_gpu)},
        {"cpu_seconds", r.cpu_seconds},
        {"jobs", r.jobs},
        {"mean_wait_s", r.waits > 0 ? r.wait_seconds / static_cast<double>(r.waits) : 0.0},
        {"preemptions", r.preemptions},
        {"used_cpu_seconds", r.used_cpu_seconds},
        {"cpu_efficiency", Ratio(r.used_cpu_seconds, r.measured_cpu_seconds)},
        {"memory_efficiency", Ratio(r.peak_memory_mib_seconds, r.asked_memory_mib_seconds)},
        // Sampled GPUs (docs/idle.md): SM utilisation over their time, and their idle time.
        {"sampled_gpu_seconds", r.gpu_sampled_seconds},
        {"gpu_efficiency", Ratio(r.gpu_busy_seconds, r.gpu_sampled_seconds)},
        {"idle_gpu_seconds", r.idle_gpu_seconds}});
  }
  return JsonResponse(200, json::object{{"rows", std::move(out)},
                                        {"since", TimeToJson(from)},
                                        {"until", TimeToJson(*until)},
                                        {"by", by}});
}

net::HttpResponse JobsApi::HandleListTeams() {
  const TimeMs now = c_.clock.Now();
  (void)now;
  std::map<std::string, TeamRow> teams;
  for (TeamRow& t : c_.accounts.Teams()) teams[t.name] = std::move(t);
  std::map<std::string, std::vector<std::string>> members;
  for (const UserRow& u : c_.accounts.Users()) members[u.team].push_back(u.name);
  auto holdings = c_.core.reads().TeamHoldings();
  for (const auto& [team, held] : holdings) teams.try_emplace(team, TeamRow{.name = team});
  json::array out;
  for (const auto& [name, t] : teams) {
    json::array users;
    for (const std::string& u : members[name]) users.push_back(json::value(u));
    auto held = holdings.find(name);
    out.push_back(json::object{
        {"name", TeamName(name)},
        {"quota", GpuAmountsJson(t.quota)},
        {"borrow_limit", GpuAmountsJson(t.borrow_limit)},
        {"weight", t.weight},
        {"uses",
         GpuAmountsJson(held == holdings.end() ? std::map<std::string, MilliGpu>{} : held->second)},
        {"usage", c_.core.reads().TeamUsage(name)},
        {"users", std::move(users)},
        {"updated_at", t.updated_at ? TimeToJson(t.updated_at) : json::value(nullptr)},
        {"updated_by", t.updated_by}});
  }
  return JsonResponse(200, json::object{{"teams", std::move(out)}});
}

}  // namespace berth
