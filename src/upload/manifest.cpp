// Manifests' canonical text, parsing with the safety checks, and limits (upload/manifest.h).
#include "upload/manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/json_util.h"
#include "upload/digest.h"

namespace berth::upload {
namespace {

constexpr std::string_view kKindFile = "f";
constexpr std::string_view kKindDir = "d";
constexpr std::string_view kKindSymlink = "l";
constexpr size_t kMaxPathBytes = 4096;

// A relative path of plain segments: not empty, no leading or trailing '/', no "" "." ".."
// segment, no NUL.
bool IsPlainRelativePath(std::string_view path) {
  if (path.empty() || path.size() > kMaxPathBytes || path.find('\0') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = end + 1;
  }
  return true;
}

// "a/b/c" -> "a/b"; "a" -> "".
std::string_view Parent(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

json::array EntryJson(const ManifestEntry& e) {
  switch (e.kind) {
    case ManifestEntry::Kind::kFile:
      return json::array{kKindFile, e.path, e.mode, e.size, e.digest};
    case ManifestEntry::Kind::kDir:
      return json::array{kKindDir, e.path, e.mode};
    case ManifestEntry::Kind::kSymlink:
      return json::array{kKindSymlink, e.path, e.target};
  }
  return {};
}

Result<ManifestEntry> EntryOf(const json::value& v, size_t index) {
  auto bad = [&](std::string_view why) {
    return Status::Invalid(fmt::format("manifest entry {}: {}", index, why));
  };
  if (!v.is_array() || v.as_array().size() < 3 || !v.as_array()[0].is_string() ||
      !v.as_array()[1].is_string()) {
    return bad("expected [kind, path, ...]");
  }
  const json::array& a = v.as_array();
  ManifestEntry e;
  std::string_view kind = a[0].as_string();
  e.path = std::string(a[1].as_string());
  if (!IsPlainRelativePath(e.path)) {
    return bad(fmt::format("path '{}' is not a plain relative path", e.path));
  }
  auto mode_of = [&](const json::value& m) -> Result<uint32_t> {
    auto n = AsInt(m);
    if (!n || *n < 0 || *n > 0777) return bad("mode must be permission bits (0 to 0777)");
    return static_cast<uint32_t>(*n);
  };
  if (kind == kKindFile && a.size() == 5) {
    e.kind = ManifestEntry::Kind::kFile;
    auto mode = mode_of(a[2]);
    if (!mode.ok()) return mode.status();
    e.mode = *mode;
    auto size = AsInt(a[3]);
    if (!size || *size < 0) return bad("size must be a count of bytes");
    e.size = *size;
    if (!a[4].is_string() || !IsDigest(a[4].as_string())) return bad("digest must be 64 hex");
    e.digest = std::string(a[4].as_string());
  } else if (kind == kKindDir && a.size() == 3) {
    e.kind = ManifestEntry::Kind::kDir;
    auto mode = mode_of(a[2]);
    if (!mode.ok()) return mode.status();
    e.mode = *mode;
  } else if (kind == kKindSymlink && a.size() == 3 && a[2].is_string()) {
    e.kind = ManifestEntry::Kind::kSymlink;
    e.target = std::string(a[2].as_string());
    if (e.target.empty() || e.target.size() > kMaxPathBytes ||
        e.target.find('\0') != std::string::npos) {
      return bad("symlink target must be a path");
    }
  } else {
    return bad(
        "expected [\"f\", path, mode, size, digest], [\"d\", path, mode] or "
        "[\"l\", path, target]");
  }
  return e;
}

// Every entry's parent is a directory of the manifest or implied by another path, never a file or
// a symlink (which a rebuild as root would write through).
Status CheckParents(const Manifest& m) {
  std::set<std::string_view> not_dirs;
  for (const ManifestEntry& e : m.entries) {
    if (e.kind != ManifestEntry::Kind::kDir) not_dirs.insert(e.path);
  }
  for (const ManifestEntry& e : m.entries) {
    for (std::string_view p = Parent(e.path); !p.empty(); p = Parent(p)) {
      if (not_dirs.count(p)) {
        return Status::Invalid(
            fmt::format("manifest: '{}' is inside '{}', which is not a directory", e.path, p));
      }
    }
  }
  return Status::Ok();
}

// The directories (top two levels) holding the most of what `weight` counts, biggest first.
std::vector<std::pair<std::string, int64_t>> Biggest(const Manifest& m, bool by_bytes) {
  std::map<std::string, int64_t> per_dir;
  for (const ManifestEntry& e : m.entries) {
    int64_t w = by_bytes ? e.size : 1;
    size_t first = e.path.find('/');
    if (first == std::string::npos) continue;  // a top-level entry is not in a directory
    per_dir[e.path.substr(0, first + 1)] += w;
    size_t second = e.path.find('/', first + 1);
    if (second != std::string::npos) per_dir[e.path.substr(0, second + 1)] += w;
  }
  std::vector<std::pair<std::string, int64_t>> out(per_dir.begin(), per_dir.end());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (out.size() > 3) out.resize(3);
  return out;
}

std::string BiggestText(const Manifest& m, bool by_bytes) {
  std::string text;
  for (const auto& [dir, w] : Biggest(m, by_bytes)) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} ({})", dir, by_bytes ? HumanBytes(w) : fmt::format("{} entries", w));
  }
  return text.empty() ? "" : "; the biggest directories: " + text;
}

}  // namespace

