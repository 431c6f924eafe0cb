// ValidateSpec: the rules every JobSpec obeys, whichever door it came in by (YAML, JSON, CLI
// flags).
//
// Messages start with the field path ("resources.cpus must be positive") so that ParseTaskYaml can
// find the line the field came from and put it in front.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>

#include "common/strings.h"
#include "spec/job_spec.h"
#include "spec/notify_events.h"

namespace berth {
namespace {

constexpr size_t kMaxEnvEntryBytes = 128 * 1024;  // Linux MAX_ARG_STRLEN, "KEY=VALUE\0" included
constexpr size_t kMaxEnvCount = 1000;
constexpr size_t kMaxEnvTotalBytes = 1 << 20;    // all of them: well under execve's ARG_MAX
constexpr DurationMs kMaxKillGrace = 3'600'000;  // longer than an hour is a hung job, not a grace

bool IsEnvName(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

Status CheckName(const std::string& path, const std::string& value) {
  if (IsValidName(value)) return Status::Ok();
  return Status::Invalid(
      fmt::format("{} \"{}\" is not a valid name (1-128 letters, digits, '.', '_' or '-', not "
                  "starting with '-')",
                  path, value));
}

Status CheckScript(const char* path, const std::string& script) {
  if (script.size() <= kMaxScriptBytes) return Status::Ok();
  return Status::TooLarge(
      fmt::format("{} is {} bytes; at most {} are allowed (put long scripts in a file "
                  "under workdir and run that)",
                  path, script.size(), kMaxScriptBytes));
}

}  // namespace

std::optional<CpuBinding> ParseCpuBinding(std::string_view text) {
  if (text == "cores") return CpuBinding::kCores;
  if (text == "none") return CpuBinding::kNone;
  return std::nullopt;
}

namespace {

Status CheckResources(const ResourceRequest& r) {
  if (r.cpus <= 0) {
    std::string got = r.cpus < 0 ? "-" + FormatMilli(-r.cpus) : "0";
    return Status::Invalid(fmt::format(
        "resources.cpus must be positive, got {} (leave it out to ask for the default 0.5)", got));
  }
  if (r.cpus > kMaxCpus) {
    return Status::Invalid(fmt::format("resources.cpus must be at most {}, got {}",
                                       FormatMilli(kMaxCpus), FormatMilli(r.cpus)));
  }
  if (r.memory < 0) return Status::Invalid("resources.memory must not be negative");
  if (r.memory > kMaxMemory) {
    return Status::Invalid(
        fmt::format("resources.memory must be at most {} GiB", kMaxMemory / kMibPerGib));
  }
  if (r.gpu_milli < 0)
    return Status::Invalid("resources.accelerators: the GPU count must be positive");
  if (r.gpu_milli > kMaxGpus) {
    return Status::Invalid(fmt::format("resources.accelerators: at most {} GPUs per node, got {}",
                                       kMaxGpus / kMilliPerGpu, FormatMilli(r.gpu_milli)));
  }
  if (r.gpu_milli > kMilliPerGpu && r.gpu_milli % kMilliPerGpu != 0) {
    return Status::Invalid(
        fmt::format("resources.accelerators: more than one GPU must be a whole number, got {}",
                    FormatMilli(r.gpu_milli)));
  }
  if (r.gpu_milli > 0 && r.gpu_type.empty()) {
    return Status::Invalid("resources.accelerators: a GPU count needs a type, like V100:4");
  }
  if (r.gpu_milli == 0 && !r.gpu_type.empty()) {
    return Status::Invalid(fmt::format("resources.accelerators: {} with a count of 0", r.gpu_type));
  }
  if (!r.gpu_type.empty() && !IsValidName(r.gpu_type)) {
    return Status::Invalid(
        fmt::format("resources.accelerators: \"{}\" is not a valid accelerator type", r.gpu_type));
  }
  return Status::Ok();
}

Status CheckEnvs(const std::vector<std::pair<std::string, std::string>>& envs) {
  if (envs.size() > kMaxEnvCount) {
    return Status::Invalid(
        fmt::format("envs has {} variables; at most {} are allowed", envs.size(), kMaxEnvCount));
  }
  std::set<std::string_view> seen;
  for (const auto& [key, value] : envs) {
    if (!IsEnvName(key)) {
      return Status::Invalid(
          fmt::format("envs.{} is not a valid variable name (letters, digits and '_', not starting "
                      "with a digit)",
                      key));
    }
    // berth sets these itself for every job (docs/design.md "Environment of a job"); letting a task
    // file override them would hand the job the wrong devices or the wrong rank.
    // BERTH_HOLLOW_SECONDS and BERTH_HOLLOW_EXIT are the ones berth reads instead of setting: a
    // hollow node's simulated run time and exit (agent/hollow.h).
    if ((StartsWith(key, "BERTH_") && key != "BERTH_HOLLOW_SECONDS" &&
         key != "BERTH_HOLLOW_EXIT") ||
        StartsWith(key, "SKYPILOT_")) {
      return Status::Invalid(fmt::format("envs.{} is reserved: berth sets {}* variables itself",
                                         key, key.substr(0, key.find('_') + 1)));
    }
    if (key == "CUDA_VISIBLE_DEVICES") {
      return Status::Invalid(
          "envs.CUDA_VISIBLE_DEVICES is reserved: berth sets it to the GPUs it allocated");
    }
    // Linux's execve refuses any one "KEY=VALUE" string over MAX_ARG_STRLEN (32 pages): such a job
    // could never start, so it is refused here with the reason instead of failing on the node.
    if (key.size() + value.size() + 2 > kMaxEnvEntryBytes) {
      return Status::Invalid(
          fmt::format("envs.{} is {} bytes long; a variable can hold at most {} KiB", key,
                      value.size(), kMaxEnvEntryBytes / 1024));
    }
    // One value per key keeps the JSON form (an object) exact; SetEnv replaces instead of
    // appending.
    if (!seen.insert(key).second)
      return Status::Invalid(fmt::format("envs.{} is given twice", key));
  }
  size_t total = 0;
  for (const auto& [key, value] : envs) total += key.size() + value.size() + 2;
  if (total > kMaxEnvTotalBytes) {
    return Status::Invalid(fmt::format("envs hold {} bytes in all; at most {} KiB are allowed",
                                       total, kMaxEnvTotalBytes / 1024));
  }
  return Status::Ok();
}

Status CheckDependsOn(const std::vector<Dependency>& deps) {
  size_t total = 0;
  for (const Dependency& dep : deps) {
    const char* what = dep.groups ? "group" : "job";
    if (dep.ids.empty()) {
      return Status::Invalid(
          fmt::format("depends_on: dependency '{}' names no {}", DependencyText(dep), what));
    }
    for (int64_t id : dep.ids) {
      if (id <= 0) {
        return Status::Invalid(fmt::format("depends_on: dependency '{}': {} is not a {} id",
                                           DependencyText(dep), id, what));
      }
    }
    total += dep.ids.size();
  }
  if (total > kMaxDependencyIds) {
    return Status::Invalid(fmt::format(
        "depends_on names {} jobs and groups; at most {} are allowed", total, kMaxDependencyIds));
  }
  return Status::Ok();
}

Status CheckRetry(const RetryPolicy& retry) {
  if (retry.never) {
    // `never` is a whole policy: a count, codes or a wait beside it contradict it.
    if (retry.max_restarts != 0) {
      return Status::Invalid("retry: never cannot be combined with max_restarts");
    }
    if (!retry.on_exit_codes.empty()) {
      return Status::Invalid("retry: never cannot be combined with on_exit_codes");
    }
    if (retry.backoff != 0) return Status::Invalid("retry: never cannot be combined with backoff");
    if (retry.on_oom) return Status::Invalid("retry: never cannot be combined with on_oom");
  }
  if (retry.max_restarts < 0 || retry.max_restarts > kMaxRestarts) {
    return Status::Invalid(fmt::format("retry.max_restarts must be between 0 and {}, got {}",
                                       kMaxRestarts, retry.max_restarts));
  }
  std::set<int> seen;
  for (int code : retry.on_exit_codes) {
    if (code < 1 || code > 255) {
      return Status::Invalid(fmt::format(
          "retry.on_exit_codes: {} is not the exit code of a failure (expected 1..255)", code));
    }
    if (!seen.insert(code).second) {
      return Status::Invalid(fmt::format("retry.on_exit_codes lists {} twice", code));
    }
  }
  if (!retry.on_exit_codes.empty() && retry.max_restarts == 0) {
    return Status::Invalid("retry.on_exit_codes needs retry.max_restarts");
  }
  if (retry.on_oom && retry.max_restarts == 0) {
    return Status::Invalid("retry.on_oom needs retry.max_restarts");
  }
  if (retry.backoff < 0) return Status::Invalid("retry.backoff must not be negative");
  if (retry.backoff > kMaxBackoff) {
    return Status::Invalid(fmt::format("retry.backoff must be at most {}, got {}",
                                       FormatDuration(kMaxBackoff), FormatDuration(retry.backoff)));
  }
  return Status::Ok();
}

Status CheckSignal(const WarnSignal& signal, const std::optional<DurationMs>& time_limit) {
  // A spec built in code (CLI flags) could pair a name with another number; the name decides.
  auto named = ParseSignalName(signal.name);
  if (!named.ok()) return Status::Invalid("signal.name: " + named.status().message());
  if (named->name != signal.name || named->number != signal.number) {
    return Status::Invalid(fmt::format("signal.name: \"{}\" does not match signal number {}",
                                       signal.name, signal.number));
  }
  if (!time_limit) return Status::Invalid("signal needs time_limit");
  if (signal.before <= 0) return Status::Invalid("signal.before must be positive");
  if (signal.before >= *time_limit) {
    return Status::Invalid(fmt::format("signal.before ({}) must be shorter than time_limit ({})",
                                       FormatDuration(signal.before), FormatDuration(*time_limit)));
  }
  return Status::Ok();
}

// A digest of uploaded content: 64 lowercase hex characters (upload/digest.h).
bool IsUploadDigest(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status CheckUploads(const JobSpec& spec) {
  if (!spec.workdir_upload.empty()) {
    if (!IsUploadDigest(spec.workdir_upload)) {
      return Status::Invalid("workdir_upload must be an upload's digest (64 hex characters)");
    }
    if (!spec.workdir.empty()) {
      return Status::Invalid("workdir and workdir_upload: give one (a node path or an upload)");
    }
  }
  if (spec.file_mounts.size() > kMaxFileMounts) {
    return Status::Invalid(fmt::format("file_mounts: at most {} entries, got {}", kMaxFileMounts,
                                       spec.file_mounts.size()));
  }
  std::set<std::string_view> targets;
  for (const FileMount& m : spec.file_mounts) {
    std::string where = "file_mounts: " + m.target;
    if (m.target.empty() || m.target.find('\0') != std::string::npos || m.target.size() > 4096) {
      return Status::Invalid("file_mounts: a target must be a path");
    }
    for (std::string_view seg : Split(m.target, '/')) {
      if (seg == "..") return Status::Invalid(where + ": '..' is not allowed in a target");
    }
    if (!targets.insert(m.target).second) return Status::Invalid(where + ": given twice");
    if (m.upload.empty() && m.source.empty()) {
      return Status::Invalid(where + ": the source was not uploaded (upload is missing)");
    }
    if (!m.upload.empty() && !IsUploadDigest(m.upload)) {
      return Status::Invalid(where + ": upload must be an upload's digest (64 hex characters)");
    }
  }
  return Status::Ok();
}

bool IsImageRef(std::string_view ref) {
  if (ref.empty() || ref.size() > kMaxImageRefBytes) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(ref.front())) return false;  // never an option to the runtime
  for (char c : ref) {
    if (!alnum(c) && c != '.' && c != '_' && c != '/' && c != ':' && c != '@' && c != '-') {
      return false;
    }
  }
  const size_t at = ref.find('@');
  if (at == std::string_view::npos) return ref.back() != ':' && ref.back() != '/';
  std::string_view digest = ref.substr(at + 1);
  return at > 0 && digest.starts_with("sha256:") && IsUploadDigest(digest.substr(7));
}

// "/host:/container[:ro|:rw]": both absolute, no "..".
Status CheckContainerMount(const std::string& mount) {
  const std::string where = "container.mounts: '" + mount + "'";
  std::vector<std::string> parts = Split(mount, ':');
  if (parts.size() < 2 || parts.size() > 3 ||
      (parts.size() == 3 && parts[2] != "ro" && parts[2] != "rw")) {
    return Status::Invalid(where + ": expected /host/path:/container/path[:ro]");
  }
  for (const std::string& path : {parts[0], parts[1]}) {
    if (!path.starts_with('/') || path.size() > 4096 || path.find(',') != path.npos ||
        path.find('\0') != path.npos) {
      return Status::Invalid(where + ": paths must be absolute (and without commas)");
    }
    for (const std::string& seg : Split(path, '/')) {
      if (seg == "..") return Status::Invalid(where + ": '..' is not allowed");
    }
  }
  return Status::Ok();
}

Status CheckContainer(const ContainerSpec& c) {
  if (!IsImageRef(c.image)) {
    return Status::Invalid("resources.image_id: '" + c.image +
                           "' is not an image reference (docker:registry/name:tag or "
                           "docker:name@sha256:HEX)");
  }
  if (c.mounts.size() > kMaxContainerMounts) {
    return Status::Invalid(fmt::format("container.mounts: at most {} entries, got {}",
                                       kMaxContainerMounts, c.mounts.size()));
  }
  for (const std::string& m : c.mounts) BERTH_RETURN_IF_ERROR(CheckContainerMount(m));
  return Status::Ok();
}

}  // namespace

Status CheckContainerMounts(const ContainerSpec& spec, const std::vector<std::string>& allowed,
                            const std::string& node) {
  for (const std::string& mount : spec.mounts) {
    const std::string host_path = mount.substr(0, mount.find(':'));
    const bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const std::string& root) {
      return IsPathUnder(host_path, root);
    });
    if (!ok) {
      return Status::Invalid(fmt::format(
          "container.mounts: '{}': {} is not among the paths {} lets containers mount ({})", mount,
          host_path, node, allowed.empty() ? "none" : Join(allowed, ", ")));
    }
  }
  return Status::Ok();
}

