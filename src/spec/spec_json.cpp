// The JSON form of a JobSpec: what the CLI sends, what the server stores, what `berth show` prints.
//
// Resources are in CPUs and GiB (docs/design.md "Machine-readable output"); converting back rounds
// to the nearest milli-CPU / MiB, so SpecFromJson(SpecToJson(s)) == s for every valid spec.
#include <fmt/format.h>

#include <boost/json.hpp>
#include <cmath>
#include <limits>
#include <string_view>

#include "spec/job_spec.h"

namespace berth {
namespace json = boost::json;

namespace {

// Whole numbers as JSON integers ("cpus": 8, not 8E0 as Boost prints doubles); the rest as doubles.
json::value Number(int64_t thousandths, int64_t per_unit) {
  if (thousandths % per_unit == 0) return json::value(thousandths / per_unit);
  return json::value(static_cast<double>(thousandths) / static_cast<double>(per_unit));
}

std::string_view RecoveryName(RecoveryAction a) {
  return a == RecoveryAction::kRequeue ? "requeue" : "fail";
}

std::string_view KindOf(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "a list";
    case json::kind::object:
      return "an object";
  }
  return "something else";
}

Status WrongType(std::string_view path, std::string_view want, const json::value& got) {
  return Status::Invalid(fmt::format("{}: expected {}, got {}", path, want, KindOf(got)));
}

Status Unknown(std::string_view path, std::string_view key) {
  if (path.empty()) return Status::Invalid(fmt::format("unknown field '{}'", key));
  return Status::Invalid(fmt::format("{}: unknown field '{}'", path, key));
}

Status GetString(const json::value& v, std::string_view path, std::string* out) {
  if (!v.is_string()) return WrongType(path, "a string", v);
  *out = std::string(v.get_string());
  return Status::Ok();
}

// Any JSON number as a double; finite and not absurd (so the milli conversions cannot overflow).
Status GetDouble(const json::value& v, std::string_view path, double* out) {
  if (!v.is_number()) return WrongType(path, "a number", v);
  double d = v.to_number<double>();
  if (!std::isfinite(d) || std::fabs(d) > 1e15) {
    return Status::Invalid(fmt::format("{}: {} is out of range", path, d));
  }
  *out = d;
  return Status::Ok();
}

Status GetInt(const json::value& v, std::string_view path, int* out) {
  int64_t i = 0;
  if (v.is_int64()) {
    i = v.get_int64();
  } else if (v.is_uint64() && v.get_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    i = static_cast<int64_t>(v.get_uint64());
  } else if (v.is_double() && std::trunc(v.get_double()) == v.get_double() &&
             std::fabs(v.get_double()) < 1e15) {
    i = static_cast<int64_t>(v.get_double());  // 2.0 is a whole number, however it was written
  } else {
    return WrongType(path, "a whole number", v);
  }
  if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) {
    return Status::Invalid(fmt::format("{}: {} is out of range", path, i));
  }
  *out = static_cast<int>(i);
  return Status::Ok();
}

// Seconds, possibly fractional, to milliseconds; null means unset.
Status GetSeconds(const json::value& v, std::string_view path, std::optional<DurationMs>* out) {
  if (v.is_null()) {
    out->reset();
    return Status::Ok();
  }
  double s = 0;
  BERTH_RETURN_IF_ERROR(GetDouble(v, path, &s));
  *out = static_cast<DurationMs>(std::llround(s * 1000.0));
  return Status::Ok();
}

Status GetRecovery(const json::value& v, std::string_view path, RecoveryAction* out) {
  std::string s;
  BERTH_RETURN_IF_ERROR(GetString(v, path, &s));
  if (s == "requeue") {
    *out = RecoveryAction::kRequeue;
  } else if (s == "fail") {
    *out = RecoveryAction::kFail;
  } else {
    return Status::Invalid(
        fmt::format("{}: expected \"requeue\" or \"fail\", got \"{}\"", path, s));
  }
  return Status::Ok();
}

