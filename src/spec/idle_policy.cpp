#include "spec/idle_policy.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "common/strings.h"

namespace berth {

std::string_view IdleActionName(IdleAction action) {
  switch (action) {
    case IdleAction::kRequeue:
      return "requeue";
    case IdleAction::kCancel:
      return "cancel";
    case IdleAction::kNone:
      break;
  }
  return "none";
}

std::string IdlePolicy::Format() const {
  return "below=" + std::to_string(below) + ",warn=" + FormatDuration(warn) +
         ",act=" + FormatDuration(act) + ",action=" + std::string(IdleActionName(action)) +
         ",interactive_warn=" + FormatDuration(interactive_warn) +
         ",interactive_act=" + FormatDuration(interactive_act) +
         ",exempt=" + (exempt ? "yes" : "no");
}

Result<IdlePolicy> ParseIdlePolicy(std::string_view text, DurationMs sample_interval) {
  IdlePolicy p;
  std::set<std::string> seen;
  bool interactive_warn = false;
  bool interactive_act = false;
  auto bad = [&](const std::string& why) {
    return Status::Invalid("--idle-policy '" + std::string(text) + "': " + why +
                           " (expected e.g. below=5,warn=10m,act=30m,action=requeue)");
  };
  for (const std::string& item : Split(text, ',')) {
    const std::string part = Trim(item);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos) return bad("'" + part + "' is not KEY=VALUE");
    const std::string key = Trim(part.substr(0, eq));
    const std::string value = Trim(part.substr(eq + 1));
    if (!seen.insert(key).second) return bad("'" + key + "' given twice");
    auto window = [&](DurationMs* out) -> Status {
      std::optional<DurationMs> d = ParseDuration(value);
      if (!d || *d <= 0) return bad(key + "=" + value + " is not a duration (10m, 1h30m)");
      *out = *d;
      return Status::Ok();
    };
    if (key == "below") {
      const bool digits =
          !value.empty() && value.size() <= 3 && std::all_of(value.begin(), value.end(), ::isdigit);
      const int v = digits ? std::stoi(value) : -1;
      if (v < 1 || v > 100) return bad("below=" + value + " is not a percentage from 1 to 100");
      p.below = v;
    } else if (key == "warn") {
      BERTH_RETURN_IF_ERROR(window(&p.warn));
    } else if (key == "act") {
      BERTH_RETURN_IF_ERROR(window(&p.act));
    } else if (key == "interactive_warn") {
      BERTH_RETURN_IF_ERROR(window(&p.interactive_warn));
      interactive_warn = true;
    } else if (key == "interactive_act") {
      BERTH_RETURN_IF_ERROR(window(&p.interactive_act));
      interactive_act = true;
    } else if (key == "action") {
      if (value == "requeue") {
        p.action = IdleAction::kRequeue;
      } else if (value == "cancel") {
        p.action = IdleAction::kCancel;
      } else if (value == "none") {
        p.action = IdleAction::kNone;
      } else {
        return bad("action=" + value + " is not requeue, cancel or none");
      }
    } else if (key == "exempt") {
      if (value != "yes" && value != "no") return bad("exempt=" + value + " is not yes or no");
      p.exempt = value == "yes";
    } else {
      return bad("unknown key '" + key +
                 "' (known: below, warn, act, action, interactive_warn, interactive_act, exempt)");
    }
  }
  if (!interactive_warn) p.interactive_warn = p.warn;
  // Unless given, the interactive act window keeps the batch gap after its warn window.
  if (!interactive_act)
    p.interactive_act = p.interactive_warn + std::max<DurationMs>(p.act - p.warn, 1);
  const DurationMs least = 3 * sample_interval;
  for (const auto& [name, warn, act] :
       {std::tuple{"warn", p.warn, p.act},
        std::tuple{"interactive_warn", p.interactive_warn, p.interactive_act}}) {
    if (warn < least) {
      return bad(std::string(name) + "=" + FormatDuration(warn) +
                 " is shorter than three samples (" + FormatDuration(least) +
                 "): too short to tell an idle GPU from a pause");
    }
    if (act <= warn) {
      return bad(std::string(name == std::string("warn") ? "act" : "interactive_act") + "=" +
                 FormatDuration(act) + " must be longer than " + name + "=" + FormatDuration(warn) +
                 " (both count from when the GPUs went idle)");
    }
  }
  return p;
}

IdleVerdict JudgeIdle(const IdlePolicy& policy, DurationMs idle_for, bool interactive) {
  if (idle_for <= 0) return IdleVerdict::kBusy;
  const DurationMs warn = interactive ? policy.interactive_warn : policy.warn;
  const DurationMs act = interactive ? policy.interactive_act : policy.act;
  if (idle_for >= act) return IdleVerdict::kAct;
  if (idle_for >= warn) return IdleVerdict::kWarn;
  return IdleVerdict::kIdle;
}

const IdlePolicy* IdlePolicies::For(const std::string& team, const std::string& pool) const {
  if (auto it = pools.find(pool); it != pools.end()) return it->second ? &*it->second : nullptr;
  if (auto it = teams.find(team); it != teams.end()) return it->second ? &*it->second : nullptr;
  return cluster ? &*cluster : nullptr;
}

std::string IdlePolicies::Source(const std::string& team, const std::string& pool) const {
  if (pools.count(pool)) return "--pool-idle-policy " + pool + "=";
  if (teams.count(team)) return "--team-idle-policy " + team + "=";
  return "--idle-policy ";
}

Status AddScopedIdlePolicy(std::string_view text, const char* flag, DurationMs sample_interval,
                           std::map<std::string, std::optional<IdlePolicy>>& into) {
  const size_t eq = text.find('=');
  const std::string name(text.substr(0, eq == std::string_view::npos ? 0 : eq));
  if (name.empty()) {
    return Status::Invalid(std::string(flag) + ": expected NAME=POLICY (or NAME=none), got '" +
                           std::string(text) + "'");
  }
  if (into.count(name)) {
    return Status::Invalid(std::string(flag) + ": '" + name + "' is given twice");
  }
  const std::string_view policy = text.substr(eq + 1);
  if (policy == "none") {
    into.emplace(name, std::nullopt);
    return Status::Ok();
  }
  Result<IdlePolicy> parsed = ParseIdlePolicy(policy, sample_interval);
  if (!parsed.ok()) {
    return Status::Invalid(std::string(flag) + " " + name + ": " + parsed.status().message());
  }
  into.emplace(name, *parsed);
  return Status::Ok();
}

}  // namespace berth
