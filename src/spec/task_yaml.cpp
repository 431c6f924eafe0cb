// ParseTaskYaml: SkyPilot-style task files to a JobSpec.
//
// The parser walks the YAML tree once, field by field, so that every message can name the file, the
// line and the field path ("dnn.yaml:5: resources.cpus: expected a number like 8 or \"8+\", got
// \"lots\""). Each level has a closed list of fields: those berth reads, and those only a cloud
// provisioner needs (warned about, ignored). Anything else is an error, because a misspelled field
// silently ignored is a job that runs with the wrong resources.
#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string_view>

#include "common/strings.h"
#include "spec/job_spec.h"
#include "spec/notify_events.h"

namespace berth {
namespace {

// Two scripts of kMaxScriptBytes plus the rest; a bigger file is a mistake, not a task.
constexpr size_t kMaxTaskFileBytes = 4 * kMaxScriptBytes;
// A task file is a few levels deep. yaml-cpp's parser recurses once per level and stops at its own
// guard (2000 levels, DeepRecursion); the tree it built is then checked against this.
constexpr int kMaxYamlDepth = 64;

// The depth of the tree under `top` (top itself: 1) and the line of its deepest node, walked
// without recursion.
std::pair<int, int> TreeDepth(const YAML::Node& top) {
  int deepest = 0;
  int line = 1;
  std::vector<std::pair<YAML::Node, int>> stack = {{top, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > deepest) {
      deepest = depth;
      line = node.Mark().is_null() ? line : node.Mark().line + 1;
    }
    if (depth > kMaxYamlDepth) break;
    if (node.IsMap()) {
      for (const auto& kv : node) {
        stack.emplace_back(kv.first, depth + 1);
        stack.emplace_back(kv.second, depth + 1);
      }
    } else if (node.IsSequence()) {
      for (const auto& item : node) stack.emplace_back(item, depth + 1);
    }
  }
  return {deepest, line};
}

using FieldList = std::span<const std::string_view>;

constexpr std::string_view kTopFields[] = {
    "name",          "num_nodes",   "resources",   "envs",       "secrets",
    "workdir",       "setup",       "run",         "priority",   "pool",
    "node_selector", "placement",   "time_limit",  "kill_grace", "recovery",
    "depends_on",    "max_running", "retry",       "signal",     "time_limit_scope",
    "file_mounts",   "container",   "interactive", "idle_ok",    "notify",
    "reservation",
};
constexpr std::string_view kTopCloudFields[] = {"storage_mounts", "service", "config",
                                                "event_callback", "volumes", "experimental",
                                                "inputs",         "outputs"};
constexpr std::string_view kResourceFields[] = {"accelerators", "cpus", "memory", "cpu_binding",
                                                "image_id"};
constexpr std::string_view kResourceCloudFields[] = {"cloud",         "infra",
                                                     "region",        "zone",
                                                     "instance_type", "use_spot",
                                                     "spot_recovery", "job_recovery",
                                                     "disk_size",     "disk_tier",
                                                     "network_tier",  "ports",
                                                     "labels",        "accelerator_args",
                                                     "any_of",        "ordered",
                                                     "autostop"};
constexpr std::string_view kPlacementFields[] = {"exclusive", "topology"};
constexpr std::string_view kTopologyFields[] = {"required", "preferred"};
constexpr std::string_view kContainerFields[] = {"mounts", "pull", "remap_root"};
constexpr std::string_view kRecoveryFields[] = {"on_preemption", "on_node_lost", "on_node_fault"};
constexpr std::string_view kRetryFields[] = {"max_restarts", "on_exit_codes", "backoff", "on_oom"};
constexpr std::string_view kSignalFields[] = {"name", "before"};

// Names people reach for that are too far from ours for the edit distance to find.
const std::map<std::string_view, std::string_view> kAliases = {
    {"gpus", "accelerators"}, {"gpu", "accelerators"},  {"accelerator", "accelerators"},
    {"nodes", "num_nodes"},   {"mem", "memory"},        {"command", "run"},
    {"cmd", "run"},           {"env", "envs"},          {"timeout", "time_limit"},
    {"partition", "pool"},    {"queue", "pool"},        {"labels", "node_selector"},
    {"after", "depends_on"},  {"retries", "retry"},     {"dependency", "depends_on"},
    {"restarts", "retry"},    {"max_retries", "retry"}, {"dependencies", "depends_on"}};

bool Contains(FieldList fields, std::string_view name) {
  return std::find(fields.begin(), fields.end(), name) != fields.end();
}

// " (did you mean 'resources'?)" or "".
std::string Suggestion(std::string_view name, FieldList known, FieldList cloud) {
  auto alias = kAliases.find(name);
  if (alias != kAliases.end() && Contains(known, alias->second)) {
    return fmt::format(" (did you mean '{}'?)", alias->second);
  }
  // One typo in a short name, two in a longer one; more than that is a different word, unless it is
  // a cut-short form ("on_preempt").
  size_t limit = name.size() <= 4 ? 1 : 2;
  std::string_view best;
  size_t best_distance = limit + 1;
  for (FieldList list : {known, cloud}) {
    for (std::string_view candidate : list) {
      size_t d = EditDistance(name, candidate);
      if (name.size() >= 4 && candidate.substr(0, name.size()) == name) d = std::min(d, limit);
      if (d < best_distance) best = candidate, best_distance = d;
    }
  }
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return fmt::format("\"{}\"", node.Scalar());
    default:
      return "nothing";
  }
}

bool ParseInt64(std::string_view s, int64_t* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

bool IsDocumentMarker(std::string_view line) {
  return (StartsWith(line, "---") || StartsWith(line, "...")) &&
         (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
}

// The 1-based line where each YAML document with content begins: the first line that is not blank,
// a comment or a directive after the start or a "---"/"..." marker line. (In YAML such a marker at
// column 0 ends a block or quoted scalar too, so this needs no knowledge of scalars.)
std::vector<int> DocumentStarts(std::string_view text) {
  std::vector<int> starts;
  bool in_document = false;
  std::vector<std::string> lines = Split(text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (IsDocumentMarker(line)) {
      in_document = false;
      line.remove_prefix(3);  // "--- name: x" starts a document with content on the marker line
    }
    std::string content = Trim(line);
    if (content.empty() || content[0] == '#' || (!in_document && content[0] == '%')) continue;
    if (!in_document) starts.push_back(static_cast<int>(i) + 1);
    in_document = true;
  }
  return starts;
}

// Whether the one document of `text` is an explicit null ("~", "null"), as opposed to content that
// yaml-cpp failed to read.
bool IsNullDocument(std::string_view text) {
  std::string content;
  for (const std::string& raw : Split(text, '\n')) {
    std::string_view line = raw;
    if (IsDocumentMarker(line)) line.remove_prefix(3);
    std::string t = Trim(line);
    if (!t.empty() && t[0] != '#' && t[0] != '%') content += t.substr(0, t.find(" #"));
  }
  content = Trim(content);
  return content == "~" || content == "null" || content == "Null" || content == "NULL";
}

class TaskParser {
 public:
  explicit TaskParser(std::string source) : source_(std::move(source)) {}

  Result<ParsedTask> Parse(const std::string& text);

 private:
  Status ParseTop(const YAML::Node& top);
  Status ParseResources(const YAML::Node& node, int line);
  Status ParseAcceleratorsField(const YAML::Node& node, int line);
  Status ParseEnvs(const YAML::Node& node, const std::string& path, int line);
  Status ParseNodeSelector(const YAML::Node& node, int line);
  Status ParseFileMounts(const YAML::Node& node, int line);
  Status ParsePlacement(const YAML::Node& node, int line);
  Status ParseRecovery(const YAML::Node& node, int line);
  Status ParseRecoveryAction(const YAML::Node& node, const std::string& path, int line,
                             RecoveryAction* out);
  Status ParseDependsOn(const YAML::Node& node, int line);
  Status ParseRetry(const YAML::Node& node, int line);
  Status ParseExitCodes(const YAML::Node& node, int line);
  Status ParseTimeLimitScope(const YAML::Node& node, int line);
  Status ParseSignal(const YAML::Node& node, int line);
  Status ParseImageId(const YAML::Node& node, int line);
  Status ParseContainer(const YAML::Node& node, int line);
  // What a number without a unit means in a duration field.
  enum class Bare { kMinutes, kSeconds, kRefused };
  Status ParseDurationField(const YAML::Node& node, const std::string& path, int line, Bare bare,
                            std::optional<DurationMs>* out);

  // Checks that `node` is a map and returns its fields in order with their lines, erroring on
  // unknown and repeated fields and warning about cloud-only ones (which are left out of `fields`).
  struct Field {
    std::string name;
    YAML::Node value;
    int line;  // 1-based line of the value, or of the key when the value has no position (empty)
  };
  Status ReadMap(const YAML::Node& node, const std::string& path, int line, FieldList known,
                 FieldList cloud, std::vector<Field>* fields);
  // A scalar as a string; null leaves `out` alone.
  Status String(const Field& f, const std::string& path, std::string* out);
  Status Int(const Field& f, const std::string& path, int* out);
  // `notify: end,fail` or a list of events (spec/notify_events.h), kept in canonical form.
  Status ParseNotify(const Field& f);

  Status Error(int line, std::string_view message) const {
    return Status::Invalid(fmt::format("{}:{}: {}", source_, line, message));
  }
  int LineOf(const YAML::Node& node, int fallback) const {
    YAML::Mark mark = node.Mark();
    return mark.is_null() ? fallback : mark.line + 1;
  }

  std::string source_;
  ParsedTask task_;
  // Field path -> line, so that a ValidateSpec message ("envs.BERTH_X is reserved") gets its line.
  std::map<std::string, int> lines_;
  // (line, message): nested maps are read after their parent, so these are sorted into file order.
  std::vector<std::pair<int, std::string>> warnings_;
  // The `container` block, read before or after resources.image_id: joined once both are read.
  std::optional<ContainerSpec> container_block_;
  int container_line_ = 0;
};

Result<ParsedTask> TaskParser::Parse(const std::string& text) {
  if (text.size() > kMaxTaskFileBytes) {
    return Status::TooLarge(fmt::format("{}: the task file is {} bytes; at most {} are allowed",
                                        source_, text.size(), kMaxTaskFileBytes));
  }
  // YAML::Load, not LoadAll: yaml-cpp 0.7's LoadAll loops forever, allocating, on input such as ","
  // (jbeder/yaml-cpp#1040, fixed upstream after 0.7). Load reads the first document only, so other
  // documents and content the parser skipped are found by DocumentStarts.
  std::vector<int> starts = DocumentStarts(text);
  if (starts.empty()) return Status::Invalid(fmt::format("{}: empty task file", source_));
  if (starts.size() > 1) {
    return Error(
        starts[1],
        "several YAML documents (a SkyPilot pipeline) are not supported; put one task in the "
        "file");
  }
  YAML::Node top;
  try {
    top = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    return Error(e.mark.is_null() ? 1 : e.mark.line + 1,
                 fmt::format("nested too deep; at most {} levels are allowed", kMaxYamlDepth));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null())
      return Status::Invalid(fmt::format("{}: malformed YAML: {}", source_, e.msg));
    return Error(e.mark.line + 1, "malformed YAML: " + e.msg);
  }
  if (top.IsNull() && !IsNullDocument(text)) {
    // There is content, yet yaml-cpp made nothing of it (it gives up on a stray ',' that way).
    return Error(starts[0], "malformed YAML: cannot read this line");
  }
  if (auto [depth, line] = TreeDepth(top); depth > kMaxYamlDepth) {
    return Error(line,
                 fmt::format("nested too deep; at most {} levels are allowed", kMaxYamlDepth));
  }
  if (!top.IsMap()) {
    return Error(LineOf(top, 1),
                 fmt::format("a task file is a map of fields such as resources: and run:, got {}",
                             Describe(top)));
  }
  try {
    BERTH_RETURN_IF_ERROR(ParseTop(top));
  } catch (const YAML::Exception& e) {
    // The walk checks every node's type before use, so this is a bug; still, bad input must not
    // crash.
    return Status::Invalid(fmt::format("{}: cannot read the task file: {}", source_, e.what()));
  }

  std::stable_sort(warnings_.begin(), warnings_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [line, warning] : warnings_) task_.warnings.push_back(std::move(warning));

  Status valid = ValidateSpec(task_.spec);
  if (!valid.ok()) {
    // The message starts with the field path; use the line of the longest recorded prefix of it.
    const std::string& m = valid.message();
    std::string path = m.substr(0, m.find_first_of(" :"));
    while (!path.empty() && !lines_.count(path)) {
      size_t dot = path.rfind('.');
      path = dot == std::string::npos ? "" : path.substr(0, dot);
    }
    std::string where = path.empty() ? source_ : fmt::format("{}:{}", source_, lines_[path]);
    return Status(valid.code(), fmt::format("{}: {}", where, m));
  }
  return std::move(task_);
}

Status TaskParser::ReadMap(const YAML::Node& node, const std::string& path, int line,
                           FieldList known, FieldList cloud, std::vector<Field>* fields) {
  if (!node.IsMap()) {
    return Error(LineOf(node, line),
                 fmt::format("{}: expected a map, got {}", path, Describe(node)));
  }
  std::string prefix = path.empty() ? "" : path + ": ";
  std::map<std::string, int> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: `it->` is a temporary proxy
    int key_line = LineOf(key, line);
    if (!key.IsScalar()) {
      return Error(key_line, fmt::format("{}expected a field name, got {}", prefix, Describe(key)));
    }
    const std::string name = key.Scalar();
    auto [prev, fresh] = seen.emplace(name, key_line);
    if (!fresh) {
      return Error(key_line, fmt::format("{}'{}' is given twice (also on line {})", prefix, name,
                                         prev->second));
    }
    if (Contains(known, name)) {
      fields->push_back({name, it->second, LineOf(it->second, key_line)});
      lines_[path.empty() ? name : path + "." + name] = fields->back().line;
    } else if (Contains(cloud, name)) {
      warnings_.emplace_back(key_line, fmt::format("{}:{}: '{}' only matters to a cloud "
                                                   "provisioner; berth ignores it",
                                                   source_, key_line, name));
    } else {
      return Error(key_line, fmt::format("{}unknown field '{}'{}", prefix, name,
                                         Suggestion(name, known, cloud)));
    }
  }
  return Status::Ok();
}

Status TaskParser::String(const Field& f, const std::string& path, std::string* out) {
  if (f.value.IsNull()) return Status::Ok();
  if (!f.value.IsScalar()) {
    return Error(f.line, fmt::format("{}: expected a string, got {}", path, Describe(f.value)));
  }
  *out = f.value.Scalar();
  return Status::Ok();
}

Status TaskParser::ParseNotify(const Field& f) {
  if (f.value.IsNull()) return Status::Ok();
  std::string text = f.value.IsScalar() ? f.value.Scalar() : "";
  for (const YAML::Node& item : f.value.IsSequence() ? f.value : YAML::Node()) {
    if (!item.IsScalar()) {
      return Error(LineOf(item, f.line), "notify: expected events like end, got " + Describe(item));
    }
    text += (text.empty() ? "" : ",") + item.Scalar();
  }
  if (f.value.IsMap()) return Error(f.line, "notify: expected events like \"end,fail\", got a map");
  Result<NotifyEvents> events = ParseNotifyEvents(text);
  if (!events.ok()) return Error(f.line, events.status().message());
  task_.spec.notify = FormatNotifyEvents(*events);
  return Status::Ok();
}

Status TaskParser::Int(const Field& f, const std::string& path, int* out) {
  if (f.value.IsNull()) return Status::Ok();
  int64_t v = 0;
  if (!f.value.IsScalar() || !ParseInt64(Trim(f.value.Scalar()), &v)) {
    return Error(f.line,
                 fmt::format("{}: expected a whole number, got {}", path, Describe(f.value)));
  }
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return Error(f.line, fmt::format("{}: {} is out of range", path, v));
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status TaskParser::ParseTop(const YAML::Node& top) {
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(ReadMap(top, "", 1, kTopFields, kTopCloudFields, &fields));
  JobSpec& spec = task_.spec;
  const Field* secrets = nullptr;
  for (const Field& f : fields) {
    const std::string& n = f.name;
    if (n == "name") {
      BERTH_RETURN_IF_ERROR(String(f, n, &spec.name));
    } else if (n == "num_nodes") {
      BERTH_RETURN_IF_ERROR(Int(f, n, &spec.num_nodes));
    } else if (n == "resources") {
      if (!f.value.IsNull()) BERTH_RETURN_IF_ERROR(ParseResources(f.value, f.line));
    } else if (n == "envs") {
      BERTH_RETURN_IF_ERROR(ParseEnvs(f.value, n, f.line));
    } else if (n == "secrets") {
      secrets = &f;  // SkyPilot's secrets are env vars too, applied over envs wherever they appear
    } else if (n == "workdir") {
      BERTH_RETURN_IF_ERROR(String(f, n, &spec.workdir));
    } else if (n == "setup") {
      BERTH_RETURN_IF_ERROR(String(f, n, &spec.setup));
    } else if (n == "run") {
      BERTH_RETURN_IF_ERROR(String(f, n, &spec.run));
    } else if (n == "priority") {
      BERTH_RETURN_IF_ERROR(Int(f, n, &spec.priority));
    } else if (n == "interactive") {
      const std::string v = f.value.IsScalar() ? Trim(f.value.Scalar()) : "";
      if (v != "true" && v != "false") {
        return Error(f.line,
                     fmt::format("interactive: expected true or false, got {}", Describe(f.value)));
      }
      spec.interactive = v == "true";
    } else if (n == "pool" || n == "reservation") {
      BERTH_RETURN_IF_ERROR(String(f, n, n == "pool" ? &spec.pool : &spec.reservation));
    } else if (n == "idle_ok") {
      BERTH_RETURN_IF_ERROR(String(f, n, &spec.idle_ok));
    } else if (n == "notify") {
      BERTH_RETURN_IF_ERROR(ParseNotify(f));
    } else if (n == "node_selector") {
      BERTH_RETURN_IF_ERROR(ParseNodeSelector(f.value, f.line));
    } else if (n == "file_mounts") {
      BERTH_RETURN_IF_ERROR(ParseFileMounts(f.value, f.line));
    } else if (n == "placement") {
      BERTH_RETURN_IF_ERROR(ParsePlacement(f.value, f.line));
    } else if (n == "time_limit") {
      BERTH_RETURN_IF_ERROR(
          ParseDurationField(f.value, n, f.line, Bare::kMinutes, &spec.time_limit));
    } else if (n == "kill_grace") {
      BERTH_RETURN_IF_ERROR(
          ParseDurationField(f.value, n, f.line, Bare::kRefused, &spec.kill_grace));
    } else if (n == "recovery") {
      BERTH_RETURN_IF_ERROR(ParseRecovery(f.value, f.line));
    } else if (n == "depends_on") {
      BERTH_RETURN_IF_ERROR(ParseDependsOn(f.value, f.line));
    } else if (n == "max_running") {
      int max_running = 0;
      if (!f.value.IsNull()) {
        BERTH_RETURN_IF_ERROR(Int(f, n, &max_running));
        spec.max_running = max_running;
      }
    } else if (n == "retry") {
      BERTH_RETURN_IF_ERROR(ParseRetry(f.value, f.line));
    } else if (n == "time_limit_scope") {
      BERTH_RETURN_IF_ERROR(ParseTimeLimitScope(f.value, f.line));
    } else if (n == "signal") {
      BERTH_RETURN_IF_ERROR(ParseSignal(f.value, f.line));
    } else if (n == "container") {
      BERTH_RETURN_IF_ERROR(ParseContainer(f.value, f.line));
    }
  }
  if (container_block_) {
    if (!spec.container) {
      return Error(container_line_,
                   "container: says how to run an image, but no image is named; add "
                   "resources.image_id: docker:IMAGE");
    }
    container_block_->image = spec.container->image;
    spec.container = std::move(container_block_);
  }
  if (secrets) BERTH_RETURN_IF_ERROR(ParseEnvs(secrets->value, "secrets", secrets->line));
  return Status::Ok();
}

Status TaskParser::ParseResources(const YAML::Node& node, int line) {
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(
      ReadMap(node, "resources", line, kResourceFields, kResourceCloudFields, &fields));
  // SkyPilot's any_of/ordered list alternative resources. Ignoring alternatives that name GPUs
  // would run the job with no GPU at all, so those are an error rather than the usual cloud-field
  // warning.
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();  // ReadMap checked keys are scalars
    const YAML::Node list = it->second;
    if ((key != "any_of" && key != "ordered") || !list.IsSequence()) continue;
    for (const YAML::Node& entry : list) {
      if (entry.IsMap() && entry["accelerators"]) {
        return Error(LineOf(entry, line),
                     fmt::format("resources.{}: choosing among several accelerator types is not "
                                 "supported; name one in resources.accelerators",
                                 key));
      }
    }
  }
  ResourceRequest& r = task_.spec.resources;
  for (const Field& f : fields) {
    const std::string path = "resources." + f.name;
    if (f.value.IsNull()) continue;
    if (f.name == "accelerators") {
      BERTH_RETURN_IF_ERROR(ParseAcceleratorsField(f.value, f.line));
      continue;
    }
    if (f.name == "image_id") {
      BERTH_RETURN_IF_ERROR(ParseImageId(f.value, f.line));
      continue;
    }
    if (f.name == "cpu_binding") {
      const std::string v = f.value.IsScalar() ? Trim(f.value.Scalar()) : "";
      auto binding = ParseCpuBinding(v);
      if (!binding) {
        return Error(f.line, fmt::format("resources.cpu_binding: expected cores or none, got {}",
                                         Describe(f.value)));
      }
      task_.spec.cpu_binding = *binding;
      continue;
    }
    // cpus and memory: "8", "0.5", "8+" ("at least", which is what a request means anyway).
    std::string text = f.value.IsScalar() ? Trim(f.value.Scalar()) : "";
    std::optional<int64_t> milli = ParseMilli(text);
    if (!milli) {
      if (StartsWith(text, "-") && ParseMilli(text.substr(1))) {
        return Error(f.line,
                     fmt::format("{} must {}, got {}", path,
                                 f.name == "cpus" ? "be positive" : "not be negative", text));
      }
      return Error(f.line, fmt::format("{}: expected a number like {} or \"{}+\", got {}", path,
                                       f.name == "cpus" ? 8 : 32, f.name == "cpus" ? 8 : 32,
                                       Describe(f.value)));
    }
    if (f.name == "cpus") {
      r.cpus = *milli;
    } else {
      r.memory = (*milli * kMibPerGib + 500) / 1000;  // thousandths of a GiB -> MiB, rounded
    }
  }
  return Status::Ok();
}

Status TaskParser::ParseAcceleratorsField(const YAML::Node& node, int line) {
  constexpr std::string_view kOneType =
      "resources.accelerators: choosing among several accelerator types is not supported; name one";
  std::string text;
  if (node.IsSequence() || (node.IsMap() && node.size() != 1)) return Error(line, kOneType);
  if (node.IsMap()) {
    auto it = node.begin();
    if (!it->first.IsScalar() || !it->second.IsScalar()) {
      return Error(line, fmt::format("resources.accelerators: expected {{TYPE: COUNT}} such as "
                                     "{{V100: 4}}, got {} for {}",
                                     Describe(it->second), Describe(it->first)));
    }
    text = it->first.Scalar() + ":" + it->second.Scalar();
  } else {
    text = node.Scalar();
    // SkyPilot also spells alternatives as a string: "{A100:1, H100:1}" or "A100:1,H100:1".
    if (text.find(',') != std::string::npos || StartsWith(Trim(text), "{")) {
      return Error(line, kOneType);
    }
  }
  auto parsed = ParseAccelerators(text);
  if (!parsed.ok()) return Error(line, "resources.accelerators: " + parsed.status().message());
  task_.spec.resources.gpu_type = parsed->first;
  task_.spec.resources.gpu_milli = parsed->second;
  return Status::Ok();
}

Status TaskParser::ParseEnvs(const YAML::Node& node, const std::string& path, int line) {
  if (node.IsNull()) return Status::Ok();
  if (!node.IsMap()) {
    return Error(LineOf(node, line),
                 fmt::format("{}: expected a map of NAME: value, got {}", path, Describe(node)));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    int key_line = LineOf(it->first, line);
    if (!it->first.IsScalar()) {
      return Error(key_line,
                   fmt::format("{}: expected a variable name, got {}", path, Describe(it->first)));
    }
    const std::string key = it->first.Scalar();
    const std::string field = path + "." + key;
    if (!seen.insert(key).second) return Error(key_line, fmt::format("{} is given twice", field));
    const YAML::Node value = it->second;
    if (value.IsNull()) return Error(key_line, fmt::format("{} has no value", field));
    if (!value.IsScalar()) {
      return Error(key_line, fmt::format("{}: expected a string, got {}", field, Describe(value)));
    }
    lines_.emplace("envs." + key, key_line);  // ValidateSpec names every variable envs.X
    SetEnv(&task_.spec, key, value.Scalar());
  }
  return Status::Ok();
}

Status TaskParser::ParseNodeSelector(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  if (!node.IsMap()) {
    return Error(
        LineOf(node, line),
        fmt::format("node_selector: expected a map of label: value, got {}", Describe(node)));
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    int key_line = LineOf(it->first, line);
    if (!it->first.IsScalar() || !it->second.IsScalar()) {
      return Error(key_line, fmt::format("node_selector: expected label: value, got {}: {}",
                                         Describe(it->first), Describe(it->second)));
    }
    const std::string key = it->first.Scalar();
    if (!task_.spec.node_selector.emplace(key, it->second.Scalar()).second) {
      return Error(key_line, fmt::format("node_selector.{} is given twice", key));
    }
    lines_["node_selector." + key] = key_line;
  }
  return Status::Ok();
}

// file_mounts: {target: local source}. Sources are the client's files, uploaded when the task is
// submitted; object stores (SkyPilot's bucket URIs and storage objects) are not supported.
Status TaskParser::ParseFileMounts(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  if (!node.IsMap()) {
    return Error(LineOf(node, line),
                 fmt::format("file_mounts: expected a map of /remote/path: ./local/path, got {}",
                             Describe(node)));
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    int key_line = LineOf(it->first, line);
    if (!it->first.IsScalar()) {
      return Error(key_line, "file_mounts: expected /remote/path: ./local/path");
    }
    const std::string target = it->first.Scalar();
    if (!it->second.IsScalar()) {
      return Error(key_line,
                   fmt::format("file_mounts: {}: object-store sources are not supported; give a "
                               "local file or directory (it is uploaded with the job)",
                               target));
    }
    const std::string source = it->second.Scalar();
    if (source.find("://") != std::string::npos) {
      return Error(key_line,
                   fmt::format("file_mounts: {}: {}: object-store sources are not supported; give "
                               "a local file or directory (it is uploaded with the job)",
                               target, source));
    }
    if (source.empty()) return Error(key_line, fmt::format("file_mounts: {}: no source", target));
    task_.spec.file_mounts.push_back(FileMount{.target = target, .source = source, .upload = ""});
  }
  return Status::Ok();
}

Status TaskParser::ParsePlacement(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(ReadMap(node, "placement", line, kPlacementFields, {}, &fields));
  for (const Field& f : fields) {
    if (f.name == "exclusive") {
      BERTH_RETURN_IF_ERROR(String(f, "placement.exclusive", &task_.spec.exclusive));
      continue;
    }
    if (f.value.IsNull()) continue;
    std::vector<Field> levels;
    BERTH_RETURN_IF_ERROR(
        ReadMap(f.value, "placement.topology", f.line, kTopologyFields, {}, &levels));
    for (const Field& level : levels) {
      BERTH_RETURN_IF_ERROR(String(level, "placement.topology." + level.name,
                                   level.name == "required" ? &task_.spec.topology_required
                                                            : &task_.spec.topology_preferred));
    }
  }
  return Status::Ok();
}

Status TaskParser::ParseRecovery(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(ReadMap(node, "recovery", line, kRecoveryFields, {}, &fields));
  for (const Field& f : fields) {
    RecoveryAction* out = f.name == "on_preemption"  ? &task_.spec.on_preemption
                          : f.name == "on_node_lost" ? &task_.spec.on_node_lost
                                                     : &task_.spec.on_node_fault;
    BERTH_RETURN_IF_ERROR(ParseRecoveryAction(f.value, "recovery." + f.name, f.line, out));
  }
  return Status::Ok();
}

Status TaskParser::ParseRecoveryAction(const YAML::Node& node, const std::string& path, int line,
                                       RecoveryAction* out) {
  if (node.IsNull()) return Status::Ok();
  std::string v = node.IsScalar() ? node.Scalar() : "";
  if (v == "requeue") {
    *out = RecoveryAction::kRequeue;
  } else if (v == "fail") {
    *out = RecoveryAction::kFail;
  } else {
    return Error(line, fmt::format("{}: expected requeue or fail, got {}", path, Describe(node)));
  }
  return Status::Ok();
}

// A duration as ParseDuration reads it ("30s", "5m", "1h30m"); a bare number is minutes, or
// seconds when `bare_seconds`.
std::optional<DurationMs> ParseDurationText(const std::string& text, bool bare_seconds) {
  std::optional<DurationMs> d = ParseDuration(text);
  bool bare = !text.empty() && isdigit(static_cast<unsigned char>(text.back()));
  if (d && bare && bare_seconds) *d /= 60;  // ParseDuration read the number as minutes
  return d;
}

Status TaskParser::ParseDurationField(const YAML::Node& node, const std::string& path, int line,
                                      Bare bare_means, std::optional<DurationMs>* out) {
  if (node.IsNull()) return Status::Ok();
  std::string text = node.IsScalar() ? Trim(node.Scalar()) : "";
  // A bare number is minutes for time_limit (as Slurm's --time) and seconds for the retry backoff
  // and the signal's lead (as Slurm's --signal); for a grace period people mean seconds as often as
  // minutes, so there a unit is required.
  bool bare = !text.empty() && isdigit(static_cast<unsigned char>(text.back()));
  std::optional<DurationMs> d = ParseDurationText(text, bare_means == Bare::kSeconds);
  if (!d || (bare && bare_means == Bare::kRefused)) {
    std::string_view like =
        bare_means == Bare::kMinutes   ? "90m, 2h or 1h30m (a bare number is minutes)"
        : bare_means == Bare::kSeconds ? "30s, 5m or 1h (a bare number is seconds)"
                                       : "30s or 2m (with a unit)";
    return Error(
        line, fmt::format("{}: expected a duration like {}, got {}", path, like, Describe(node)));
  }
  *out = d;
  return Status::Ok();
}

// depends_on: "ok:10", a job id (ok:ID), or a list of those.
Status TaskParser::ParseDependsOn(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  auto one = [&](const YAML::Node& item, int item_line) -> Status {
    if (!item.IsScalar()) {
      return Error(
          item_line,
          fmt::format("depends_on: expected a dependency like ok:10 or any:10,11{}, got {}",
                      node.IsSequence() ? "" : " or a list of them", Describe(item)));
    }
    std::string text = Trim(item.Scalar());
    // A bare job id means "after it succeeded", Slurm's default kind.
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
      text = "ok:" + text;
    }
    auto dep = ParseDependency(text);
    if (!dep.ok()) return Error(item_line, "depends_on: " + dep.status().message());
    task_.spec.depends_on.push_back(std::move(*dep));
    return Status::Ok();
  };
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) BERTH_RETURN_IF_ERROR(one(item, LineOf(item, line)));
    return Status::Ok();
  }
  return one(node, line);
}

