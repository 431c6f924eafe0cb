// IdlePolicy: when a job holding GPUs that it does not use is warned and then acted on
// (the cluster default is `berth server --idle-policy 'below=5,warn=10m,act=30m,action=requeue'`).
//
// A job's GPUs are idle at a sample when each of them is below `below` % SM utilisation or has no
// process on it (a job with no process on its GPUs at all is idle whatever they report). Once they
// have stayed idle for `warn` the job is warned; once for `act` (measured from the start of the
// idleness, so act > warn) the action is taken: requeue, cancel, or none (report only).
// Interactive jobs have their own two windows (`interactive_warn`, `interactive_act`; the batch
// ones where not given). `exempt=yes` lets a user exempt a job with a reason (`--idle-ok`).
//
// IdlePolicies: the cluster's policy and those of teams and pools (`berth server
// --team-idle-policy vision=... --pool-idle-policy interactive=none`): a job running in a pool
// with a policy has that pool's, else its team's, else the cluster's; `none` turns it off there.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

enum class IdleAction { kNone, kRequeue, kCancel };
std::string_view IdleActionName(IdleAction action);  // "none", "requeue", "cancel"

struct IdlePolicy {
  int below = 5;  // SM utilisation, percent: below it a GPU counts as idle
  DurationMs warn = 10 * 60'000;
  DurationMs act = 30 * 60'000;
  IdleAction action = IdleAction::kNone;
  DurationMs interactive_warn = 10 * 60'000;
  DurationMs interactive_act = 30 * 60'000;
  bool exempt = true;  // a user may exempt a job, giving a reason

  bool operator==(const IdlePolicy&) const = default;
  // The form ParseIdlePolicy reads, every key written.
  std::string Format() const;
};

// Reads "below=5,warn=10m,act=30m,action=requeue" (keys in any order, each at most once; those not
// given keep IdlePolicy's defaults, the interactive windows the batch ones). Refused, saying why:
// an unknown key or action, `below` outside 1-100, a window that is no duration, a warn window
// shorter than three samples (`sample_interval` apart: fewer cannot tell idle from a pause), and
// an act window not longer than its warn window.
Result<IdlePolicy> ParseIdlePolicy(std::string_view text, DurationMs sample_interval);

struct IdlePolicies {
  std::optional<IdlePolicy> cluster;
  std::map<std::string, std::optional<IdlePolicy>> teams;  // nullopt: none for the team
  std::map<std::string, std::optional<IdlePolicy>> pools;  // nullopt: none in the pool
  // The policy of a job of `team` in `pool`; null: none applies.
  const IdlePolicy* For(const std::string& team, const std::string& pool) const;
  // Where For's policy comes from, as the server's flag names it: "--pool-idle-policy P=",
  // "--team-idle-policy T=" or "--idle-policy ".
  std::string Source(const std::string& team, const std::string& pool) const;
};

// Reads `NAME=POLICY` (a --team-idle-policy or --pool-idle-policy value) into `into`: POLICY as
// ParseIdlePolicy reads it, or `none`. Refused: no name, a name given twice, a bad policy (the
// error names `flag` and the name).
Status AddScopedIdlePolicy(std::string_view text, const char* flag, DurationMs sample_interval,
                           std::map<std::string, std::optional<IdlePolicy>>& into);

// Where a job stands after its GPUs have been idle for `idle_for` (0: they are not idle now).
enum class IdleVerdict { kBusy, kIdle, kWarn, kAct };
IdleVerdict JudgeIdle(const IdlePolicy& policy, DurationMs idle_for, bool interactive);

}  // namespace berth