Status GetResources(const json::value& v, ResourceRequest* r, CpuBinding* binding) {
  if (!v.is_object()) return WrongType("resources", "an object", v);
  for (const auto& [key, value] : v.get_object()) {
    if (key == "accelerators") {
      r->gpu_type.clear();
      r->gpu_milli = 0;
      if (value.is_null()) continue;
      if (!value.is_object())
        return WrongType("resources.accelerators", "{\"TYPE\": count}", value);
      const json::object& acc = value.get_object();
      if (acc.size() != 1) {
        return Status::Invalid(
            "resources.accelerators: name exactly one accelerator type, as {\"V100\": 4}");
      }
      double count = 0;
      BERTH_RETURN_IF_ERROR(GetDouble(
          acc.begin()->value(),
          fmt::format("resources.accelerators.{}", std::string_view(acc.begin()->key())), &count));
      r->gpu_type = std::string(acc.begin()->key());
      r->gpu_milli = MilliFromDouble(count);
    } else if (key == "cpus") {
      double cpus = 0;
      BERTH_RETURN_IF_ERROR(GetDouble(value, "resources.cpus", &cpus));
      r->cpus = MilliFromDouble(cpus);
    } else if (key == "memory") {
      double gib = 0;
      BERTH_RETURN_IF_ERROR(GetDouble(value, "resources.memory", &gib));
      r->memory = gib < 0 ? -MibFromGib(-gib) : MibFromGib(gib);
    } else if (key == "cpu_binding") {
      std::string text;
      BERTH_RETURN_IF_ERROR(GetString(value, "resources.cpu_binding", &text));
      auto parsed = ParseCpuBinding(text);
      if (!parsed) {
        return Status::Invalid("resources.cpu_binding: expected cores or none, got '" + text + "'");
      }
      *binding = *parsed;
    } else {
      return Unknown("resources", key);
    }
  }
  return Status::Ok();
}

Status GetStringMap(const json::value& v, std::string_view path,
                    std::vector<std::pair<std::string, std::string>>* out) {
  if (!v.is_object()) return WrongType(path, "an object", v);
  out->clear();
  for (const auto& [key, value] : v.get_object()) {
    std::string s;
    BERTH_RETURN_IF_ERROR(GetString(value, fmt::format("{}.{}", path, std::string_view(key)), &s));
    out->emplace_back(std::string(key), std::move(s));
  }
  return Status::Ok();
}

Status GetTopology(const json::value& v, JobSpec* spec) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_object()) return WrongType("placement.topology", "an object or null", v);
  for (const auto& [key, value] : v.get_object()) {
    if (key == "required") {
      BERTH_RETURN_IF_ERROR(
          GetString(value, "placement.topology.required", &spec->topology_required));
    } else if (key == "preferred") {
      BERTH_RETURN_IF_ERROR(
          GetString(value, "placement.topology.preferred", &spec->topology_preferred));
    } else {
      return Unknown("placement.topology", key);
    }
  }
  return Status::Ok();
}

Status GetPlacement(const json::value& v, JobSpec* spec) {
  spec->exclusive.clear();
  spec->topology_required.clear();
  spec->topology_preferred.clear();
  if (v.is_null()) return Status::Ok();
  if (!v.is_object()) return WrongType("placement", "an object or null", v);
  for (const auto& [key, value] : v.get_object()) {
    if (key == "exclusive") {
      BERTH_RETURN_IF_ERROR(GetString(value, "placement.exclusive", &spec->exclusive));
    } else if (key == "topology") {
      BERTH_RETURN_IF_ERROR(GetTopology(value, spec));
    } else {
      return Unknown("placement", key);
    }
  }
  return Status::Ok();
}

Status GetRecoveryObject(const json::value& v, JobSpec* spec) {
  if (!v.is_object()) return WrongType("recovery", "an object", v);
  for (const auto& [key, value] : v.get_object()) {
    if (key == "on_preemption") {
      BERTH_RETURN_IF_ERROR(GetRecovery(value, "recovery.on_preemption", &spec->on_preemption));
    } else if (key == "on_node_lost") {
      BERTH_RETURN_IF_ERROR(GetRecovery(value, "recovery.on_node_lost", &spec->on_node_lost));
    } else if (key == "on_node_fault") {
      BERTH_RETURN_IF_ERROR(GetRecovery(value, "recovery.on_node_fault", &spec->on_node_fault));
    } else {
      return Unknown("recovery", key);
    }
  }
  return Status::Ok();
}

// Seconds to milliseconds, a number (not null).
Status GetDuration(const json::value& v, std::string_view path, DurationMs* out) {
  double s = 0;
  BERTH_RETURN_IF_ERROR(GetDouble(v, path, &s));
  *out = static_cast<DurationMs>(std::llround(s * 1000.0));
  return Status::Ok();
}

Status GetBool(const json::value& v, std::string_view path, bool* out) {
  if (!v.is_bool()) return WrongType(path, "true or false", v);
  *out = v.get_bool();
  return Status::Ok();
}

