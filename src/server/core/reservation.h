// Reservation: an operator's promise of nodes to some users for a time, or a maintenance window
// (docs/reservations.md) — its definition, how it is stored (JSON in ReservationRow::spec) and
// shown (the API's JSON), and its window at a given time, as the scheduler takes it
// (sched::ReservedWindow). Pure values and functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/recurrence.h"
#include "sched/cluster.h"
#include "store/store.h"

namespace berth {

struct Reservation {
  std::string name;
  TimeMs start = 0;  // the first occurrence's start
  DurationMs duration = 0;
  std::string repeat;  // "", "daily", "weekly" or a 5-field cron expression (UTC)
  // Where: every node, or these (named, or picked for a GPU count: `gpus` says what was asked).
  bool all_nodes = false;
  std::vector<std::string> nodes;
  std::string gpus;  // "H100:16" as asked, "" when nodes were named
  std::string pool;  // with `gpus`: the pool they were picked in
  // Who: jobs that name it, of these users (none listed: of anyone allowed to name it), or any job
  // of the team's users.
  std::vector<std::string> users;
  std::string team;
  bool maintenance = false;  // no jobs inside the window; nodes come back when it ends
  // At each window's start, jobs running on its nodes that do not belong are preempted (requeued,
  // unless their recovery says otherwise); else they run on.
  bool evict = false;
  // Ends the occurrence early when no job has used its nodes for this long (0: never).
  DurationMs release_unused = 0;
  TimeMs created_at = 0;
  std::string created_by;
  TimeMs updated_at = 0;
  std::string updated_by;
  // An occurrence released early (release_unused), by its start: skipped.
  TimeMs released_start = -1;
};

// The occurrence that holds at `now`, else the next (an occurrence released early counts as over);
// nullopt when none is left.
std::optional<Window> WindowOf(const Reservation& r, TimeMs now);
// Its window at `now` as a pass takes it.
sched::ReservedWindow ViewOf(const Reservation& r, const Window& w);
// Whether `r` covers the node.
bool Covers(const Reservation& r, const std::string& node);
// Whether two reservations share a node and some occurrence of each overlaps one of the other,
// from `now` on (recurring ones: within 400 days); the first such overlap's start when so.
std::optional<TimeMs> FirstOverlap(const Reservation& a, const Reservation& b, TimeMs now);

// ReservationRow::spec and the API's JSON.
json::object ReservationJson(const Reservation& r, TimeMs now);
ReservationRow RowOf(const Reservation& r);
Result<Reservation> ReservationFromRow(const ReservationRow& row);

}  // namespace berth