// retry: never, or {max_restarts, on_exit_codes, backoff}.
Status TaskParser::ParseRetry(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  RetryPolicy& retry = task_.spec.retry;
  if (!node.IsMap()) {
    if (node.IsScalar() && Trim(node.Scalar()) == "never") {
      retry.never = true;
      return Status::Ok();
    }
    return Error(line, fmt::format("retry: expected never or a map such as {{max_restarts: 3, "
                                   "on_exit_codes: [137], backoff: 30s}}, got {}",
                                   Describe(node)));
  }
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(ReadMap(node, "retry", line, kRetryFields, {}, &fields));
  for (const Field& f : fields) {
    const std::string path = "retry." + f.name;
    if (f.name == "max_restarts") {
      BERTH_RETURN_IF_ERROR(Int(f, path, &retry.max_restarts));
    } else if (f.name == "on_exit_codes") {
      BERTH_RETURN_IF_ERROR(ParseExitCodes(f.value, f.line));
    } else if (f.name == "backoff") {
      std::optional<DurationMs> backoff;
      BERTH_RETURN_IF_ERROR(ParseDurationField(f.value, path, f.line, Bare::kSeconds, &backoff));
      if (backoff) retry.backoff = *backoff;
    } else if (f.name == "on_oom") {
      const std::string v = f.value.IsScalar() ? Trim(f.value.Scalar()) : "";
      if (v != "true" && v != "false") {
        return Error(
            f.line, fmt::format("retry.on_oom: expected true or false, got {}", Describe(f.value)));
      }
      retry.on_oom = v == "true";
    }
  }
  return Status::Ok();
}

