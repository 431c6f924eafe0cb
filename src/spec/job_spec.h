// JobSpec: a job as the user described it (task YAML or CLI flags), validated.
//
// This is the users' contract of DESIGN.md ("Task YAML"), SkyPilot-compatible. A JobSpec is a plain
// value; the server stores it once per submission (shared by every job of a bulk group) as JSON.
// All functions are pure and thread-safe.
#pragma once

#include <boost/json/value.hpp>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/resources.h"
#include "common/status.h"

namespace berth {

enum class RecoveryAction { kRequeue, kFail };

// Limits that keep one request from hurting the server. Documented in docs/task-yaml.md.
constexpr int kMaxNumNodes = 1024;
constexpr MilliCpu kMaxCpus = 1'000'000 * kMilliPerCpu;  // a million CPUs per node
constexpr Mib kMaxMemory = 1024LL * 1024 * 1024;         // 1 PiB per node
constexpr MilliGpu kMaxGpus = 1024 * kMilliPerGpu;       // 1024 devices per node
constexpr size_t kMaxScriptBytes = 1 << 20;              // setup and run, each
constexpr int kMinPriority = -1000000;
constexpr int kMaxPriority = 1000000;
constexpr DurationMs kMaxTimeLimit = 365LL * 24 * 3'600'000;  // a year; keeps JSON seconds exact

struct JobSpec {
  std::string name;  // defaults to the first word of run, or "job"
  int num_nodes = 1;
  ResourceRequest resources;                              // per node
  std::vector<std::pair<std::string, std::string>> envs;  // in the order given; unique keys
  std::string workdir;  // absolute path on the nodes; empty: the agent's job directory
  std::string setup;    // bash script, may be empty
  std::string run;      // bash script, may be empty (the job then just succeeds)
  int priority = 0;
  std::string pool;  // empty: any pool
  std::map<std::string, std::string> node_selector;
  std::string exclusive;  // placement.exclusive: a node label key; empty: not exclusive
  std::optional<DurationMs> time_limit;
  std::optional<DurationMs> kill_grace;  // SIGTERM -> SIGKILL grace; empty: the server's default
  RecoveryAction on_preemption = RecoveryAction::kRequeue;
  RecoveryAction on_node_lost = RecoveryAction::kFail;

  bool operator==(const JobSpec&) const = default;
};

// A parsed task file: the spec and the warnings about fields berth ignores.
struct ParsedTask {
  JobSpec spec;
  std::vector<std::string>
      warnings;  // e.g. "task.yaml:7: 'use_spot' only matters to a cloud provisioner; ignored"
};

// Parses a SkyPilot-style task YAML. `source` names the file in messages ("task.yaml:4:
// resources.cpus: expected a number like 8 or \"8+\", got \"lots\""). Unknown or misspelled fields
// are errors naming the line; cloud-only fields are warnings. The result is validated
// (ValidateSpec).
Result<ParsedTask> ParseTaskYaml(const std::string& text, const std::string& source);

// Parses "V100:4", "V100", "T4:0.5" into a type and milli-GPUs. Errors say what is wrong.
Result<std::pair<std::string, MilliGpu>> ParseAccelerators(const std::string& text);

// Checks the rules every spec must obey wherever it came from (YAML, JSON, CLI flags): counts
// positive and within the limits above, whole GPU counts above one device, names valid, env keys
// valid identifiers, recovery values known. Returns the first problem, naming the field.
Status ValidateSpec(const JobSpec& spec);

// Sets an environment variable: replaces the value in place if the key is there, else appends.
// Use it (not envs.push_back) for overrides such as --env: ValidateSpec wants keys unique.
void SetEnv(JobSpec* spec, const std::string& key, const std::string& value);

// JSON form of a spec (the API's "spec" object; field names as in the YAML, resources in CPUs and
// GiB, accelerators as {"TYPE": count}).
boost::json::value SpecToJson(const JobSpec& spec);
// Parses and validates the JSON form. Unknown fields are errors naming the field.
Result<JobSpec> SpecFromJson(const boost::json::value& v);

}  // namespace berth
