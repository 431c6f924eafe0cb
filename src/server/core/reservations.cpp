// Reservations (reservations.h).
#include "server/core/reservations.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/log.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "server/core/node_table.h"

namespace berth {

namespace {

// Names as node and team names are: letters, digits, '-', '_', '.'; 1 to 63 characters.
Status CheckName(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 63 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      });
  if (ok) return Status::Ok();
  return Status::Invalid("invalid reservation name '" + name +
                         "': use 1 to 63 letters, digits, '-', '_' or '.'");
}

// A one-off starting "now" may be a moment in the past by the time it is checked.
constexpr DurationMs kPastSlack = 60'000;

}  // namespace

Result<Reservation> Reservations::Create(const ReservationAsk& ask, const std::string& by) {
  BERTH_RETURN_IF_ERROR(CheckName(ask.name));
  if (!ask.start || !ask.duration) return Status::Invalid("say when: --start and --duration");
  CoreLock lock(s_);
  if (s_.reservations.count(ask.name)) {
    return Status::Conflict("a reservation named '" + ask.name + "' exists");
  }
  const TimeMs now = s_.clock.Now();
  Reservation base;
  base.name = ask.name;
  base.created_at = now;
  base.created_by = by;
  Result<Reservation> r = Apply(ask, std::move(base), now);
  if (!r.ok()) return r.status();
  return Commit(std::move(*r), "reserve create", by);
}

Result<Reservation> Reservations::Update(const ReservationAsk& ask, const std::string& by,
                                         bool admin) {
  CoreLock lock(s_);
  auto it = s_.reservations.find(ask.name);
  if (it == s_.reservations.end()) {
    return Status::NotFound("no reservation named '" + ask.name + "'");
  }
  if (it->second.created_by != by && !admin) {
    return Status::Forbidden("reservation '" + ask.name + "' is " + it->second.created_by +
                             "'s: only they or an admin may change it");
  }
  const TimeMs now = s_.clock.Now();
  Reservation base = it->second;
  // A new time makes a new schedule: an occurrence released early is forgotten.
  if (ask.start || ask.duration || ask.repeat) base.released_start = -1;
  Result<Reservation> r = Apply(ask, std::move(base), now);
  if (!r.ok()) return r.status();
  return Commit(std::move(*r), "reserve update", by);
}

Status Reservations::Delete(const std::string& name, const std::string& by, bool admin) {
  CoreLock lock(s_);
  auto it = s_.reservations.find(name);
  if (it == s_.reservations.end()) return Status::NotFound("no reservation named '" + name + "'");
  if (it->second.created_by != by && !admin) {
    return Status::Forbidden("reservation '" + name + "' is " + it->second.created_by +
                             "'s: only they or an admin may delete it");
  }
  Txn txn;
  txn.by = by;
  txn.batch.reservation_deletes.push_back(name);
  txn.batch.audit.push_back(
      AuditRow{.at = s_.clock.Now(), .by = by, .action = "reserve delete", .target = name});
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  s_.reservations.erase(name);
  last_used_.erase(name);
  s_.RequestPassLocked();
  return Status::Ok();
}

std::vector<Reservation> Reservations::List() {
  CoreLock lock(s_);
  std::vector<Reservation> out;
  for (const auto& [name, r] : s_.reservations) out.push_back(r);
  return out;
}

std::optional<Reservation> Reservations::Get(const std::string& name) {
  CoreLock lock(s_);
  auto it = s_.reservations.find(name);
  if (it == s_.reservations.end()) return std::nullopt;
  return it->second;
}

Status Reservations::MayUse(const std::string& name, const std::string& user,
                            const std::string& team) {
  CoreLock lock(s_);
  auto it = s_.reservations.find(name);
  if (it == s_.reservations.end()) return Status::NotFound("no reservation named '" + name + "'");
  const Reservation& r = it->second;
  if (r.maintenance) {
    return Status::Forbidden("reservation '" + name +
                             "' is a maintenance window: no jobs run in it");
  }
  const bool listed = std::find(r.users.begin(), r.users.end(), user) != r.users.end();
  const bool in_team = !r.team.empty() && r.team == team;
  if (listed || in_team || (r.users.empty() && r.team.empty())) return Status::Ok();
  return Status::Forbidden("user " + user + " may not use reservation '" + name + "' (it is for " +
                           (r.team.empty() ? "users " + Join(r.users, ", ") : "team " + r.team) +
                           ")");
}