// on_exit_codes: [137, 75], or one code.
Status TaskParser::ParseExitCodes(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  std::vector<int>& codes = task_.spec.retry.on_exit_codes;
  auto one = [&](const YAML::Node& item, int item_line) -> Status {
    int64_t v = 0;
    if (!item.IsScalar() || !ParseInt64(Trim(item.Scalar()), &v)) {
      return Error(item_line,
                   fmt::format("retry.on_exit_codes: expected exit codes like [137, 75], got {}",
                               Describe(item)));
    }
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return Error(item_line, fmt::format("retry.on_exit_codes: {} is out of range", v));
    }
    codes.push_back(static_cast<int>(v));
    return Status::Ok();
  };
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) BERTH_RETURN_IF_ERROR(one(item, LineOf(item, line)));
    return Status::Ok();
  }
  return one(node, line);
}

Status TaskParser::ParseTimeLimitScope(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  std::string v = node.IsScalar() ? Trim(node.Scalar()) : "";
  if (v == "attempt") {
    task_.spec.time_limit_scope = TimeLimitScope::kAttempt;
  } else if (v == "job") {
    task_.spec.time_limit_scope = TimeLimitScope::kJob;
  } else {
    return Error(line,
                 fmt::format("time_limit_scope: expected attempt or job, got {}", Describe(node)));
  }
  return Status::Ok();
}