int64_t Manifest::TotalBytes() const {
  int64_t total = 0;
  for (const ManifestEntry& e : entries) total += e.size;
  return total;
}

int64_t Manifest::Files() const {
  return std::count_if(entries.begin(), entries.end(),
                       [](const ManifestEntry& e) { return e.kind == ManifestEntry::Kind::kFile; });
}

std::string SerializeManifest(Manifest manifest) {
  std::sort(manifest.entries.begin(), manifest.entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path < b.path; });
  json::array entries;
  entries.reserve(manifest.entries.size());
  for (const ManifestEntry& e : manifest.entries) entries.push_back(EntryJson(e));
  return json::serialize(json::object{{"version", 1}, {"entries", std::move(entries)}});
}

Result<Manifest> ParseManifest(std::string_view text, const ManifestLimits& limits) {
  auto v = ParseJson(text, "manifest");
  if (!v.ok()) return v.status();
  if (!v->is_object() || !v->as_object().contains("entries") ||
      !v->as_object().at("entries").is_array()) {
    return Status::Invalid("manifest: expected {\"version\": 1, \"entries\": [...]}");
  }
  auto version = AsInt(v->as_object().contains("version") ? v->as_object().at("version") : 0);
  if (version != 1) return Status::Invalid("manifest: version must be 1");
  const json::array& entries = v->as_object().at("entries").as_array();
  if (static_cast<int64_t>(entries.size()) > limits.max_entries) {
    return Status::TooLarge(fmt::format("the upload holds {} entries, over the limit of {}",
                                        entries.size(), limits.max_entries));
  }
  Manifest m;
  m.entries.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    auto e = EntryOf(entries[i], i);
    if (!e.ok()) return e.status();
    if (!m.entries.empty() && m.entries.back().path >= e->path) {
      return Status::Invalid(fmt::format(
          "manifest entry {}: '{}' out of order or repeated (entries are sorted by path, once)", i,
          e->path));
    }
    m.entries.push_back(std::move(*e));
  }
  BERTH_RETURN_IF_ERROR(CheckParents(m));
  BERTH_RETURN_IF_ERROR(CheckManifestLimits(m, limits));
  return m;
}

Status CheckManifestLimits(const Manifest& m, const ManifestLimits& limits, std::string_view what) {
  if (static_cast<int64_t>(m.entries.size()) > limits.max_entries) {
    return Status::TooLarge(fmt::format("{} holds {} files and directories, over the limit of {}{}",
                                        what, m.entries.size(), limits.max_entries,
                                        BiggestText(m, false)));
  }
  for (const ManifestEntry& e : m.entries) {
    if (e.size > limits.max_file_bytes) {
      return Status::TooLarge(fmt::format("{}: {} is {}, over the limit of {} per file", what,
                                          e.path, HumanBytes(e.size),
                                          HumanBytes(limits.max_file_bytes)));
    }
  }
  if (int64_t total = m.TotalBytes(); total > limits.max_total_bytes) {
    return Status::TooLarge(fmt::format("{} holds {}, over the limit of {}{}", what,
                                        HumanBytes(total), HumanBytes(limits.max_total_bytes),
                                        BiggestText(m, true)));
  }
  return Status::Ok();
}

std::string HumanBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) v /= 1024, ++unit;
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, v < 10 ? 1 : 0, kUnits[unit]);
}

}  // namespace berth::upload