Status Reservations::Load(const std::vector<ReservationRow>& rows) {
  CoreLock lock(s_);
  for (const ReservationRow& row : rows) {
    Result<Reservation> r = ReservationFromRow(row);
    if (!r.ok()) return r.status();
    s_.reservations[r->name] = std::move(*r);
  }
  s_.RequestPassLocked();
  return Status::Ok();
}

bool Reservations::Member(const Reservation& r, const JobSpec& spec, const std::string& user,
                          const std::string& team) {
  if (r.maintenance) return false;
  if (!r.team.empty() && r.team == team) return true;
  return spec.reservation == r.name &&
         (r.users.empty() || std::find(r.users.begin(), r.users.end(), user) != r.users.end());
}

void Reservations::Tick() {
  CoreLock lock(s_);
  const TimeMs now = s_.clock.Now();
  const TimeMs last = last_tick_ == 0 ? now : last_tick_;
  if (first_tick_ == 0) first_tick_ = now;
  last_tick_ = now;
  if (s_.reservations.empty()) return;
  Txn txn;
  txn.by = "berth";
  std::vector<Reservation> released;  // applied once committed
  for (const auto& [name, r] : s_.reservations) {
    if (r.maintenance && last < now) HoldAfterMaintenance(txn, r, last, now);
    std::optional<Window> w = WindowOf(r, now);
    if (!w || w->start > now) continue;
    // Evicts once, as the window starts (and on the first tick after a restart inside it).
    if ((r.evict || r.maintenance) && (last < w->start || last == now)) Evict(txn, r, now);
    if (r.release_unused > 0 && Unused(r, *w, now)) {
      released.push_back(r);
      released.back().released_start = w->start;
      txn.batch.reservations.push_back(RowOf(released.back()));
      txn.batch.audit.push_back(
          AuditRow{.at = now,
                   .by = "berth",
                   .action = "reserve release",
                   .target = r.name,
                   .detail = "unused for " + FormatDuration(r.release_unused)});
      txn.out.kick = true;
    }
  }
  if (txn.batch.empty() && !txn.out.kick) return;
  Status st = s_.Execute(txn);
  if (!st.ok()) {
    LogWarn("reservations: not recorded: {}", st.message());
    return;
  }
  for (Reservation& r : released) {
    LogInfo("reservation '{}' released: its nodes ran none of its jobs for {}", r.name,
            FormatDuration(r.release_unused));
    last_used_.erase(r.name);
    s_.reservations[r.name] = std::move(r);
  }
}

std::vector<int64_t> Reservations::JobsOn(const Reservation& r) {
  std::vector<std::string> nodes = r.nodes;
  if (r.all_nodes) {
    nodes.clear();
    for (const auto& [name, node] : s_.nodes) nodes.push_back(name);
  }
  std::set<int64_t> out;
  for (const std::string& node : nodes) {
    // The node's index may name jobs since moved or gone (node_jobs.h): each is checked.
    for (int64_t id : books_.JobsOn(node)) {
      auto it = s_.jobs.find(id);
      if (it == s_.jobs.end() || !it->second.spec || it->second.terminating) continue;
      const JobRow& row = it->second.row;
      if (!IsActive(row.status) || row.status == JobStatus::kPending) continue;
      for (const NodeGrant& g : row.placement) {
        if (g.node == node) out.insert(id);
      }
    }
  }
  return {out.begin(), out.end()};
}

