// NoticeBook: what the core keeps in memory for notifications (server/core/notices.h) — each
// user's sinks (without their secrets, which only the sender reads), the pending jobs' `pending>`
// deadlines, and the group-wide events already written. It hears jobs enter and leave memory
// (job_table.h) to keep the deadlines.
//
// Thread-safety: none; CoreState::notices is guarded by the state lock (core_state.h).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/core/job_table.h"
#include "spec/notify_events.h"
#include "store/store.h"

namespace berth {

class NoticeBook : public JobTable::Observer {
 public:
  // The sinks loaded at start (secrets are not kept in memory: the sender reads them).
  void Load(std::vector<NotifySinkRow> sinks);
  // The events `job` notifies of: its spec's, else its owner's defaults; none without a sink.
  std::optional<NotifyEvents> EventsOf(const ActiveJob& job) const;
  bool HasSinks(const std::string& user) const { return sinks_.count(user) > 0; }
  // The users whose sinks' events include `nodes` (operators: the API checks), by name.
  const std::set<std::string>& node_watchers() const { return node_watchers_; }
  const std::vector<NotifySinkRow>* SinksOf(const std::string& user) const;
  void SetSink(NotifySinkRow row);
  void RemoveSink(const std::string& user, const std::string& kind);

  void Entered(ActiveJob& job) override;
  void Left(ActiveJob& job) override;

  // (wall time due, job): jobs that entered memory pending with a `pending>` event not yet due;
  // erased when due (Notices::CheckPending) or when the job leaves memory.
  std::set<std::pair<TimeMs, int64_t>> pending_due;
  // The group-wide events written ("group-7.started"), so that a group's 10,000 starts write one;
  // forgotten when the group's last job ends (AddGroupSummaries).
  std::set<std::string> told;

 private:
  std::optional<std::pair<TimeMs, int64_t>> PendingKey(const ActiveJob& job) const;
  void NoteWatcher(const std::string& user);
  std::map<std::string, std::vector<NotifySinkRow>> sinks_;  // by user, sorted by kind
  std::set<std::string> node_watchers_;
};

}  // namespace berth
