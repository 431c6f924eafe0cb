// Notices: what the core writes for notifications (docs/notifications.md) — the outbox's side of
// them. When a job changes in a way its owner asked to hear of (spec/notify_events.h: its own
// `notify:`, else the owner's default events), a NoticeRow per sink of the owner goes into the
// same store batch as the change: the event is durable exactly when the change is, and a server
// killed between the commit and the send loses nothing (the sender, server/notify/notice_sender.h,
// delivers from the store). Nothing here waits for a network.
//
// Event ids are stable for their event ("job-42.1.end", "group-7.end", "job-42.pending"), and
// the store ignores a second write of an (event, sink): receivers dedupe by id.
//
// A bulk group without `each` is told once: its first `started`, its first `pending>` and a
// summary when its last job ends (AddGroupSummaries, run by CoreState::Execute before the
// commit), so a 10,000-job group that fails sends one notice, not 10,000.
//
// The state these keep is CoreState::notices (notice_book.h). Notices is the service: sinks set
// and removed, test notices, the pending check.
//
// Thread-safety: the hooks need the state lock (core_state.h); Notices' public methods take it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/core/core_state.h"
#include "spec/notify_events.h"

namespace berth {

// --- the hooks (state lock held, inside a txn) ---
// `job` went from `from` to its current status (Lifecycle::Transition).
void NoticeTransition(CoreState& s, Txn& txn, const ActiveJob& job, JobStatus from, TimeMs now)
    REQUIRES(core_lock);
// `job`'s attempt went back to the queue (Lifecycle::ReturnToQueue): preempted (or reclaimed), or
// restarted after a failure (`oom` when it ran out of memory).
void NoticeRequeue(CoreState& s, Txn& txn, const ActiveJob& job, bool preempted,
                   const std::string& reason, TimeMs now) REQUIRES(core_lock);
// A node changed as operators hear of (`nodes` in their sinks' events): `type` node_drained,
// node_fault or node_down; `status` DRAINING, FAULTY or DOWN.
void NoticeNode(CoreState& s, Txn& txn, const std::string& node, const std::string& type,
                const std::string& status, const std::string& reason, TimeMs now)
    REQUIRES(core_lock);
// The idle policy warned `job` that its GPUs sit idle (Lifecycle::NoteGpuUse): `warning` says so.
void NoticeIdle(CoreState& s, Txn& txn, const ActiveJob& job, const std::string& warning,
                TimeMs now) REQUIRES(core_lock);
// Before the commit: the summaries of the groups in txn.notice_groups that have no job left
// active once the txn's moves are counted.
void AddGroupSummaries(CoreState& s, Txn& txn, TimeMs now) REQUIRES(core_lock);

// Checks a sink's fields: an e-mail address, or an https webhook (http only to loopback) with a
// secret of 16 to 512 characters; format json or slack; valid events.
Status ValidateSink(const NotifySinkRow& row);

class Notices {
 public:
  explicit Notices(CoreState& state) : s_(state) {}

  // Sets (adds or replaces) `row.user`'s sink of `row.kind`, validated (`nodes` in its events
  // only for an operator: the caller says). Unavailable when the store could not record it.
  Status SetSink(NotifySinkRow row) EXCLUDES(core_lock);
  // NotFound when the user has no sink of that kind.
  Status RemoveSink(const std::string& user, const std::string& kind) EXCLUDES(core_lock);
  // The user's sinks (secrets blanked).
  std::vector<NotifySinkRow> SinksOf(const std::string& user) EXCLUDES(core_lock);
  // Writes a `test` notice to each of the user's sinks; Conflict without one. Its
  // event id.
  Result<std::string> SendTest(const std::string& user) EXCLUDES(core_lock);
  // What is rung after a commit that wrote notices (the sender's Ring); before the core runs.
  void SetBell(std::function<void()> bell) EXCLUDES(core_lock);
  // Writes the `pending>` notices now due (housekeeping, every tick).
  void CheckPending() EXCLUDES(core_lock);

 private:
  CoreState& s_;
};

}  // namespace berth