void Reservations::Evict(Txn& txn, const Reservation& r, TimeMs now) {
  std::vector<int64_t> out;
  for (int64_t id : JobsOn(r)) {
    const ActiveJob& job = s_.jobs.at(id);
    if (!Member(r, *job.spec, job.row.user, s_.shares.TeamOf(job.row.user))) out.push_back(id);
  }
  for (int64_t id : out) {
    ActiveJob& job = s_.jobs.at(id);
    const std::string why = (r.maintenance ? "maintenance window '" : "reservation '") + r.name +
                            "' started on its nodes";
    txn.out.events.preempted.push_back("reservation");
    if (job.spec->on_preemption == RecoveryAction::kRequeue) {
      life_.ReturnToQueue(txn, job, why + "; requeued", now, Lifecycle::RequeueCause::kPreempted);
    } else {
      life_.EndJob(txn, job, JobStatus::kPreempted, why, std::nullopt, now);
    }
  }
}

bool Reservations::Unused(const Reservation& r, const Window& w, TimeMs now) {
  TimeMs& used = last_used_[r.name];
  // From the window's start (or this server's, when it started inside the window).
  if (used < w.start) used = std::max(w.start, first_tick_);
  for (int64_t id : JobsOn(r)) {
    const ActiveJob& job = s_.jobs.at(id);
    if (Member(r, *job.spec, job.row.user, s_.shares.TeamOf(job.row.user))) {
      used = now;
      return false;
    }
  }
  return now - used >= r.release_unused;
}

void Reservations::HoldAfterMaintenance(Txn& txn, const Reservation& r, TimeMs last, TimeMs now) {
  // The window that held at the last tick, if it has ended since.
  // (The window that held at `last` or came next: it ended since if its end is past.)
  std::optional<Window> w = WindowOf(r, last);
  if (!w || w->end <= last || w->end > now) return;
  for (auto& [name, runtime] : s_.nodes) {
    if (!Covers(r, name)) continue;
    NodeRuntime& node = s_.nodes.Edit(txn, runtime);
    node.maintenance_ended = w->end;
    node.maintenance = r.name;
    ++node.sched_gen;
    LogInfo("node {}: maintenance window '{}' ended; back in service once its health probes pass",
            name, r.name);
  }
  s_.nodes.CapacityChanged();
  txn.out.kick = true;
}

Result<Reservation> Reservations::Apply(const ReservationAsk& ask, Reservation r, TimeMs now) {
  std::string error;
  if (ask.start) {
    std::optional<TimeMs> start = ParseWhen(*ask.start, now, &error);
    if (!start) return Status::Invalid(error);
    if (*start < now - kPastSlack) {
      return Status::Invalid("--start " + *ask.start + " is in the past");
    }
    r.start = *start;
  }
  if (ask.duration) {
    std::optional<DurationMs> d = ParseDuration(*ask.duration);
    if (!d || *d <= 0) {
      return Status::Invalid("invalid --duration '" + *ask.duration +
                             "': give a length above zero (90m, 2h, 1d)");
    }
    r.duration = *d;
  }
  if (ask.repeat) {
    if (!ParseRecurrence(*ask.repeat, &error)) return Status::Invalid(error);
    r.repeat = *ask.repeat;
  }
  if (ask.release_unused) {
    std::optional<DurationMs> d =
        ask.release_unused->empty() ? DurationMs{0} : ParseDuration(*ask.release_unused);
    if (!d || *d < 0) {
      return Status::Invalid("invalid --release-unused '" + *ask.release_unused + "'");
    }
    r.release_unused = *d;
  }
  if (ask.users) r.users = *ask.users;
  if (ask.team) r.team = *ask.team;
  if (ask.maintenance) r.maintenance = *ask.maintenance;
  if (ask.evict) r.evict = *ask.evict;
  const int wheres = (ask.nodes ? 1 : 0) + (ask.gpus ? 1 : 0) + (ask.all_nodes.value_or(false));
  if (wheres > 1) return Status::Invalid("say where once: --nodes, --gpus or --all");
  if (ask.pool && !ask.gpus) return Status::Invalid("--pool goes with --gpus");
  if (wheres == 1) {
    r.all_nodes = ask.all_nodes.value_or(false);
    r.nodes = ask.nodes.value_or(std::vector<std::string>{});
    r.gpus = ask.gpus.value_or("");
    r.pool = ask.pool.value_or("");
  } else if (!r.all_nodes && r.nodes.empty()) {
    return Status::Invalid("say where: --nodes n1,n2, --gpus TYPE:N [--pool P] or --all");
  }
  if (!r.users.empty() && !r.team.empty()) {
    return Status::Invalid("say who once: --users or --team");
  }
  if (r.maintenance && (!r.users.empty() || !r.team.empty())) {
    return Status::Invalid("a maintenance window is for no one: drop --users and --team");
  }
  if (!WindowOf(r, now)) return Status::Invalid("the reservation has no window left to hold");
  BERTH_RETURN_IF_ERROR(CheckWhere(r, now));
  return r;
}

