#include "common/job_status.h"

#include <array>
#include <utility>

namespace berth {
namespace {
constexpr std::array<std::pair<JobStatus, std::string_view>, 10> kJobNames{{
    {JobStatus::kPending, "PENDING"},
    {JobStatus::kStarting, "STARTING"},
    {JobStatus::kSettingUp, "SETTING_UP"},
    {JobStatus::kRunning, "RUNNING"},
    {JobStatus::kSucceeded, "SUCCEEDED"},
    {JobStatus::kFailed, "FAILED"},
    {JobStatus::kFailedSetup, "FAILED_SETUP"},
    {JobStatus::kCancelled, "CANCELLED"},
    {JobStatus::kLost, "LOST"},
    {JobStatus::kPreempted, "PREEMPTED"},
}};
constexpr std::array<std::pair<NodeState, std::string_view>, 3> kNodeNames{{
    {NodeState::kUp, "UP"},
    {NodeState::kDraining, "DRAINING"},
    {NodeState::kDown, "DOWN"},
}};
}  // namespace

std::string_view JobStatusName(JobStatus s) {
  for (const auto& [k, v] : kJobNames) {
    if (k == s) return v;
  }
  return "UNKNOWN";
}

std::optional<JobStatus> ParseJobStatus(std::string_view name) {
  for (const auto& [k, v] : kJobNames) {
    if (v == name) return k;
  }
  return std::nullopt;
}

bool IsTerminal(JobStatus s) { return !(s == JobStatus::kPending || IsActive(s)); }

std::string_view NodeStateName(NodeState s) {
  for (const auto& [k, v] : kNodeNames) {
    if (k == s) return v;
  }
  return "UNKNOWN";
}

std::optional<NodeState> ParseNodeState(std::string_view name) {
  for (const auto& [k, v] : kNodeNames) {
    if (v == name) return k;
  }
  return std::nullopt;
}

}  // namespace berth
