#include "server/listing.h"

#include <fmt/format.h>

#include <map>

#include "common/strings.h"
#include "net/http.h"

namespace berth::listing {

Result<int64_t> IntParam(const net::HttpRequest& req, const std::string& name, int64_t fallback,
                         int64_t lo, int64_t hi, const std::string& hint) {
  const std::string text = req.Query(name);
  if (text.empty()) return fallback;
  const bool negative = text[0] == '-';
  const std::optional<int64_t> magnitude = ParseDecimal(negative ? text.substr(1) : text);
  const int64_t value = magnitude ? (negative ? -*magnitude : *magnitude) : 0;
  if (!magnitude || value < lo || value > hi) {
    return Status::Invalid(fmt::format("'{}': expected one of the integers {} to {}, got '{}'{}",
                                       name, lo, hi, text, hint.empty() ? "" : "; " + hint));
  }
  return value;
}

Result<RowFilter> RowFilter::FromRequest(const net::HttpRequest& req) {
  RowFilter filter;
  filter.user = req.Query("user");
  filter.team = req.Query("team");
  if (std::string s = req.Query("status"); !s.empty()) {
    filter.status = ParseJobStatus(s);
    if (!filter.status) return Status::Invalid("unknown status '" + s + "'");
  }
  if (!req.Query("group").empty()) {
    auto group = IntParam(req, "group", 0, 1, INT64_MAX);
    if (!group.ok()) return group.status();
    filter.group = *group;
  }
  return filter;
}

bool RowFilter::Passes(const std::string& job_user, JobStatus job_status,
                       std::optional<int64_t> job_group,
                       const std::function<bool(const std::string&)>& in_team) const {
  if (!user.empty() && job_user != user) return false;
  if (status && job_status != *status) return false;
  if (group && job_group != group) return false;
  return team.empty() || in_team(job_user);
}

void RowFilter::Keep(std::vector<JobRow>& rows,
                     const std::function<std::string(const std::string&)>& team_of) const {
  std::map<std::string, bool> in_team;  // a user's membership, looked up once per user
  auto member = [&](const std::string& u) {
    auto [it, fresh] = in_team.try_emplace(u, false);
    if (fresh) it->second = team_of(u) == team_name();
    return it->second;
  };
  std::erase_if(
      rows, [&](const JobRow& row) { return !Passes(row.user, row.status, row.group, member); });
}

}  // namespace berth::listing