Status Reservations::CheckWhere(Reservation& r, TimeMs now) {
  // Other reservations whose windows meet this one's, as if it took every node.
  Reservation everywhere = r;
  everywhere.all_nodes = true;
  std::vector<const Reservation*> meeting;
  for (const auto& [name, other] : s_.reservations) {
    if (name != r.name && FirstOverlap(everywhere, other, now)) meeting.push_back(&other);
  }
  if (!r.gpus.empty()) {
    const size_t colon = r.gpus.rfind(':');
    std::optional<int64_t> count =
        colon == std::string::npos ? std::nullopt : ParseDecimal(r.gpus.substr(colon + 1));
    if (colon == 0 || !count || *count < 1 || *count > 100000) {
      return Status::Invalid("invalid --gpus '" + r.gpus + "': give TYPE:COUNT (H100:16)");
    }
    std::vector<sched::NodeView> views;
    std::vector<std::string> excluded;
    for (auto& [name, node] : s_.nodes) views.push_back(NodeTable::ViewOf(node));
    for (const Reservation* other : meeting) {
      if (other->all_nodes) {
        return Status::Invalid("reservation '" + other->name + "' holds every node then");
      }
      excluded.insert(excluded.end(), other->nodes.begin(), other->nodes.end());
    }
    std::string why;
    r.nodes = sched::PickReservedNodes(views, r.gpus.substr(0, colon), static_cast<int>(*count),
                                       r.pool, s_.options.topology_levels, excluded, &why);
    if (r.nodes.empty()) return Status::Invalid("cannot reserve " + r.gpus + ": " + why);
  } else if (!r.all_nodes) {
    std::sort(r.nodes.begin(), r.nodes.end());
    r.nodes.erase(std::unique(r.nodes.begin(), r.nodes.end()), r.nodes.end());
    for (const std::string& node : r.nodes) {
      if (!s_.nodes.count(node)) {
        return Status::Invalid("unknown node '" + node + "' (see berth nodes)");
      }
    }
  } else if (s_.nodes.size() == 0) {
    return Status::Invalid("no nodes have joined the cluster");
  }
  for (const Reservation* other : meeting) {
    if (std::optional<TimeMs> at = FirstOverlap(r, *other, now)) {
      return Status::Invalid("overlaps reservation '" + other->name + "' on the same nodes (at " +
                             FormatRfc3339(*at) + ")");
    }
  }
  return Status::Ok();
}

Result<Reservation> Reservations::Commit(Reservation r, const std::string& action,
                                         const std::string& by) {
  r.updated_at = s_.clock.Now();
  r.updated_by = by;
  Txn txn;
  txn.by = by;
  txn.batch.reservations.push_back(RowOf(r));
  const std::string where =
      r.all_nodes ? "all nodes" : (r.gpus.empty() ? "" : r.gpus + " on ") + Join(r.nodes, ",");
  txn.batch.audit.push_back(
      AuditRow{.at = r.updated_at,
               .by = by,
               .action = action,
               .target = r.name,
               .detail = FormatRfc3339(r.start) + " for " + FormatDuration(r.duration) +
                         (r.repeat.empty() ? "" : " (" + r.repeat + ")") + ", " + where +
                         (r.maintenance ? ", maintenance" : "")});
  BERTH_RETURN_IF_ERROR(s_.Execute(txn));
  s_.reservations[r.name] = r;
  s_.RequestPassLocked();
  return r;
}

}  // namespace berth
