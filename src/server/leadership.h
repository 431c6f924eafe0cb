// Elector: one server's part in choosing the leader among servers that share a database
// (docs/ha.md). Every tick it either tries to take the lease (a follower) or renews it (the
// leader), and says what the server must do: start leading with a fencing token, step down, or
// nothing. The daemon (src/exe) acts on it: a leader runs the whole Server with its store fenced by
// the token; a follower answers every request with "not the leader" and where the leader is.
//
// Stepping down: when a renewal finds the lease taken by another server (it expired, e.g. while
// this process was paused), or when no renewal has succeeded for a whole lease (the database is
// unreachable: another server may take over once it returns, and this one cannot know). A
// database outage shorter than the lease changes nothing: writes fail meanwhile (503), running
// jobs keep running, and the next renewal succeeds.
//
// Thread-safety: not thread-safe; one thread ticks it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.h"
#include "store/leader_lease.h"

namespace berth {

struct ElectorOptions {
  std::string holder;  // this server's id: unique per process (host, pid, random)
  std::string url;     // where this server serves, for followers to point at
  DurationMs lease_ms = 3'000;
};

class Elector {
 public:
  enum class Action { kNone, kLead, kStepDown };

  Elector(ElectorOptions options, LeaderLease& lease, const Clock& clock)
      : options_(std::move(options)), lease_(lease), clock_(clock) {}

  // One step (call every tick_ms()). kLead: this server now leads with token(); kStepDown: it no
  // longer does.
  Action Tick();
  // How often to tick: a leader renews three times per lease, a follower looks four times.
  DurationMs tick_ms() const { return leading() ? options_.lease_ms / 3 : options_.lease_ms / 4; }

  bool leading() const { return token_.has_value(); }
  int64_t token() const { return token_.value_or(0); }
  // The last error talking to the database ("" after a success), for logs and `berth status`.
  const std::string& last_error() const { return last_error_; }
  // Gives the lease up (a clean shutdown of the leader), so a follower takes over at once.
  void Release();

 private:
  ElectorOptions options_;
  LeaderLease& lease_;
  const Clock& clock_;
  std::optional<int64_t> token_;
  int64_t renewed_at_ = 0;  // monotonic ms: the last successful take or renewal
  std::string last_error_;
};

}  // namespace berth