// signal: {name: USR1, before: 5m}, or Slurm's USR1@300 (seconds).
// resources.image_id: docker:REF. Other images (a cloud's VM images) mean nothing to berth.
Status TaskParser::ParseImageId(const YAML::Node& node, int line) {
  const std::string text = node.IsScalar() ? Trim(node.Scalar()) : "";
  if (!StartsWith(text, "docker:")) {
    // A cloud's VM image (or SkyPilot's per-region map of them): ignored, as berth always did.
    warnings_.emplace_back(
        line, fmt::format("{}:{}: resources.image_id: only docker:IMAGE runs on berth (a container "
                          "image); {} is a cloud's machine image; ignored",
                          source_, line, Describe(node)));
    return Status::Ok();
  }
  task_.spec.container.emplace().image = Trim(text.substr(7));
  return Status::Ok();
}

// container: {mounts: ["/host:/inside:ro"], pull: missing|always|never, remap_root: false}
Status TaskParser::ParseContainer(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(ReadMap(node, "container", line, kContainerFields, {}, &fields));
  ContainerSpec c;
  for (const Field& f : fields) {
    if (f.value.IsNull()) continue;
    if (f.name == "mounts") {
      if (!f.value.IsSequence()) {
        return Error(f.line, fmt::format("container.mounts: expected a list such as "
                                         "[\"/datasets:/datasets:ro\"], got {}",
                                         Describe(f.value)));
      }
      for (const YAML::Node& m : f.value) {
        if (!m.IsScalar()) {
          return Error(
              LineOf(m, f.line),
              fmt::format("container.mounts: expected /host:/inside[:ro], got {}", Describe(m)));
        }
        c.mounts.push_back(Trim(m.Scalar()));
      }
    } else if (f.name == "pull") {
      const std::string text = f.value.IsScalar() ? Trim(f.value.Scalar()) : "";
      auto pull = ParsePullPolicy(text);
      if (!pull) {
        return Error(f.line,
                     fmt::format("container.pull: expected missing, always or never, got {}",
                                 Describe(f.value)));
      }
      c.pull = *pull;
    } else if (f.name == "remap_root") {
      const std::string text = f.value.IsScalar() ? Trim(f.value.Scalar()) : "";
      if (text != "true" && text != "false") {
        return Error(f.line, fmt::format("container.remap_root: expected true or false, got {}",
                                         Describe(f.value)));
      }
      c.remap_root = text == "true";
    }
  }
  container_block_ = std::move(c);
  container_line_ = line;
  return Status::Ok();
}

