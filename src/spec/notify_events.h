// NotifyEvents: which of a job's events its owner is told of, and how (docs/notifications.md) — the
// parsed form of `--notify end,fail,pending>2h` and of a task's `notify:`.
//
// The events: `started` (an attempt started running), `end` (the job ended, however), `fail` (it
// failed), `oom` (an attempt ran out of memory), `preempted` (an attempt was preempted or
// reclaimed), `idle` (its GPUs sat idle long enough for the idle policy to warn, docs/idle.md; once
// per attempt) and `pending>DURATION` (still waiting DURATION after its submission). `nodes` is an
// operator's sink event, not a job's: a node drained, faulted by its health probes, or down. `each`
// asks a bulk group's jobs to notify one by one; without it a group sends one summary when its last
// job ends (and its `started`/`pending>` notices once, for its first job).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

struct NotifyEvents {
  bool started = false;
  bool end = false;
  bool fail = false;
  bool oom = false;
  bool preempted = false;
  bool idle = false;
  bool nodes = false;  // a sink's: the cluster's nodes (operators only)
  std::optional<DurationMs> pending_after;
  bool each = false;

  bool any() const { return started || end || fail || oom || preempted || idle || pending_after; }
  bool operator==(const NotifyEvents&) const = default;
};

// Parses "end,fail,pending>2h" (commas, optional spaces; "" is none). Invalid names the word and
// lists the events.
Result<NotifyEvents> ParseNotifyEvents(const std::string& text);
// The canonical text of `events` ("started,end,fail,oom,preempted,idle,pending>2h,each,nodes"; ""
// for none).
std::string FormatNotifyEvents(const NotifyEvents& events);

}  // namespace berth
