// JobSpec: a job as the user described it (task YAML or CLI flags), validated.
//
// This is the users' contract of docs/design.md ("Task YAML"), SkyPilot-compatible. A JobSpec is a
// plain value; the server stores it once per submission (shared by every job of a bulk group) as
// JSON. All functions are pure and thread-safe.
#pragma once

#include <boost/json/value.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/resources.h"
#include "common/status.h"

namespace berth {

enum class RecoveryAction { kRequeue, kFail };

// A dependency on earlier jobs (Slurm's --dependency): `ok` holds when every named job succeeded,
// `notok` when every one has ended and at least one did not succeed, `any` when every one has
// ended, however. A job waits (PENDING) until all of its dependencies hold; one that can no longer
// hold ends the job CANCELLED. Named jobs must exist when the dependency is submitted, so
// dependencies never form a cycle.
enum class DependencyKind { kOk, kNotOk, kAny };
struct Dependency {
  DependencyKind kind = DependencyKind::kOk;
  bool groups = false;       // `ids` are bulk groups (every job of each), not jobs
  std::vector<int64_t> ids;  // at least one, each > 0
  bool operator==(const Dependency&) const = default;
};

// "ok:10,11", "any:group:3", and Slurm's "afterok:10:11". Errors say what is wrong.
Result<Dependency> ParseDependency(std::string_view text);
// The canonical text: "ok:10,11", "notok:group:3".
std::string DependencyText(const Dependency& dep);
std::string_view DependencyKindName(DependencyKind kind);  // "ok", "notok", "any"

// When a failed attempt runs again. The default (max_restarts 0) never restarts; `never` says so
// explicitly and also ends the job, rather than requeueing it, when it is preempted or its node is
// lost: no second attempt of it ever starts.
struct RetryPolicy {
  int max_restarts = 0;            // failed attempts restarted, at most
  std::vector<int> on_exit_codes;  // restart only on these exit codes; empty: any failure
  DurationMs backoff = 0;          // wait this long in the queue before the next attempt
  bool never = false;              // `retry: never`
  // Restart an attempt that ran out of memory (docs/security.md "Isolation") too; by default it
  // is not restarted, whatever on_exit_codes says: it would only run out again.
  bool on_oom = false;
  bool operator==(const RetryPolicy&) const = default;
};

// resources.cpu_binding: kCores pins each rank to resources.cpus whole CPUs of its node that no
// other pinned rank holds (a cpuset; docs/security.md "Isolation"). Needs a whole number of CPUs.
enum class CpuBinding { kNone, kCores };
// "cores" or "none"; nothing else.
std::optional<CpuBinding> ParseCpuBinding(std::string_view text);

// Whether time_limit bounds each attempt (the default) or the job's running time summed over all of
// its attempts.
enum class TimeLimitScope { kAttempt, kJob };

// A signal sent to every process of the job `before` its time limit (Slurm's --signal), so it can
// checkpoint; then SIGTERM at the limit and SIGKILL after the kill grace.
struct WarnSignal {
  int number = 0;    // SIGUSR1, ...
  std::string name;  // "USR1": upper case, without "SIG", however the user wrote it
  DurationMs before = 0;
  bool operator==(const WarnSignal&) const = default;
};
// "USR1", "SIGUSR1", "usr1" -> the signal, with `name` "USR1" and `before` 0. Only signals a job
// can trap: HUP, INT, QUIT, USR1, USR2, ALRM, TERM, CONT, URG, WINCH (not KILL or STOP).
Result<WarnSignal> ParseSignalName(std::string_view name);

// Limits that keep one request from hurting the server. Documented in docs/task-yaml.md.
constexpr int kMaxNumNodes = 1024;
constexpr MilliCpu kMaxCpus = 1'000'000 * kMilliPerCpu;  // a million CPUs per node
constexpr Mib kMaxMemory = 1024LL * 1024 * 1024;         // 1 PiB per node
constexpr MilliGpu kMaxGpus = 1024 * kMilliPerGpu;       // 1024 devices per node
constexpr size_t kMaxScriptBytes = 1 << 20;              // setup and run, each
constexpr int kMinPriority = -1000000;
constexpr int kMaxPriority = 1000000;
constexpr DurationMs kMaxTimeLimit = 365LL * 24 * 3'600'000;  // a year; keeps JSON seconds exact
constexpr int kMaxRestarts = 1000;
constexpr DurationMs kMaxBackoff = 24LL * 3'600'000;  // a day
constexpr size_t kMaxDependencyIds = 1000;            // jobs or groups named, over all dependencies
constexpr int kMaxRunning = 1'000'000;

// A file mount (SkyPilot's `file_mounts`): a local file or directory uploaded by the client and
// copied to `target` on every node before setup runs (docs/task-yaml.md "file_mounts").
struct FileMount {
  std::string target;  // on the nodes: absolute, "~/..." or relative to the workdir
  std::string source;  // on the client, before upload (never sent to the server)
  std::string upload;  // the uploaded tree's manifest digest (upload/manifest.h)
  // The source was one file: the tree holds just it, and it becomes the target itself.
  bool file = false;
  bool operator==(const FileMount&) const = default;
};
constexpr size_t kMaxFileMounts = 64;

// The image a job's setup and run execute in: `resources.image_id: docker:REF` with the optional
// `container` block (docs/task-yaml.md "Containers"). Run rootless, as the job's user, on nodes
// whose agent found a container runtime (agent/container.h).
enum class PullPolicy { kMissing, kAlways, kNever };
std::string_view PullPolicyName(PullPolicy p);  // "missing", "always", "never"
std::optional<PullPolicy> ParsePullPolicy(std::string_view text);
struct ContainerSpec {
  std::string image;                // "registry/name:tag" or "name@sha256:HEX", without "docker:"
  std::vector<std::string> mounts;  // "/host/path:/container/path[:ro|:rw]"
  PullPolicy pull = PullPolicy::kMissing;
  // Run as uid 0 inside (the user's own uid outside, in a user namespace) rather than as the user.
  bool remap_root = false;
  bool operator==(const ContainerSpec&) const = default;
};
// The node labels an agent that runs containers adds (agent/container.h); a job with an image
// is placed only on nodes with the first (server/core/core.cpp).
inline constexpr char kContainerRuntimeLabel[] = "berth.container_runtime";
inline constexpr char kContainerVersionLabel[] = "berth.container_runtime_version";
// Checks a job's container.mounts against the host paths `node` lets containers mount (each with
// what is below it); the error names the first mount refused, the node and its list.
Status CheckContainerMounts(const ContainerSpec& spec, const std::vector<std::string>& allowed,
                            const std::string& node);
constexpr size_t kMaxImageRefBytes = 512;
constexpr size_t kMaxContainerMounts = 32;

struct JobSpec {
  std::string name;  // defaults to the first word of run, or "job"
  int num_nodes = 1;
  ResourceRequest resources;                              // per node
  CpuBinding cpu_binding = CpuBinding::kNone;             // resources.cpu_binding
  std::vector<std::pair<std::string, std::string>> envs;  // in the order given; unique keys
  // Where the job runs. `workdir` is a path on the nodes (a shared file system: `workdir:
  // node:/path` in a task file); `workdir_upload` the manifest digest of a workdir the client
  // uploaded (docs/user-guide.md "Workdir upload"), copied into the job's own directory on each
  // node. Neither: the job's own directory.
  std::string workdir;
  std::string workdir_upload;
  std::vector<FileMount> file_mounts;
  std::string setup;  // bash script, may be empty
  std::string run;    // bash script, may be empty (the job then just succeeds)
  int priority = 0;
  std::string pool;  // empty: any pool
  // An operator's reservation to run in (docs/reservations.md): only on its nodes, inside its
  // window; "" = none.
  std::string reservation;
  std::map<std::string, std::string> node_selector;
  std::string exclusive;  // placement.exclusive: a node label key; empty: not exclusive
  // placement.topology: levels of the cluster's --topology-levels (docs/topology.md): all nodes of
  // the gang under one `required` domain, as few `preferred` ones as can be; empty: none asked.
  std::string topology_required;
  std::string topology_preferred;
  std::optional<DurationMs> time_limit;
  std::optional<DurationMs> kill_grace;  // SIGTERM -> SIGKILL grace; empty: the server's default
  RecoveryAction on_preemption = RecoveryAction::kRequeue;
  RecoveryAction on_node_lost = RecoveryAction::kFail;
  // Its node's health probes fenced one of its GPUs, or the node's prolog failed before it
  // started (docs/operators.md "Node health"): the node is at fault, not the job.
  RecoveryAction on_node_fault = RecoveryAction::kRequeue;
  // Pipelines (docs/user-guide.md "Pipelines").
  std::vector<Dependency> depends_on;  // all must hold
  std::optional<int> max_running;      // a bulk group: at most this many of its jobs placed at once
  RetryPolicy retry;
  TimeLimitScope time_limit_scope = TimeLimitScope::kAttempt;
  std::optional<WarnSignal> signal;        // needs time_limit; `before` less than it
  std::optional<ContainerSpec> container;  // unset: on the node's own system
  // An interactive job (docs/user-guide.md "Interactive work"): its run step runs on a terminal
  // that `berth attach` (and `berth shell`) connect to.
  bool interactive = false;
  // Exempts the job from the cluster's idle policy, saying why ("data prep"; docs/idle.md): its
  // idle GPUs are reported, never acted on. Refused where the policy allows no exemptions.
  std::string idle_ok;
  // Whom to tell of what (spec/notify_events.h): the events' canonical text, "" for none.
  std::string notify;

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

// The manifest digests of the uploads `spec` names: its workdir's, then each file mount's.
std::vector<std::string> UploadsOf(const JobSpec& spec);

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
