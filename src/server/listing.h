// Listings: GET /v1/jobs, /v1/queue and /v1/dashboard/queue read their query parameters one way,
// with one set of caps, and keep rows by one filter (user, team, status, group). docs/api.md
// documents the parameters and caps.
//
// Thread-safety: pure, but for RowFilter::Keep, which calls the team lookup it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/job_status.h"
#include "common/status.h"
#include "store/store.h"

namespace berth::net {
struct HttpRequest;
}

namespace berth::listing {

// Rows in one page of GET /v1/jobs, and finished jobs in GET /v1/queue.
inline constexpr int kMaxPage = 2'000;
inline constexpr int kDefaultPage = 1'000;
// Active jobs in one answer of GET /v1/queue (active_cap).
inline constexpr int kMaxQueueActive = 10'000;
// The dashboard's queue: rows per page, and how deep a page may start.
inline constexpr int kMaxDashboardPage = 500;
inline constexpr int kMaxOffset = 1'000'000;
// Finished jobs are read from the store newest first; a filtered view looks at this many at most.
inline constexpr int kMaxFinishedScan = 20'000;

// The integer query parameter `name` of `req`, from `lo` to `hi`; `fallback` when it is absent.
// Else InvalidArgument naming the parameter and its range, then `hint` if any.
Result<int64_t> IntParam(const net::HttpRequest& req, const std::string& name, int64_t fallback,
                         int64_t lo, int64_t hi, const std::string& hint = "");

// Which jobs a listing keeps.
struct RowFilter {
  std::string user;
  std::string team;  // "-": the default team
  std::optional<JobStatus> status;
  std::optional<int64_t> group;

  // user=, team=, status= and group= of `req`; InvalidArgument for an unknown status or a group
  // that is not a job group's id.
  static Result<RowFilter> FromRequest(const net::HttpRequest& req);
  // The team as users' rows name it ("" for the default team).
  std::string team_name() const { return team == "-" ? "" : team; }
  // Whether a job of `user` with `status` and `group` passes; `in_team(user)` answers whether the
  // user is in the team (asked only when the filter names one).
  bool Passes(const std::string& user, JobStatus status, std::optional<int64_t> group,
              const std::function<bool(const std::string&)>& in_team) const;
  // Keeps the rows that pass; `team_of` is asked once per user.
  void Keep(std::vector<JobRow>& rows,
            const std::function<std::string(const std::string&)>& team_of) const;
};

}  // namespace berth::listing
