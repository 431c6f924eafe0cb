// `berth workdir ls`: what `berth exec` would upload of a directory, and why the rest stays
// (docs/user-guide.md "Workdir upload").
#include <fmt/format.h>

#include <map>
#include <utility>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "upload/manifest.h"
#include "upload/tree_walk.h"

namespace berth::cli {
namespace {

struct WorkdirLsFlags {
  std::string dir = ".";
  bool ignored = false;
  bool all = false;  // every file of a .git directory too
};

// The .git directory `path` is in ("src/.git" for "src/.git/objects/ab/cd"), or "" when none: its
// thousands of objects are one line of `workdir ls` (they are uploaded all the same).
std::string GitDirOf(const std::string& path) {
  size_t at = 0;
  while (at <= path.size()) {
    const size_t slash = path.find('/', at);
    const std::string part =
        path.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part == ".git") return path.substr(0, slash == std::string::npos ? path.size() : slash);
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return "";
}

int WorkdirLs(const WorkdirLsFlags& f) {
  upload::ManifestLimits limits;
  // A walk past the limit still lists what it saw: the user is here to find what to leave out.
  auto walk = upload::WalkTree(f.dir, true, limits.max_entries);
  if (!walk.ok()) return Fail(walk.status());
  int64_t files = 0;
  int64_t bytes = 0;
  if (f.ignored) {
    for (const upload::LeftOut& l : walk->left_out) fmt::print("{}\t{}\n", l.path, l.why);
  } else {
    std::vector<const upload::WalkedEntry*> sorted;
    for (const upload::WalkedEntry& e : walk->entries) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return a->path < b->path; });
    // A .git directory as one line, with what it holds (--all lists it file by file).
    std::map<std::string, std::pair<int64_t, int64_t>> git;  // dir -> files, bytes
    for (const upload::WalkedEntry* e : sorted) {
      const std::string dir = f.all ? "" : GitDirOf(e->path);
      if (dir.empty()) continue;
      auto& [n, b] = git[dir];
      if (e->kind == upload::ManifestEntry::Kind::kFile) n += 1, b += e->size;
    }
    for (const upload::WalkedEntry* e : sorted) {
      const std::string in_git = f.all ? "" : GitDirOf(e->path);
      if (!in_git.empty()) {
        if (e->path != in_git) continue;  // said with the directory itself
        const auto& [n, b] = git[in_git];
        fmt::print("{}/ ({} files, {}; --all lists them)\n", in_git, n, upload::HumanBytes(b));
        continue;
      }
      const bool dir = e->kind == upload::ManifestEntry::Kind::kDir;
      fmt::print("{}{}\n", e->path, dir ? "/" : "");
    }
  }
  for (const upload::WalkedEntry& e : walk->entries) {
    if (e.kind == upload::ManifestEntry::Kind::kFile) files += 1, bytes += e.size;
  }
  fmt::print(stderr, "{} files ({}) would be uploaded; {} left out{}\n", files,
             upload::HumanBytes(bytes), walk->left_out.size(),
             f.ignored ? "" : " (--ignored lists them with the reason)");
  return 0;
}

}  // namespace

void AddWorkdirCommand(CommandContext& c) {
  auto* workdir = c.app.add_subcommand(
      "workdir", "What `berth exec` uploads of a workdir: berth workdir ls [--ignored] [DIR]");
  workdir->require_subcommand(1);
  auto& ls_flags = c.Keep<WorkdirLsFlags>();
  auto* ls = workdir->add_subcommand(
      "ls",
      "List the files a workdir upload sends (its .gitignore files, or a .skyignore, apply); with "
      "--ignored, what stays behind and the rule that says so");
  ls->add_option("dir", ls_flags.dir, "The directory (default: the current one)");
  ls->add_flag("--ignored", ls_flags.ignored, "List what is left out, each with its reason");
  ls->add_flag("--all", ls_flags.all,
               "List every file of a .git directory too (by default one line says what it holds)");
  ls->callback([&] { c.rc = WorkdirLs(ls_flags); });
}

}  // namespace berth::cli
