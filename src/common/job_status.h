// Job and node states of the users' contract (docs/design.md "Job states"), with their names.
// Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace berth {

enum class JobStatus {
  kPending,
  kStarting,   // placed; launch sent to the agent(s)
  kSettingUp,  // setup running
  kRunning,
  kSucceeded,
  kFailed,
  kFailedSetup,
  kCancelled,
  kLost,       // its node stopped answering and its lease ran out
  kPreempted,  // preempted and opted out of requeueing
};

std::string_view JobStatusName(JobStatus s);  // "PENDING", ...
std::optional<JobStatus> ParseJobStatus(std::string_view name);
bool IsTerminal(JobStatus s);
// STARTING, SETTING_UP or RUNNING: holds resources on nodes.
inline bool IsActive(JobStatus s) {
  return s == JobStatus::kStarting || s == JobStatus::kSettingUp || s == JobStatus::kRunning;
}

// How the reason of an attempt the kernel killed for its memory limit starts (docs/security.md
// "Isolation"); the API gives such a job "reason_code": "oom".
inline constexpr std::string_view kOutOfMemory = "out of memory:";
inline bool IsOutOfMemory(std::string_view reason) { return reason.starts_with(kOutOfMemory); }

enum class NodeState { kUp, kDraining, kDown };
std::string_view NodeStateName(NodeState s);  // "UP", "DRAINING", "DOWN"
std::optional<NodeState> ParseNodeState(std::string_view name);
// The state users see: a node that is up but being drained is DRAINING.
inline NodeState ShownNodeState(NodeState state, bool draining) {
  return state == NodeState::kUp && draining ? NodeState::kDraining : state;
}

}  // namespace berth