// ["ok:10", "any:group:3"]: each a dependency text (ParseDependency).
Status GetDependsOn(const json::value& v, std::vector<Dependency>* out) {
  if (!v.is_array()) return WrongType("depends_on", "a list of dependencies like \"ok:10\"", v);
  out->clear();
  const json::array& items = v.get_array();
  if (items.size() > kMaxDependencyIds) {  // each names one job or group at least
    return Status::Invalid(
        fmt::format("depends_on has {} dependencies; at most {} jobs and groups are allowed",
                    items.size(), kMaxDependencyIds));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string path = fmt::format("depends_on[{}]", i);
    std::string text;
    BERTH_RETURN_IF_ERROR(GetString(items[i], path, &text));
    auto dep = ParseDependency(text);
    if (!dep.ok()) return Status::Invalid(fmt::format("{}: {}", path, dep.status().message()));
    out->push_back(std::move(*dep));
  }
  return Status::Ok();
}

Status GetMaxRunning(const json::value& v, std::optional<int>* out) {
  if (v.is_null()) {
    out->reset();
    return Status::Ok();
  }
  int n = 0;
  BERTH_RETURN_IF_ERROR(GetInt(v, "max_running", &n));
  *out = n;
  return Status::Ok();
}

Status GetRetry(const json::value& v, RetryPolicy* retry) {
  if (!v.is_object()) return WrongType("retry", "an object", v);
  *retry = {};
  for (const auto& [key, value] : v.get_object()) {
    if (key == "max_restarts") {
      BERTH_RETURN_IF_ERROR(GetInt(value, "retry.max_restarts", &retry->max_restarts));
    } else if (key == "on_exit_codes") {
      if (!value.is_array()) return WrongType("retry.on_exit_codes", "a list", value);
      retry->on_exit_codes.clear();
      const json::array& codes = value.get_array();
      for (size_t i = 0; i < codes.size(); ++i) {
        int code = 0;
        BERTH_RETURN_IF_ERROR(GetInt(codes[i], fmt::format("retry.on_exit_codes[{}]", i), &code));
        retry->on_exit_codes.push_back(code);
      }
    } else if (key == "backoff_s") {
      BERTH_RETURN_IF_ERROR(GetDuration(value, "retry.backoff_s", &retry->backoff));
    } else if (key == "never") {
      BERTH_RETURN_IF_ERROR(GetBool(value, "retry.never", &retry->never));
    } else if (key == "on_oom") {
      BERTH_RETURN_IF_ERROR(GetBool(value, "retry.on_oom", &retry->on_oom));
    } else {
      return Unknown("retry", key);
    }
  }
  return Status::Ok();
}

Status GetTimeLimitScope(const json::value& v, TimeLimitScope* out) {
  std::string s;
  BERTH_RETURN_IF_ERROR(GetString(v, "time_limit_scope", &s));
  if (s == "attempt") {
    *out = TimeLimitScope::kAttempt;
  } else if (s == "job") {
    *out = TimeLimitScope::kJob;
  } else {
    return Status::Invalid(
        fmt::format("time_limit_scope: expected \"attempt\" or \"job\", got \"{}\"", s));
  }
  return Status::Ok();
}

Status GetSignal(const json::value& v, std::optional<WarnSignal>* out) {
  out->reset();
  if (v.is_null()) return Status::Ok();
  if (!v.is_object()) return WrongType("signal", "an object or null", v);
  std::optional<std::string> name;
  DurationMs before = 0;
  for (const auto& [key, value] : v.get_object()) {
    if (key == "name") {
      name.emplace();
      BERTH_RETURN_IF_ERROR(GetString(value, "signal.name", &*name));
    } else if (key == "before_s") {
      BERTH_RETURN_IF_ERROR(GetDuration(value, "signal.before_s", &before));
    } else {
      return Unknown("signal", key);
    }
  }
  if (!name) return Status::Invalid("signal: name is missing");
  auto sig = ParseSignalName(*name);
  if (!sig.ok()) return Status::Invalid("signal.name: " + sig.status().message());
  sig->before = before;
  *out = std::move(*sig);
  return Status::Ok();
}

// "file_mounts": [{"target": "/data", "upload": DIGEST, "file": false}, ...]
Status GetFileMounts(const json::value& value, std::vector<FileMount>* out) {
  if (!value.is_array()) return Status::Invalid("file_mounts: expected a list");
  for (const json::value& item : value.as_array()) {
    if (!item.is_object()) return Status::Invalid("file_mounts: expected {target, upload} objects");
    FileMount mount;
    for (const auto& [key, v] : item.as_object()) {
      if (key == "target") {
        BERTH_RETURN_IF_ERROR(GetString(v, "file_mounts.target", &mount.target));
      } else if (key == "upload") {
        BERTH_RETURN_IF_ERROR(GetString(v, "file_mounts.upload", &mount.upload));
      } else if (key == "file") {
        if (!v.is_bool()) return Status::Invalid("file_mounts.file: expected true or false");
        mount.file = v.as_bool();
      } else {
        return Unknown("file_mounts", key);
      }
    }
    out->push_back(std::move(mount));
  }
  return Status::Ok();
}