std::string_view PullPolicyName(PullPolicy p) {
  switch (p) {
    case PullPolicy::kAlways:
      return "always";
    case PullPolicy::kNever:
      return "never";
    case PullPolicy::kMissing:
      break;
  }
  return "missing";
}

std::optional<PullPolicy> ParsePullPolicy(std::string_view text) {
  if (text == "missing") return PullPolicy::kMissing;
  if (text == "always") return PullPolicy::kAlways;
  if (text == "never") return PullPolicy::kNever;
  return std::nullopt;
}

std::vector<std::string> UploadsOf(const JobSpec& spec) {
  std::vector<std::string> out;
  if (!spec.workdir_upload.empty()) out.push_back(spec.workdir_upload);
  for (const FileMount& m : spec.file_mounts) out.push_back(m.upload);
  return out;
}

void SetEnv(JobSpec* spec, const std::string& key, const std::string& value) {
  for (auto& [k, v] : spec->envs) {
    if (k == key) {
      v = value;
      return;
    }
  }
  spec->envs.emplace_back(key, value);
}

Status ValidateSpec(const JobSpec& spec) {
  if (!spec.name.empty()) BERTH_RETURN_IF_ERROR(CheckName("name", spec.name));
  if (spec.num_nodes < 1 || spec.num_nodes > kMaxNumNodes) {
    return Status::Invalid(
        fmt::format("num_nodes must be between 1 and {}, got {}", kMaxNumNodes, spec.num_nodes));
  }
  BERTH_RETURN_IF_ERROR(CheckResources(spec.resources));
  if (spec.cpu_binding == CpuBinding::kCores && spec.resources.cpus % kMilliPerCpu != 0) {
    return Status::Invalid(fmt::format(
        "resources.cpu_binding: cores pins whole CPUs; ask for a whole number of them in "
        "resources.cpus, not {}",
        FormatMilli(spec.resources.cpus)));
  }
  BERTH_RETURN_IF_ERROR(CheckEnvs(spec.envs));
  if (spec.idle_ok.size() > 200 ||
      std::any_of(spec.idle_ok.begin(), spec.idle_ok.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    return Status::Invalid(
        "idle_ok: a reason of at most 200 characters on one line, e.g. \"data prep\"");
  }
  if (!spec.notify.empty()) {
    Result<NotifyEvents> notify = ParseNotifyEvents(spec.notify);
    if (!notify.ok()) return notify.status();
    if (notify->nodes) {
      return Status::Invalid(
          "notify: nodes is an operator's event (berth notify set --events nodes), not a job's");
    }
  }
  BERTH_RETURN_IF_ERROR(CheckScript("setup", spec.setup));
  BERTH_RETURN_IF_ERROR(CheckScript("run", spec.run));
  if (spec.workdir.find('\0') != std::string::npos) {
    return Status::Invalid("workdir contains a NUL byte");
  }
  BERTH_RETURN_IF_ERROR(CheckUploads(spec));
  if (spec.container) {
    BERTH_RETURN_IF_ERROR(CheckContainer(*spec.container));
    for (const FileMount& m : spec.file_mounts) {
      if (StartsWith(m.target, "/")) {
        return Status::Invalid("file_mounts: " + m.target +
                               ": with an image, targets go in the workdir or ~ (mounted into the "
                               "container); a node path goes in container.mounts");
      }
    }
  }
  if (spec.priority < kMinPriority || spec.priority > kMaxPriority) {
    return Status::Invalid(fmt::format("priority must be between {} and {}, got {}", kMinPriority,
                                       kMaxPriority, spec.priority));
  }
  if (!spec.pool.empty()) BERTH_RETURN_IF_ERROR(CheckName("pool", spec.pool));
  for (const auto& [key, value] : spec.node_selector) {
    BERTH_RETURN_IF_ERROR(CheckName("node_selector key", key));
    BERTH_RETURN_IF_ERROR(CheckName("node_selector." + key, value));
  }
  if (!spec.exclusive.empty())
    BERTH_RETURN_IF_ERROR(CheckName("placement.exclusive", spec.exclusive));
  if (!spec.topology_required.empty())
    BERTH_RETURN_IF_ERROR(CheckName("placement.topology.required", spec.topology_required));
  if (!spec.topology_preferred.empty())
    BERTH_RETURN_IF_ERROR(CheckName("placement.topology.preferred", spec.topology_preferred));
  if (!spec.exclusive.empty() &&
      (!spec.topology_required.empty() || !spec.topology_preferred.empty())) {
    return Status::Invalid(
        "placement: exclusive and topology cannot be combined (an exclusive gang keeps to its "
        "label's domains; docs/topology.md)");
  }
  if (spec.time_limit) {
    if (*spec.time_limit <= 0) return Status::Invalid("time_limit must be positive");
    if (*spec.time_limit > kMaxTimeLimit) {
      return Status::Invalid(fmt::format("time_limit must be at most {}, got {}",
                                         FormatDuration(kMaxTimeLimit),
                                         FormatDuration(*spec.time_limit)));
    }
  }
  if (spec.kill_grace) {
    if (*spec.kill_grace < 0) return Status::Invalid("kill_grace must not be negative");
    if (*spec.kill_grace > kMaxKillGrace) {
      return Status::Invalid(
          fmt::format("kill_grace must be at most 1h, got {}", FormatDuration(*spec.kill_grace)));
    }
  }
  BERTH_RETURN_IF_ERROR(CheckDependsOn(spec.depends_on));
  if (spec.max_running && (*spec.max_running < 1 || *spec.max_running > kMaxRunning)) {
    return Status::Invalid(fmt::format("max_running must be between 1 and {}, got {}", kMaxRunning,
                                       *spec.max_running));
  }
  BERTH_RETURN_IF_ERROR(CheckRetry(spec.retry));
  if (spec.time_limit_scope == TimeLimitScope::kJob && !spec.time_limit) {
    return Status::Invalid("time_limit_scope: job needs time_limit");
  }
  if (spec.signal) BERTH_RETURN_IF_ERROR(CheckSignal(*spec.signal, spec.time_limit));
  return Status::Ok();
}

}  // namespace berth
