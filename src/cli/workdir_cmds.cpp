// `berth workdir ls`: what `berth exec` would upload of a directory, and why the rest stays
// (docs/user-guide.md "Workdir upload").
#include <fmt/format.h>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "upload/manifest.h"
#include "upload/tree_walk.h"

namespace berth::cli {
namespace {

struct WorkdirLsFlags {
  std::string dir = ".";
  bool ignored = false;
};

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
    for (const upload::WalkedEntry* e : sorted) {
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
  ls->callback([&] { c.rc = WorkdirLs(ls_flags); });
}

}  // namespace berth::cli
