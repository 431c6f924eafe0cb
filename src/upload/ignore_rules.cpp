// IgnoreRules: parsing ignore files' patterns and matching paths against them, by git's rules
// (gitignore(5)), with a glob matcher that allocates nothing and never backtracks exponentially.
#include "upload/ignore_rules.h"

#include <cstddef>
#include <string>
#include <utility>

namespace berth::upload {
namespace {

constexpr std::size_t kNone = std::string_view::npos;
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// ---------------------------------------------------------------------------------------------
// Glob matching. A glob is matched segment by segment ('/'-separated): a segment made only of
// asterisks (two or more) matches any number of whole text segments, any other segment exactly
// one. Both levels use the classic iterative wildcard algorithm, which retries only from the most
// recent star: O(glob * text) steps at worst, no recursion and no allocation. (One departure
// from git: a '/' inside brackets splits the glob there, so "[a/]x" matches nothing, where git
// matches "ax"; neither ever matches a '/' with brackets.)
// ---------------------------------------------------------------------------------------------

// Whether `c` belongs to the POSIX class `name` ("alpha", ...); `known` is false for other names.
bool InCharClass(std::string_view name, unsigned char c, bool& known) {
  known = true;
  if (name == "alnum")
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (name == "alpha") return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (name == "blank") return c == ' ' || c == '\t';
  if (name == "cntrl") return c < 0x20 || c == 0x7f;
  if (name == "digit") return c >= '0' && c <= '9';
  if (name == "graph") return c > 0x20 && c < 0x7f;
  if (name == "lower") return c >= 'a' && c <= 'z';
  if (name == "print") return c >= 0x20 && c < 0x7f;
  if (name == "punct") {
    return c > 0x20 && c < 0x7f &&
           !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
  }
  if (name == "space") return c == ' ' || (c >= '\t' && c <= '\r');
  if (name == "upper") return c >= 'A' && c <= 'Z';
  if (name == "xdigit")
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  known = false;
  return false;
}

// Matches the bracket expression at glob[pos] ('[') against `c`, as git's wildmatch does: `!` or
// `^` first negates, a `]` first is literal, `a-z` is a range, `\x` is x, `[:alpha:]` a class.
// Sets `pos` past the closing ']'. A malformed expression (no closing ']', an unknown class)
// matches nothing: `pos` goes to the end of the glob.
bool MatchBracket(std::string_view glob, std::size_t& pos, unsigned char c) {
  std::size_t p = pos + 1;
  const bool negated = p < glob.size() && (glob[p] == '!' || glob[p] == '^');
  if (negated) ++p;
  bool matched = false;
  int prev = -1;  // the previous single character, where a range may start; -1 if none
  for (bool first = true;; first = false) {
    if (p >= glob.size()) break;  // unterminated
    const unsigned char ch = glob[p];
    if (ch == ']' && !first) {
      pos = p + 1;
      return c != '/' && matched != negated;
    }
    if (ch == '\\') {
      if (++p >= glob.size()) break;
      const unsigned char escaped = glob[p++];
      matched |= c == escaped;
      prev = escaped;
    } else if (ch == '-' && prev >= 0 && p + 1 < glob.size() && glob[p + 1] != ']') {
      unsigned char last = glob[++p];
      if (last == '\\') {
        if (++p >= glob.size()) break;
        last = glob[p];
      }
      ++p;
      matched |= c >= prev && c <= last;
      prev = -1;
    } else if (ch == '[' && p + 1 < glob.size() && glob[p + 1] == ':') {
      const std::size_t close = glob.find(']', p + 2);
      if (close == kNone) break;
      if (close > p + 2 && glob[close - 1] == ':') {
        bool known = false;
        matched |= InCharClass(glob.substr(p + 2, close - 1 - (p + 2)), c, known);
        if (!known) break;
        p = close + 1;
        prev = -1;
      } else {  // no ":]": the '[' is an ordinary member
        matched |= c == '[';
        prev = '[';
        ++p;
      }
    } else {
      matched |= c == ch;
      prev = ch;
      ++p;
    }
  }
  pos = glob.size();
  return false;
}

// Matches the single-character element at glob[pos] (a literal, `\x`, `?` or a bracket
// expression) against `c`, and sets `pos` past it.
bool MatchOne(std::string_view glob, std::size_t& pos, char c) {
  switch (glob[pos]) {
    case '?':
      ++pos;
      return c != '/';
    case '[':
      return MatchBracket(glob, pos, static_cast<unsigned char>(c));
    case '\\':
      if (pos + 1 == glob.size()) {  // a trailing backslash matches nothing
        pos = glob.size();
        return false;
      }
      pos += 2;
      return glob[pos - 1] == c;
    default:
      return glob[pos++] == c;
  }
}

// Whether the text segment `text` (no '/') matches the glob segment `glob`, where every run of
// asterisks matches any run of characters.
bool MatchSegment(std::string_view glob, std::string_view text) {
  std::size_t g = 0;
  std::size_t t = 0;
  std::size_t star_g = kNone;  // the glob just after the last star seen
  std::size_t star_t = 0;      // where that star's match ends for now
  while (t < text.size()) {
    if (g < glob.size() && glob[g] == '*') {
      star_g = ++g;
      star_t = t;
      continue;
    }
    if (g < glob.size()) {
      std::size_t next = g;
      if (MatchOne(glob, next, text[t])) {
        g = next;
        ++t;
        continue;
      }
    }
    if (star_g == kNone) return false;
    g = star_g;  // let the last star swallow one more character, and retry
    t = ++star_t;
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

// The segment of `s` that starts at `start`: up to the next '/' or the end.
std::string_view SegmentAt(std::string_view s, std::size_t start) {
  const std::size_t end = s.find('/', start);
  return s.substr(start, end == kNone ? kNone : end - start);
}

// Where the segment after the one at `start` starts; s.size() + 1 past the last one.
std::size_t NextSegment(std::string_view s, std::size_t start) {
  const std::size_t end = s.find('/', start);
  return end == kNone ? s.size() + 1 : end + 1;
}

// Whether a glob segment is `**` (or more asterisks): one that matches any number of segments.
bool IsDoubleStar(std::string_view segment) {
  return segment.size() >= 2 && segment.find_first_not_of('*') == kNone;
}

// Whether `glob` is one segment (no '/') that is not `**`: one MatchSegment decides alone.
bool IsSingleSegment(std::string_view glob) {
  return glob.find('/') == kNone && !IsDoubleStar(glob);
}

// ---------------------------------------------------------------------------------------------
// Parsing ignore files.
// ---------------------------------------------------------------------------------------------

// `line` without its trailing spaces, except those escaped with a backslash (git's
// trim_trailing_spaces: "a\ " keeps its space, "a\  " loses the second one).
std::string_view TrimTrailingSpaces(std::string_view line) {
  std::size_t keep = line.size();
  std::size_t spaces_from = kNone;  // start of the current run of unescaped spaces
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == ' ') {
      if (spaces_from == kNone) spaces_from = i;
      continue;
    }
    if (line[i] == '\\') ++i;  // the escaped character (if any) is kept as it is
    spaces_from = kNone;
  }
  if (spaces_from != kNone) keep = spaces_from;
  return line.substr(0, keep);
}

// The part of `path` below directory `dir` ("" = the root: all of it); empty when `path` is not
// strictly inside `dir` (a pattern of "sub/.gitignore" applies neither to "sub" nor to "subway").
std::string_view PathUnder(std::string_view dir, std::string_view path) {
  if (dir.empty()) return path;
  if (path.size() <= dir.size() + 1 || path[dir.size()] != '/' || !path.starts_with(dir)) return {};
  return path.substr(dir.size() + 1);
}

// The last component of a '/'-separated path.
std::string_view Basename(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == kNone ? path : path.substr(slash + 1);
}

}  // namespace

bool GlobMatch(std::string_view glob, std::string_view text) {
  if (IsSingleSegment(glob) && text.find('/') == kNone) return MatchSegment(glob, text);
  // Positions are segment starts; size() + 1 means "past the last segment", so that "" is one
  // (empty) segment and a trailing "/**" needs at least one segment to match (git: "a/**" does
  // not match "a").
  const std::size_t glob_end = glob.size() + 1;
  const std::size_t text_end = text.size() + 1;
  std::size_t g = 0;
  std::size_t t = 0;
  std::size_t star_g = kNone;  // the glob segment after the last `**` seen
  std::size_t star_t = 0;      // the first text segment that `**` has not swallowed
  while (t < text_end) {
    if (g < glob_end) {
      const std::string_view segment = SegmentAt(glob, g);
      if (IsDoubleStar(segment)) {
        star_g = g = NextSegment(glob, g);
        star_t = t;
        continue;
      }
      if (MatchSegment(segment, SegmentAt(text, t))) {
        g = NextSegment(glob, g);
        t = NextSegment(text, t);
        continue;
      }
    }
    if (star_g == kNone) return false;
    star_t = NextSegment(text, star_t);  // let the last `**` swallow one more segment, and retry
    t = star_t;
    g = star_g;
  }
  // The text is used up. A glob left over can only be `**` segments after some other segment (a
  // leading `**` would have been entered above), i.e. a trailing "/**", which needs something
  // inside: no match.
  return g == glob_end;
}

bool IgnoreRules::Pattern::Matches(std::string_view path, std::string_view basename,
                                   bool is_dir) const {
  if (dir_only && !is_dir) return false;
  const std::string_view under = PathUnder(dir, path);
  if (under.empty()) return false;
  return GlobMatch(glob, anchored ? under : basename);
}

void IgnoreRules::AddFile(std::string_view dir, std::string_view text, std::string_view source) {
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
  std::size_t line_number = 0;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == kNone ? text.size() : newline + 1);
    ++line_number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    line = TrimTrailingSpaces(line);

    Pattern pattern;
    std::string_view glob = line;
    if (glob.starts_with('!')) {
      pattern.negated = true;
      glob.remove_prefix(1);
    }
    if (glob.ends_with('/')) {
      pattern.dir_only = true;
      glob.remove_suffix(1);
    }
    pattern.anchored = glob.find('/') != kNone;
    if (glob.starts_with('/')) glob.remove_prefix(1);
    if (glob.empty()) continue;  // "", "!", "/": nothing to match
    pattern.dir = dir;
    pattern.glob = glob;
    pattern.rule.reserve(source.size() + line.size() + 16);
    pattern.rule.append(source).append(":").append(std::to_string(line_number)).append(": ");
    pattern.rule.append(line);
    patterns_.push_back(std::move(pattern));
  }
}

IgnoreRules::Verdict IgnoreRules::Match(std::string_view path, bool is_dir) const {
  const std::string_view basename = Basename(path);
  // The last pattern that matches decides: look from the end and stop at the first.
  for (auto it = patterns_.rbegin(); it != patterns_.rend(); ++it) {
    if (it->Matches(path, basename, is_dir)) return Verdict{!it->negated, it->rule};
  }
  return Verdict{};
}

}  // namespace berth::upload
