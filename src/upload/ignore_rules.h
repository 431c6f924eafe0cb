// IgnoreRules: which files of a workdir stay behind when it is uploaded, by gitignore's rules
// (docs/user-guide.md "Workdir upload"). Patterns come from ignore files found while walking the
// tree (`.gitignore` in any directory, `.git/info/exclude`; or the root's `.skyignore` instead of
// all of them, as SkyPilot does: the walker, upload/tree_walk.h, decides which files to add).
//
// Semantics are git's (gitignore(5)): blank lines and lines starting with `#` are skipped; `\#` and
// `\!` escape a leading `#` or `!`; trailing spaces are trimmed unless escaped with `\`; a leading
// `!` negates (re-includes); a trailing `/` matches directories only; a pattern with a `/` at its
// start or middle is anchored to the directory of its ignore file, one without matches the name
// at any depth below it; `*` and `?` and `[a-z]`, `[!a-z]` / `[^a-z]` never match `/`; a leading
// `**/` matches in all directories, a trailing `/**` everything inside, and `/**/` zero or more
// directories. Of all patterns that match a path, the last one wins, where the patterns of a
// deeper directory's file come after those of its parents (AddFile's order: the walker adds a
// directory's file before walking into it). A path inside an ignored directory is never asked
// about: the walker does not walk into it (git's "cannot re-include a file if a parent directory
// of that file is excluded").
//
// Thread-safety: none; one walker builds and reads it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace berth::upload {

class IgnoreRules {
 public:
  // What Match decided, and why.
  struct Verdict {
    bool ignored = false;
    // The last pattern that matched, as "sub/.gitignore:3: *.log" (negated ones too, with their
    // `!`); empty when none did.
    std::string rule;
  };

  // Adds the patterns of an ignore file whose text is `text`, found in directory `dir` (relative to
  // the tree's root, '/'-separated, no leading or trailing '/'; "" for the root). `source` names
  // the file in Verdict::rule ("sub/.gitignore"). Patterns of files added later win over earlier
  // ones.
  void AddFile(std::string_view dir, std::string_view text, std::string_view source);

  // Whether `path` (relative to the root, '/'-separated, no leading or trailing '/') is ignored;
  // `is_dir` when it is a directory (for patterns ending in '/').
  Verdict Match(std::string_view path, bool is_dir) const;

  // Whether no pattern was added (the walker skips Match then).
  bool empty() const { return patterns_.empty(); }

 private:
  struct Pattern {
    std::string dir;  // the ignore file's directory ("" = root)
    // Without the leading '!', the leading '/' and the trailing '/'; backslash escapes are kept
    // (GlobMatch resolves them, so that `\*` stays a literal '*').
    std::string glob;
    bool negated = false;
    bool dir_only = false;
    bool anchored = false;  // had a '/' at its start or middle: matched against the path under dir
    std::string rule;       // "source:line: text", for Verdict::rule

    // Whether this pattern matches `path`, whose last component is `basename` (ignoring negation).
    bool Matches(std::string_view path, std::string_view basename, bool is_dir) const;
  };
  std::vector<Pattern> patterns_;
};

// Whether `text` matches the glob `glob` the way gitignore matches a pattern against a path:
// `*`, `?` and brackets do not match '/', `**` as a whole segment matches any number of segments.
// Exposed for tests.
bool GlobMatch(std::string_view glob, std::string_view text);

}  // namespace berth::upload