Status TaskParser::ParseSignal(const YAML::Node& node, int line) {
  if (node.IsNull()) return Status::Ok();
  constexpr std::string_view kForms = "{name: USR1, before: 5m} or USR1@300";
  if (node.IsScalar()) {
    const std::string text = Trim(node.Scalar());
    size_t at = text.find('@');
    if (at == std::string::npos) {
      return Error(line,
                   fmt::format("signal: say when to send it: {}, got {}", kForms, Describe(node)));
    }
    auto sig = ParseSignalName(text.substr(0, at));
    if (!sig.ok()) return Error(line, "signal: " + sig.status().message());
    std::optional<DurationMs> before = ParseDurationText(Trim(text.substr(at + 1)), true);
    if (!before) {
      return Error(line, fmt::format("signal: expected {} (a bare number is seconds), got {}",
                                     kForms, Describe(node)));
    }
    sig->before = *before;
    task_.spec.signal = std::move(*sig);
    return Status::Ok();
  }
  std::vector<Field> fields;
  BERTH_RETURN_IF_ERROR(ReadMap(node, "signal", line, kSignalFields, {}, &fields));
  std::optional<WarnSignal> sig;
  std::optional<DurationMs> before;
  for (const Field& f : fields) {
    if (f.name == "name") {
      if (f.value.IsNull()) continue;
      if (!f.value.IsScalar()) {
        return Error(f.line, fmt::format("signal.name: expected a signal such as USR1, got {}",
                                         Describe(f.value)));
      }
      auto parsed = ParseSignalName(f.value.Scalar());
      if (!parsed.ok()) return Error(f.line, "signal.name: " + parsed.status().message());
      sig = std::move(*parsed);
    } else if (f.name == "before") {
      BERTH_RETURN_IF_ERROR(
          ParseDurationField(f.value, "signal.before", f.line, Bare::kSeconds, &before));
    }
  }
  if (!sig) return Error(line, fmt::format("signal: name is missing, as in {}", kForms));
  if (!before) {
    return Error(line, fmt::format("signal: before is missing (how long before time_limit to send "
                                   "it), as in {}",
                                   kForms));
  }
  sig->before = *before;
  task_.spec.signal = std::move(*sig);
  return Status::Ok();
}

}  // namespace