// "container": {"image": REF, "mounts": [...], "pull": "missing", "remap_root": false}
Status GetContainer(const json::value& value, std::optional<ContainerSpec>* out) {
  out->reset();
  if (value.is_null()) return Status::Ok();
  if (!value.is_object()) return WrongType("container", "an object or null", value);
  ContainerSpec c;
  bool has_image = false;
  for (const auto& [key, v] : value.as_object()) {
    if (key == "image") {
      has_image = true;
      BERTH_RETURN_IF_ERROR(GetString(v, "container.image", &c.image));
    } else if (key == "mounts") {
      if (!v.is_array()) return Status::Invalid("container.mounts: expected a list of strings");
      for (const json::value& m : v.as_array()) {
        if (!m.is_string()) return Status::Invalid("container.mounts: expected a list of strings");
        c.mounts.emplace_back(m.as_string());
      }
    } else if (key == "pull") {
      std::string text;
      BERTH_RETURN_IF_ERROR(GetString(v, "container.pull", &text));
      auto pull = ParsePullPolicy(text);
      if (!pull) {
        return Status::Invalid("container.pull: expected missing, always or never, got '" + text +
                               "'");
      }
      c.pull = *pull;
    } else if (key == "remap_root") {
      if (!v.is_bool()) return Status::Invalid("container.remap_root: expected true or false");
      c.remap_root = v.as_bool();
    } else {
      return Unknown("container", key);
    }
  }
  if (!has_image) return Status::Invalid("container: image is missing");
  *out = std::move(c);
  return Status::Ok();
}

Status GetField(std::string_view key, const json::value& value, JobSpec* spec) {
  if (key == "name") return GetString(value, key, &spec->name);
  if (key == "num_nodes") return GetInt(value, key, &spec->num_nodes);
  if (key == "resources") return GetResources(value, &spec->resources, &spec->cpu_binding);
  if (key == "envs") return GetStringMap(value, key, &spec->envs);
  if (key == "workdir") return GetString(value, key, &spec->workdir);
  if (key == "workdir_upload") return GetString(value, key, &spec->workdir_upload);
  if (key == "file_mounts") return GetFileMounts(value, &spec->file_mounts);
  if (key == "setup") return GetString(value, key, &spec->setup);
  if (key == "run") return GetString(value, key, &spec->run);
  if (key == "priority") return GetInt(value, key, &spec->priority);
  if (key == "pool") return GetString(value, key, &spec->pool);
  if (key == "reservation") return GetString(value, key, &spec->reservation);
  if (key == "node_selector") {
    std::vector<std::pair<std::string, std::string>> labels;
    BERTH_RETURN_IF_ERROR(GetStringMap(value, key, &labels));
    spec->node_selector = {labels.begin(), labels.end()};
    return Status::Ok();
  }
  if (key == "placement") return GetPlacement(value, spec);
  if (key == "time_limit_s") return GetSeconds(value, key, &spec->time_limit);
  if (key == "kill_grace_s") return GetSeconds(value, key, &spec->kill_grace);
  if (key == "recovery") return GetRecoveryObject(value, spec);
  if (key == "depends_on") return GetDependsOn(value, &spec->depends_on);
  if (key == "max_running") return GetMaxRunning(value, &spec->max_running);
  if (key == "retry") return GetRetry(value, &spec->retry);
  if (key == "time_limit_scope") return GetTimeLimitScope(value, &spec->time_limit_scope);
  if (key == "signal") return GetSignal(value, &spec->signal);
  if (key == "container") return GetContainer(value, &spec->container);
  if (key == "interactive") return GetBool(value, key, &spec->interactive);
  if (key == "idle_ok") return GetString(value, key, &spec->idle_ok);
  if (key == "notify") return GetString(value, key, &spec->notify);
  return Unknown("", key);
}

}  // namespace

