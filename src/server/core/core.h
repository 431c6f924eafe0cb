// Core: the server's state machine — nodes, active jobs, leases, scheduling passes — without HTTP.
// The HTTP front (server/http/server.h) parses requests and calls its services; unit tests call
// them directly with a fake clock, a fault-injecting store and a fake agent channel
// (tests/unit/server/).
//
// The Core is the composition root of the server core: it owns the state (core_state.h: the
// tables, the lock and the one transaction) and the services that share it, each in its own
// header — admission (submit, cancel, requeue, group limits), scheduling (passes, preemption, fair
// share), lifecycle (transitions, launches, ends, dependencies, time limits), agent sessions
// (register, heartbeat, reports, health, leases, drain, a session's rights) and the read model
// (nodes, the queue, gauges, the dashboard, log followers), notices (notifications' outbox) — and
// the job books (job_books.h) that watch the job table. docs/design.md describes the rooms.
//
// Commit, then apply, then send. Every state change (a pass, a report batch, a cancel, a drain, a
// registration, a lease expiry, a time limit) is built as a Txn: the store Batch, the in-memory
// changes and the messages for agents. The batch is committed first; only when it is durable do the
// messages go out and the log followers wake. The in-memory changes are made while the txn is
// built, each entry saved in the txn's undo journal before its first change; if the commit fails
// the journal restores every entry, nothing is sent, and the caller gets Unavailable (HTTP 503,
// retryable). Either way the state under the lock equals what a fresh server would load from the
// store (tests/unit/server/core_commit_test.cpp proves it for each kind of change).
//
// Time: wall time (Clock::Now) is what is stored and shown; leases, time limits and intervals run
// on monotonic time (Clock::Monotonic), so a step of the wall clock expires nothing.
//
// Thread-safety: every public method of Core and of its services is thread-safe unless it says
// otherwise. The state is guarded by one lock (core_state.h); the pending jobs' waiting reasons are
// in a WaitingBoard with a lock of its own, so listings never wait for a pass. Methods never call
// back into their caller while holding a lock, except the log-waiter callbacks, which must only
// post work elsewhere.
#pragma once

#include "server/core/admission.h"
#include "server/core/agent_sessions.h"
#include "server/core/core_state.h"
#include "server/core/job_books.h"
#include "server/core/lifecycle.h"
#include "server/core/notices.h"
#include "server/core/read_model.h"
#include "server/core/reservations.h"
#include "server/core/scheduling.h"

namespace berth {

class Core {
 public:
  // `store`, `clock` and `channel` must outlive the Core.
  Core(CoreOptions options, Store& store, const Clock& clock, AgentChannel& channel);
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Loads nodes and active jobs from the store. Call once, before anything else.
  Status Load() EXCLUDES(core_lock);
  // Wakes WaitForPassRequest and drops the log waiters (their connections are being closed).
  void Shutdown() EXCLUDES(core_lock);

  // The services (each thread-safe; see its header).
  Admission& admission() { return admission_; }
  Scheduling& scheduling() { return scheduling_; }
  Lifecycle& lifecycle() { return lifecycle_; }
  AgentSessions& agents() { return agents_; }
  ReadModel& reads() { return reads_; }
  JobBooks& books() { return books_; }
  Notices& notices() { return notices_; }
  Reservations& reservations() { return reservations_; }

  const CoreOptions& options() const { return state_.options; }
  // What the core did: counters and histograms, updated as changes are applied
  // (docs/monitoring.md).
  const CoreMetrics& metrics() const { return state_.metrics; }

  // Adds `observer` to the jobs' books: it hears every job enter memory, change, be restored by an
  // undo and leave (job_table.h), with the state lock held. Before Load, to hear the loaded jobs.
  void AddJobObserver(JobTable::Observer* observer) EXCLUDES(core_lock);
  // Forgets the specs no job holds any more (SpecCache::Sweep); the server does before an idle
  // heap trim.
  void ForgetUnheldSpecs() EXCLUDES(core_lock);

 private:
  CoreState state_;
  JobBooks books_{state_};  // subscribed to the job table first
  Lifecycle lifecycle_{state_, books_};
  Admission admission_{state_, books_, lifecycle_};
  Scheduling scheduling_{state_, books_, lifecycle_};
  AgentSessions agents_{state_, books_, lifecycle_};
  ReadModel reads_{state_, lifecycle_};
  Notices notices_{state_};
  Reservations reservations_{state_, books_, lifecycle_};
};

}  // namespace berth