Result<std::pair<std::string, MilliGpu>> ParseAccelerators(const std::string& raw) {
  std::string text = Trim(raw);
  size_t colon = text.find(':');
  std::string type = Trim(text.substr(0, colon));
  std::string count = colon == std::string::npos ? "1" : Trim(text.substr(colon + 1));
  if (type.empty()) {
    return Status::Invalid(fmt::format(
        "expected an accelerator type and count such as V100:4 or T4:0.5, got \"{}\"", raw));
  }
  if (!IsValidName(type)) {
    return Status::Invalid(fmt::format("\"{}\" is not a valid accelerator type", type));
  }
  std::optional<int64_t> milli =
      count.find('+') == std::string::npos ? ParseMilli(count) : std::nullopt;
  if (!milli) {
    char* end = nullptr;
    double v = std::strtod(count.c_str(), &end);
    bool numeric = !count.empty() && end == count.c_str() + count.size() && std::isfinite(v) &&
                   count.find_first_not_of("-0123456789.") == std::string::npos;
    if (numeric && v <= 0) {
      return Status::Invalid(fmt::format(
          "the GPU count must be positive, got {} (leave accelerators out to ask for no GPU)",
          count));
    }
    if (numeric && v > static_cast<double>(kMaxGpus / kMilliPerGpu)) {
      return Status::Invalid(
          fmt::format("at most {} GPUs per node, got {}", kMaxGpus / kMilliPerGpu, count));
    }
    if (numeric) {
      return Status::Invalid(fmt::format("a GPU share has at most three decimals, got {}", count));
    }
    return Status::Invalid(
        fmt::format("expected a GPU count like {}:4 or {}:0.5, got \"{}\"", type, type, count));
  }
  if (*milli == 0) {
    return Status::Invalid(fmt::format(
        "the GPU count must be positive, got {} (leave accelerators out to ask for no GPU)",
        count));
  }
  if (*milli > kMaxGpus) {
    return Status::Invalid(
        fmt::format("at most {} GPUs per node, got {}", kMaxGpus / kMilliPerGpu, count));
  }
  if (*milli > kMilliPerGpu && *milli % kMilliPerGpu != 0) {
    return Status::Invalid(
        fmt::format("more than one GPU must be a whole number, got {}", FormatMilli(*milli)));
  }
  return std::make_pair(type, *milli);
}

Result<ParsedTask> ParseTaskYaml(const std::string& text, const std::string& source) {
  return TaskParser(source).Parse(text);
}

}  // namespace berth