json::value SpecToJson(const JobSpec& spec) {
  const ResourceRequest& r = spec.resources;
  json::value accelerators = nullptr;
  if (r.gpu_milli > 0) accelerators = json::object{{r.gpu_type, Number(r.gpu_milli, kMilliPerGpu)}};

  json::object envs;
  for (const auto& [key, value] : spec.envs) envs[key] = value;
  json::object selector;
  for (const auto& [key, value] : spec.node_selector) selector[key] = value;

  json::value placement = nullptr;
  if (!spec.exclusive.empty() || !spec.topology_required.empty() ||
      !spec.topology_preferred.empty()) {
    json::object p;
    if (!spec.exclusive.empty()) p["exclusive"] = spec.exclusive;
    json::object topology;
    if (!spec.topology_required.empty()) topology["required"] = spec.topology_required;
    if (!spec.topology_preferred.empty()) topology["preferred"] = spec.topology_preferred;
    if (!topology.empty()) p["topology"] = std::move(topology);
    placement = std::move(p);
  }
  auto seconds = [](const std::optional<DurationMs>& d) -> json::value {
    if (!d) return nullptr;
    return Number(*d, 1000);
  };

  json::object out;
  out["name"] = spec.name;
  out["num_nodes"] = spec.num_nodes;
  // memory: MiB over 1024 is exact in a double, so GiB can go out as a plain number.
  json::value memory = r.memory % kMibPerGib == 0 ? json::value(r.memory / kMibPerGib)
                                                  : json::value(GibFromMib(r.memory));
  json::object resources{
      {"accelerators", accelerators}, {"cpus", Number(r.cpus, kMilliPerCpu)}, {"memory", memory}};
  if (spec.cpu_binding == CpuBinding::kCores) resources["cpu_binding"] = "cores";
  out["resources"] = std::move(resources);
  out["envs"] = std::move(envs);
  out["workdir"] = spec.workdir;
  if (!spec.workdir_upload.empty()) out["workdir_upload"] = spec.workdir_upload;
  if (!spec.file_mounts.empty()) {
    json::array mounts;
    for (const FileMount& m : spec.file_mounts) {
      mounts.push_back(json::object{{"target", m.target}, {"upload", m.upload}, {"file", m.file}});
    }
    out["file_mounts"] = std::move(mounts);
  }
  out["setup"] = spec.setup;
  out["run"] = spec.run;
  if (spec.container) {
    const ContainerSpec& c = *spec.container;
    json::array mounts;
    for (const std::string& m : c.mounts) mounts.emplace_back(m);
    out["container"] = json::object{{"image", c.image},
                                    {"mounts", std::move(mounts)},
                                    {"pull", PullPolicyName(c.pull)},
                                    {"remap_root", c.remap_root}};
  }
  out["priority"] = spec.priority;
  out["pool"] = spec.pool;
  if (!spec.reservation.empty()) out["reservation"] = spec.reservation;
  out["node_selector"] = std::move(selector);
  out["placement"] = placement;
  out["time_limit_s"] = seconds(spec.time_limit);
  out["kill_grace_s"] = seconds(spec.kill_grace);
  out["recovery"] = json::object{{"on_preemption", RecoveryName(spec.on_preemption)},
                                 {"on_node_lost", RecoveryName(spec.on_node_lost)},
                                 {"on_node_fault", RecoveryName(spec.on_node_fault)}};
  json::array depends_on;
  for (const Dependency& dep : spec.depends_on) depends_on.emplace_back(DependencyText(dep));
  out["depends_on"] = std::move(depends_on);
  out["max_running"] = spec.max_running ? json::value(*spec.max_running) : json::value(nullptr);
  json::array exit_codes;
  for (int code : spec.retry.on_exit_codes) exit_codes.emplace_back(code);
  out["retry"] = json::object{{"max_restarts", spec.retry.max_restarts},
                              {"on_exit_codes", std::move(exit_codes)},
                              {"backoff_s", Number(spec.retry.backoff, 1000)},
                              {"never", spec.retry.never},
                              {"on_oom", spec.retry.on_oom}};
  out["time_limit_scope"] = spec.time_limit_scope == TimeLimitScope::kJob ? "job" : "attempt";
  json::value signal = nullptr;
  if (spec.signal) {
    signal =
        json::object{{"name", spec.signal->name}, {"before_s", Number(spec.signal->before, 1000)}};
  }
  out["signal"] = std::move(signal);
  if (spec.interactive) out["interactive"] = true;  // absent otherwise: older agents read the rest
  if (!spec.idle_ok.empty()) out["idle_ok"] = spec.idle_ok;
  if (!spec.notify.empty()) out["notify"] = spec.notify;
  return out;
}

Result<JobSpec> SpecFromJson(const json::value& v) {
  if (!v.is_object()) return WrongType("spec", "an object", v);
  JobSpec spec;
  for (const auto& [key, value] : v.get_object()) {
    BERTH_RETURN_IF_ERROR(GetField(key, value, &spec));
  }
  BERTH_RETURN_IF_ERROR(ValidateSpec(spec));
  return spec;
}

}  // namespace berth
