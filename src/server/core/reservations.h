// Reservations: the core's service for operators' reservations and maintenance windows
// (docs/reservations.md) — create, update, delete (each committed with an audit row before memory
// changes), list, and whether a user may name one. The definitions live in CoreState; each pass
// takes their windows at its `now` (Scheduling::BuildPassInput), and a pass is due whenever a
// window starts or ends.
//
// The caller (the HTTP API) checks who asks: operators create; the creator or an admin changes or
// deletes; and that the users and team named exist (Accounts). Everything else is checked here:
// times, node names, capacity, overlaps.
//
// Thread-safety: every method takes the core lock (EXCLUDES(core_lock)).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/core/core_state.h"
#include "server/core/job_books.h"
#include "server/core/lifecycle.h"

namespace berth {

// What `berth reserve create|update` asks: text as given (parsed and checked here). Unset fields of
// an update stay as they are.
struct ReservationAsk {
  std::string name;
  std::optional<std::string> start;     // RFC 3339 or now+DURATION
  std::optional<std::string> duration;  // "2h"
  std::optional<std::string> repeat;    // "", daily, weekly, cron
  std::optional<std::vector<std::string>> nodes;
  std::optional<std::string> gpus;  // "H100:16"
  std::optional<std::string> pool;
  std::optional<bool> all_nodes;
  std::optional<std::vector<std::string>> users;
  std::optional<std::string> team;
  std::optional<bool> maintenance;
  std::optional<std::string> release_unused;  // "30m"; "0" or "" for never
  std::optional<bool> evict;  // at a window's start, evict what runs there and does not belong
};

class Reservations {
 public:
  Reservations(CoreState& state, JobBooks& books, Lifecycle& life)
      : s_(state), books_(books), life_(life) {}

  // InvalidArgument (a bad time, an overlap naming the other, nodes unknown or too few), Conflict
  // (the name is taken), Unavailable (not recorded).
  Result<Reservation> Create(const ReservationAsk& ask, const std::string& by) EXCLUDES(core_lock);
  // As Create; NotFound for an unknown name; Forbidden unless `by` made it or `admin`.
  Result<Reservation> Update(const ReservationAsk& ask, const std::string& by, bool admin)
      EXCLUDES(core_lock);
  // Jobs running in it keep running; jobs naming it that wait run as any job would.
  Status Delete(const std::string& name, const std::string& by, bool admin) EXCLUDES(core_lock);
  std::vector<Reservation> List() EXCLUDES(core_lock);
  std::optional<Reservation> Get(const std::string& name) EXCLUDES(core_lock);
  // Whether `user` (of `team`) may submit jobs naming `name`: NotFound, Forbidden (not
  // among its users or team; a maintenance window) or Ok.
  Status MayUse(const std::string& name, const std::string& user, const std::string& team)
      EXCLUDES(core_lock);
  // Housekeeping (every tick): at a window's start, evicts what runs on its nodes and does not
  // belong (`evict`; a maintenance window: everything); ends a window early when its nodes ran
  // none of its jobs for `release_unused`; when a maintenance window ends, holds its nodes until
  // their health probes pass.
  void Tick() EXCLUDES(core_lock);
  // Reads the store's reservations (Core::Load).
  Status Load(const std::vector<ReservationRow>& rows) EXCLUDES(core_lock);

 private:
  // `base` with `ask` applied, checked against the cluster and the other reservations at `now`.
  Result<Reservation> Apply(const ReservationAsk& ask, Reservation base, TimeMs now)
      REQUIRES(core_lock);
  Status CheckWhere(Reservation& r, TimeMs now) REQUIRES(core_lock);
  Result<Reservation> Commit(Reservation r, const std::string& action, const std::string& by)
      REQUIRES(core_lock);

  // Tick's parts, each adding to `txn`.
  void Evict(Txn& txn, const Reservation& r, TimeMs now) REQUIRES(core_lock);
  // Whether none of `r`'s jobs has run on its nodes for its release_unused, in window `w`.
  bool Unused(const Reservation& r, const Window& w, TimeMs now) REQUIRES(core_lock);
  void HoldAfterMaintenance(Txn& txn, const Reservation& r, TimeMs last, TimeMs now)
      REQUIRES(core_lock);
  // The jobs holding resources on `r`'s nodes now, each once, by id.
  std::vector<int64_t> JobsOn(const Reservation& r) REQUIRES(core_lock);
  // Whether a job of `spec`, of `user` (of `team`), is a member of `r`.
  static bool Member(const Reservation& r, const JobSpec& spec, const std::string& user,
                     const std::string& team);

  CoreState& s_;
  JobBooks& books_;
  Lifecycle& life_;
  // Tick's memory: when it last ran, and when each reservation's nodes last ran one of its jobs
  // (an entry per reservation with release_unused; erased with it, or when its window is released).
  TimeMs first_tick_ GUARDED_BY(core_lock) = 0;
  TimeMs last_tick_ GUARDED_BY(core_lock) = 0;
  std::map<std::string, TimeMs> last_used_ GUARDED_BY(core_lock);
};

}  // namespace berth
