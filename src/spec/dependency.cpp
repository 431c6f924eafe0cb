// Dependencies ("ok:10,11", Slurm's "afterok:10:11") and the names of warning signals ("USR1"):
// the small text forms of the pipeline fields of a JobSpec, shared by the task YAML, the JSON form
// and the CLI's --after.
#include <fmt/format.h>

#include <array>
#include <csignal>
#include <optional>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "spec/job_spec.h"

namespace berth {
namespace {

// The text as quoted in a message: a pasted list of ten thousand ids would bury the point.
std::string Quoted(std::string_view text) {
  constexpr size_t kMaxShown = 80;
  if (text.size() <= kMaxShown) return fmt::format("'{}'", text);
  return fmt::format("'{}...'", text.substr(0, kMaxShown));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return out;
}

// "ok", "afterok" -> kOk, ...; nullopt for anything else.
std::optional<DependencyKind> KindFromName(std::string_view name) {
  std::string n = Lower(name);
  if (StartsWith(n, "after")) n.erase(0, 5);  // Slurm's spelling
  if (n == "ok") return DependencyKind::kOk;
  if (n == "notok") return DependencyKind::kNotOk;
  if (n == "any") return DependencyKind::kAny;
  return std::nullopt;
}

// A job or group id: decimal digits only (no sign), positive, within int64.
std::optional<int64_t> ParseId(std::string_view s) {
  std::optional<int64_t> v = ParseDecimal(s);
  if (!v || *v <= 0) return std::nullopt;
  return v;
}

struct SignalEntry {
  std::string_view name;
  int number;
};
constexpr std::array<SignalEntry, 10> kSignals = {{{"HUP", SIGHUP},
                                                   {"INT", SIGINT},
                                                   {"QUIT", SIGQUIT},
                                                   {"USR1", SIGUSR1},
                                                   {"USR2", SIGUSR2},
                                                   {"ALRM", SIGALRM},
                                                   {"TERM", SIGTERM},
                                                   {"CONT", SIGCONT},
                                                   {"URG", SIGURG},
                                                   {"WINCH", SIGWINCH}}};
constexpr std::string_view kSignalList =
    "HUP, INT, QUIT, USR1, USR2, ALRM, TERM, CONT, URG or WINCH";

}  // namespace

std::string_view DependencyKindName(DependencyKind kind) {
  switch (kind) {
    case DependencyKind::kOk:
      return "ok";
    case DependencyKind::kNotOk:
      return "notok";
    case DependencyKind::kAny:
      return "any";
  }
  return "ok";
}

std::string DependencyText(const Dependency& dep) {
  std::string out(DependencyKindName(dep.kind));
  out += dep.groups ? ":group:" : ":";
  for (size_t i = 0; i < dep.ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(dep.ids[i]);
  }
  return out;
}

Result<Dependency> ParseDependency(std::string_view raw) {
  const std::string text = Trim(raw);
  auto error = [&](std::string_view what) {
    return Status::Invalid(fmt::format("dependency {}: {}", Quoted(text), what));
  };
  if (text.empty()) {
    return Status::Invalid(
        "empty dependency (expected KIND:ID such as ok:10, any:10,11 or "
        "notok:group:3)");
  }
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return error("expected KIND:ID such as ok:10, any:10,11 or notok:group:3");
  }
  const std::string kind_text = Trim(std::string_view(text).substr(0, colon));
  std::optional<DependencyKind> kind = KindFromName(kind_text);
  if (!kind) {
    return error(fmt::format("unknown kind {} (expected ok, notok or any)", Quoted(kind_text)));
  }
  Dependency dep;
  dep.kind = *kind;
  std::string_view rest = std::string_view(text).substr(colon + 1);
  // "group:G[,G...]": the ids that follow are bulk groups.
  {
    std::string head = Lower(Trim(rest.substr(0, rest.find(':'))));
    if (head == "group" && rest.find(':') != std::string_view::npos) {
      dep.groups = true;
      rest.remove_prefix(rest.find(':') + 1);
    }
  }
  const char* what = dep.groups ? "group" : "job";
  if (Trim(rest).empty()) return error(fmt::format("names no {}", what));
  // Ids are separated by ',' (berth) or ':' (Slurm's afterok:10:11).
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find_first_of(",:", start);
    if (end == std::string_view::npos) end = rest.size();
    const std::string item = Trim(rest.substr(start, end - start));
    if (item.empty()) {
      return error(fmt::format("a {} id is missing between separators", what));
    }
    std::optional<int64_t> id = ParseId(item);
    if (!id) {
      if (Lower(item) == "group") {
        return error(fmt::format("'group' needs group ids after it, as {}:group:3",
                                 DependencyKindName(dep.kind)));
      }
      std::string hint;
      if (item.find_first_not_of('0') == std::string::npos) {
        hint = " (ids start at 1)";
      } else if (item.find_first_not_of("0123456789") == std::string::npos) {
        hint = " (too large)";
      } else if (KindFromName(item)) {
        hint = " (write each dependency separately, as ok:10 and any:11)";
      }
      return error(fmt::format("{} is not a {} id{}", Quoted(item), what, hint));
    }
    dep.ids.push_back(*id);
    start = end + 1;
  }
  return dep;
}

Result<WarnSignal> ParseSignalName(std::string_view raw) {
  const std::string name = Upper(Trim(raw));
  if (name.empty()) {
    return Status::Invalid(fmt::format("no signal named (expected {})", kSignalList));
  }
  std::string_view bare = name;
  if (StartsWith(bare, "SIG")) bare.remove_prefix(3);
  for (const SignalEntry& s : kSignals) {
    if (s.name == bare) {
      WarnSignal out;
      out.number = s.number;
      out.name = std::string(s.name);
      return out;
    }
  }
  const std::string shown = Trim(raw);
  if (bare == "KILL" || bare == "STOP") {
    return Status::Invalid(
        fmt::format("signal {} cannot be caught, so it cannot warn a job (expected {})",
                    Quoted(shown), kSignalList));
  }
  return Status::Invalid(
      fmt::format("unknown signal {} (expected {})", Quoted(shown), kSignalList));
}

}  // namespace berth
