// IgnoreRules and GlobMatch: gitignore(5)'s syntax and matching, nested ignore files, the rule a
// Verdict names, and a tree-sized workload.
#include "upload/ignore_rules.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace berth::upload {
namespace {

// Rules from one ignore file at the root, named ".gitignore".
IgnoreRules RootRules(std::string_view text) {
  IgnoreRules rules;
  rules.AddFile("", text, ".gitignore");
  return rules;
}

bool IgnoredFile(const IgnoreRules& rules, std::string_view path) {
  return rules.Match(path, /*is_dir=*/false).ignored;
}

bool IgnoredDir(const IgnoreRules& rules, std::string_view path) {
  return rules.Match(path, /*is_dir=*/true).ignored;
}

// ---- GlobMatch ---------------------------------------------------------------------------------

TEST(GlobMatch, LiteralsMatchOnlyThemselves) {
  EXPECT_TRUE(GlobMatch("foo", "foo"));
  EXPECT_TRUE(GlobMatch("a/b/c", "a/b/c"));
  EXPECT_FALSE(GlobMatch("foo", "fo"));
  EXPECT_FALSE(GlobMatch("foo", "foo2"));
  EXPECT_FALSE(GlobMatch("foo", "Foo"));
  EXPECT_FALSE(GlobMatch("a/b", "a/b/c"));
  EXPECT_FALSE(GlobMatch("a/b/c", "a/b"));
}

TEST(GlobMatch, StarMatchesAnyRunWithinOneSegment) {
  EXPECT_TRUE(GlobMatch("*.log", "a.log"));
  EXPECT_TRUE(GlobMatch("*.log", ".log"));
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("a*", "a"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
  EXPECT_TRUE(GlobMatch("a*b*c", "abbbc"));
  EXPECT_TRUE(GlobMatch("src/*.c", "src/main.c"));
  EXPECT_FALSE(GlobMatch("*.log", "a.txt"));
  EXPECT_FALSE(GlobMatch("*.log", "a/b.log"));
  EXPECT_FALSE(GlobMatch("*", "a/b"));
  EXPECT_FALSE(GlobMatch("src/*.c", "src/x/main.c"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYY"));
}

TEST(GlobMatch, QuestionMarkMatchesOneCharacterButNotSlash) {
  EXPECT_TRUE(GlobMatch("a?c", "abc"));
  EXPECT_TRUE(GlobMatch("???", "xyz"));
  EXPECT_FALSE(GlobMatch("a?c", "ac"));
  EXPECT_FALSE(GlobMatch("a?c", "abbc"));
  EXPECT_FALSE(GlobMatch("a?c", "a/c"));
}

TEST(GlobMatch, BracketsMatchSetsAndRanges) {
  EXPECT_TRUE(GlobMatch("[abc].o", "b.o"));
  EXPECT_FALSE(GlobMatch("[abc].o", "d.o"));
  EXPECT_TRUE(GlobMatch("file[0-9]", "file7"));
  EXPECT_FALSE(GlobMatch("file[0-9]", "filex"));
  EXPECT_TRUE(GlobMatch("[a-cx-z]", "y"));
  EXPECT_FALSE(GlobMatch("[a-cx-z]", "m"));
  EXPECT_TRUE(GlobMatch("[]a]", "]"));  // a ']' first is a member
  EXPECT_TRUE(GlobMatch("[]a]", "a"));
  EXPECT_TRUE(GlobMatch("[a-]", "-"));  // a '-' last is a member
  EXPECT_TRUE(GlobMatch("[-a]", "-"));  // and so is one first
  EXPECT_FALSE(GlobMatch("[a-]", "b"));
}

TEST(GlobMatch, NegatedBracketsMatchWhatIsNotListed) {
  EXPECT_TRUE(GlobMatch("[!a-c]x", "dx"));
  EXPECT_FALSE(GlobMatch("[!a-c]x", "bx"));
  EXPECT_TRUE(GlobMatch("[^a-c]x", "dx"));
  EXPECT_FALSE(GlobMatch("[^a-c]x", "bx"));
  EXPECT_TRUE(GlobMatch("[!]]", "a"));
  EXPECT_FALSE(GlobMatch("[!]]", "]"));
}

TEST(GlobMatch, BracketsNeverMatchSlash) {
  EXPECT_FALSE(GlobMatch("a[!x]b", "a/b"));
  EXPECT_FALSE(GlobMatch("a[^x]b", "a/b"));
  EXPECT_FALSE(GlobMatch("a[/]b", "a/b"));
}

TEST(GlobMatch, BackslashEscapesInsideBrackets) {
  EXPECT_TRUE(GlobMatch(R"([\]])", "]"));
  EXPECT_TRUE(GlobMatch(R"([a\-z])", "-"));  // not a range
  EXPECT_FALSE(GlobMatch(R"([a\-z])", "m"));
  EXPECT_TRUE(GlobMatch(R"([a\-z])", "z"));
  EXPECT_TRUE(GlobMatch(R"([\!a])", "!"));
  EXPECT_TRUE(GlobMatch(R"([a-\z])", "m"));  // an escaped range end
}

TEST(GlobMatch, PosixCharacterClasses) {
  EXPECT_TRUE(GlobMatch("[[:digit:]]x", "7x"));
  EXPECT_FALSE(GlobMatch("[[:digit:]]x", "ax"));
  EXPECT_TRUE(GlobMatch("[[:upper:][:digit:]]", "Q"));
  EXPECT_TRUE(GlobMatch("[![:alpha:]]", "1"));
  EXPECT_FALSE(GlobMatch("[![:alpha:]]", "z"));
  EXPECT_TRUE(GlobMatch("[[:space:]]", " "));
  EXPECT_FALSE(GlobMatch("[[:nonsense:]]", "n"));  // an unknown class matches nothing
}

TEST(GlobMatch, MalformedGlobsMatchNothing) {
  EXPECT_FALSE(GlobMatch("[abc", "[abc"));  // no closing ']'
  EXPECT_FALSE(GlobMatch("[abc", "a"));
  EXPECT_FALSE(GlobMatch("*[", "x["));
  EXPECT_FALSE(GlobMatch("foo\\", "foo\\"));  // a trailing backslash
  EXPECT_FALSE(GlobMatch("foo\\", "foo"));
}

TEST(GlobMatch, BackslashMakesTheNextCharacterLiteral) {
  EXPECT_TRUE(GlobMatch(R"(\*)", "*"));
  EXPECT_FALSE(GlobMatch(R"(\*)", "a"));
  EXPECT_TRUE(GlobMatch(R"(a\?)", "a?"));
  EXPECT_FALSE(GlobMatch(R"(a\?)", "ab"));
  EXPECT_TRUE(GlobMatch(R"(\[a])", "[a]"));
  EXPECT_FALSE(GlobMatch(R"(\[a])", "a"));
  EXPECT_TRUE(GlobMatch(R"(\#x)", "#x"));
  EXPECT_TRUE(GlobMatch(R"(\\)", "\\"));
}

TEST(GlobMatch, LeadingDoubleStarMatchesInAllDirectories) {
  EXPECT_TRUE(GlobMatch("**/foo", "foo"));
  EXPECT_TRUE(GlobMatch("**/foo", "a/foo"));
  EXPECT_TRUE(GlobMatch("**/foo", "a/b/c/foo"));
  EXPECT_TRUE(GlobMatch("**/foo/bar", "x/foo/bar"));
  EXPECT_TRUE(GlobMatch("**/foo/bar", "foo/bar"));
  EXPECT_FALSE(GlobMatch("**/foo", "afoo"));
  EXPECT_FALSE(GlobMatch("**/foo", "foo/a"));
  EXPECT_FALSE(GlobMatch("**/foo/bar", "foo/x/bar"));
}

TEST(GlobMatch, TrailingDoubleStarMatchesEverythingInside) {
  EXPECT_TRUE(GlobMatch("foo/**", "foo/a"));
  EXPECT_TRUE(GlobMatch("foo/**", "foo/a/b/c"));
  EXPECT_FALSE(GlobMatch("foo/**", "foo"));  // the directory itself is not inside
  EXPECT_FALSE(GlobMatch("foo/**", "foobar/a"));
  EXPECT_FALSE(GlobMatch("foo/**", "x/foo/a"));
}

TEST(GlobMatch, MiddleDoubleStarMatchesZeroOrMoreDirectories) {
  EXPECT_TRUE(GlobMatch("a/**/b", "a/b"));
  EXPECT_TRUE(GlobMatch("a/**/b", "a/x/b"));
  EXPECT_TRUE(GlobMatch("a/**/b", "a/x/y/b"));
  EXPECT_TRUE(GlobMatch("a/**/b", "a/b/b"));
  EXPECT_FALSE(GlobMatch("a/**/b", "a/xb"));
  EXPECT_FALSE(GlobMatch("a/**/b", "a/b/c"));
  EXPECT_FALSE(GlobMatch("a/**/b", "b"));
  EXPECT_FALSE(GlobMatch("a/**/b", "x/a/b"));
  EXPECT_TRUE(GlobMatch("a/**/b/**/c", "a/1/b/2/3/c"));
  EXPECT_TRUE(GlobMatch("a/**/b/**/c", "a/b/c"));
  EXPECT_TRUE(GlobMatch("a/**/*.h", "a/x/y/z.h"));
  EXPECT_FALSE(GlobMatch("a/**/*.h", "a/x/y/z.c"));
}

TEST(GlobMatch, DoubleStarAloneMatchesEverything) {
  EXPECT_TRUE(GlobMatch("**", "a"));
  EXPECT_TRUE(GlobMatch("**", "a/b/c"));
  EXPECT_TRUE(GlobMatch("**/**", "a/b"));
}

TEST(GlobMatch, OtherConsecutiveAsterisksAreOneStar) {
  EXPECT_TRUE(GlobMatch("a**b", "axyb"));
  EXPECT_FALSE(GlobMatch("a**b", "ax/yb"));
  EXPECT_TRUE(GlobMatch("**foo", "xfoo"));
  EXPECT_FALSE(GlobMatch("**foo", "x/foo"));
  EXPECT_TRUE(GlobMatch("foo**", "foobar"));
  EXPECT_FALSE(GlobMatch("foo**", "foo/bar"));
  EXPECT_TRUE(GlobMatch("x/**.c/y", "x/a.c/y"));
  EXPECT_FALSE(GlobMatch("x/**.c/y", "x/a/b.c/y"));
  // A whole segment of three asterisks is `**`, as in git.
  EXPECT_TRUE(GlobMatch("a/***/b", "a/x/y/b"));
}

// The matcher retries only from the latest star: globs built to make naive backtracking
// exponential still finish at once.
TEST(GlobMatch, PathologicalGlobsFinish) {
  const std::string as(200, 'a');
  EXPECT_FALSE(GlobMatch("*a*a*a*a*a*a*a*a*a*a*a*a*b", as));
  EXPECT_TRUE(GlobMatch("*a*a*a*a*a*a*a*a*a*a*a*a*", as));
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "a/";
  deep += "a";
  EXPECT_FALSE(GlobMatch("**/a/**/a/**/a/**/a/**/a/**/a/**/b", deep));
  EXPECT_TRUE(GlobMatch("**/a/**/a/**/a/**/a/**/a/**/a/**/a", deep));
}

// ---- IgnoreRules: syntax -------------------------------------------------------------------

TEST(IgnoreRules, NoRulesIgnoreNothing) {
  IgnoreRules rules;
  EXPECT_TRUE(rules.empty());
  const IgnoreRules::Verdict verdict = rules.Match("a/b.log", false);
  EXPECT_FALSE(verdict.ignored);
  EXPECT_EQ(verdict.rule, "");
}

TEST(IgnoreRules, BlankLinesAndCommentsAreSkipped) {
  const IgnoreRules rules = RootRules("\n# a comment\n   \n#*.log\n\n*.tmp\n");
  EXPECT_FALSE(rules.empty());
  EXPECT_FALSE(IgnoredFile(rules, "# a comment"));
  EXPECT_FALSE(IgnoredFile(rules, "x.log"));  // commented out
  EXPECT_FALSE(IgnoredFile(rules, "#x.log"));
  const IgnoreRules::Verdict verdict = rules.Match("x.tmp", false);
  EXPECT_TRUE(verdict.ignored);
  EXPECT_EQ(verdict.rule, ".gitignore:6: *.tmp");
}

TEST(IgnoreRules, OnlyCommentsAndBlanksAddNothing) {
  const IgnoreRules rules = RootRules("# nothing here\n\n   \n");
  EXPECT_TRUE(rules.empty());
}

TEST(IgnoreRules, BackslashEscapesALeadingHashOrBang) {
  const IgnoreRules rules = RootRules(R"(\#file
\!important
)");
  EXPECT_TRUE(IgnoredFile(rules, "#file"));
  EXPECT_TRUE(IgnoredFile(rules, "sub/#file"));
  EXPECT_TRUE(IgnoredFile(rules, "!important"));
  EXPECT_FALSE(IgnoredFile(rules, "file"));
  EXPECT_FALSE(IgnoredFile(rules, "important"));
  EXPECT_EQ(rules.Match("!important", false).rule, R"(.gitignore:2: \!important)");
}

TEST(IgnoreRules, TrailingSpacesAreTrimmedUnlessEscaped) {
  const IgnoreRules rules = RootRules("foo   \nbar\\ \nbaz\\  \n");
  EXPECT_TRUE(IgnoredFile(rules, "foo"));
  EXPECT_FALSE(IgnoredFile(rules, "foo "));
  EXPECT_TRUE(IgnoredFile(rules, "bar "));  // the escaped space stays
  EXPECT_FALSE(IgnoredFile(rules, "bar"));
  EXPECT_TRUE(IgnoredFile(rules, "baz "));  // one escaped space, one trimmed
  EXPECT_FALSE(IgnoredFile(rules, "baz  "));
  EXPECT_EQ(rules.Match("foo", false).rule, ".gitignore:1: foo");
  EXPECT_EQ(rules.Match("bar ", false).rule, ".gitignore:2: bar\\ ");
}

TEST(IgnoreRules, LeadingSpacesArePartOfThePattern) {
  const IgnoreRules rules = RootRules("  a\n");
  EXPECT_TRUE(IgnoredFile(rules, "  a"));
  EXPECT_FALSE(IgnoredFile(rules, "a"));
}

TEST(IgnoreRules, CrlfLineEndingsAreTolerated) {
  const IgnoreRules rules = RootRules("*.log\r\n!keep.log\r\nbuild/\r\n# note\r\n\r\nlast\r");
  EXPECT_TRUE(IgnoredFile(rules, "a.log"));
  EXPECT_FALSE(IgnoredFile(rules, "keep.log"));
  EXPECT_TRUE(IgnoredDir(rules, "build"));
  EXPECT_FALSE(IgnoredFile(rules, "build"));
  EXPECT_TRUE(IgnoredFile(rules, "last"));
  EXPECT_EQ(rules.Match("keep.log", false).rule, ".gitignore:2: !keep.log");
  EXPECT_EQ(rules.Match("build", true).rule, ".gitignore:3: build/");
  EXPECT_EQ(rules.Match("last", false).rule, ".gitignore:6: last");
}

TEST(IgnoreRules, AUtf8ByteOrderMarkIsSkipped) {
  const IgnoreRules rules = RootRules("\xEF\xBB\xBF*.log\n");
  EXPECT_TRUE(IgnoredFile(rules, "a.log"));
  EXPECT_EQ(rules.Match("a.log", false).rule, ".gitignore:1: *.log");
}

TEST(IgnoreRules, ALastLineWithoutNewlineCounts) {
  const IgnoreRules rules = RootRules("a\nb");
  EXPECT_TRUE(IgnoredFile(rules, "b"));
  EXPECT_EQ(rules.Match("b", false).rule, ".gitignore:2: b");
}

TEST(IgnoreRules, PatternsWithNothingToMatchAreSkipped) {
  const IgnoreRules rules = RootRules("!\n/\n!/\n");
  EXPECT_TRUE(rules.empty());
}

// ---- IgnoreRules: negation and order -------------------------------------------------------

TEST(IgnoreRules, LeadingBangNegates) {
  const IgnoreRules rules = RootRules("*.log\n!keep.log\n");
  EXPECT_TRUE(IgnoredFile(rules, "a.log"));
  const IgnoreRules::Verdict verdict = rules.Match("keep.log", false);
  EXPECT_FALSE(verdict.ignored);
  EXPECT_EQ(verdict.rule, ".gitignore:2: !keep.log");  // a negated match still names its rule
}

TEST(IgnoreRules, TheLastMatchingPatternWins) {
  const IgnoreRules rules = RootRules("!keep.log\n*.log\n");
  const IgnoreRules::Verdict verdict = rules.Match("keep.log", false);
  EXPECT_TRUE(verdict.ignored);
  EXPECT_EQ(verdict.rule, ".gitignore:2: *.log");

  const IgnoreRules again = RootRules("*.log\n!*.log\n*.log\n");
  EXPECT_EQ(again.Match("x.log", false).rule, ".gitignore:3: *.log");
  EXPECT_TRUE(again.Match("x.log", false).ignored);
}

TEST(IgnoreRules, NonMatchingPathsHaveNoRule) {
  const IgnoreRules rules = RootRules("*.log\n");
  const IgnoreRules::Verdict verdict = rules.Match("a.txt", false);
  EXPECT_FALSE(verdict.ignored);
  EXPECT_EQ(verdict.rule, "");
}

// ---- IgnoreRules: directories only ---------------------------------------------------------

TEST(IgnoreRules, TrailingSlashMatchesDirectoriesOnly) {
  const IgnoreRules rules = RootRules("logs/\n");
  EXPECT_TRUE(IgnoredDir(rules, "logs"));
  EXPECT_FALSE(IgnoredFile(rules, "logs"));
  EXPECT_TRUE(IgnoredDir(rules, "a/b/logs"));  // no other slash: at any depth
  EXPECT_FALSE(IgnoredFile(rules, "a/b/logs"));
  EXPECT_EQ(rules.Match("logs", true).rule, ".gitignore:1: logs/");
}

TEST(IgnoreRules, PatternsWithoutTrailingSlashMatchFilesAndDirectories) {
  const IgnoreRules rules = RootRules("cache\n");
  EXPECT_TRUE(IgnoredDir(rules, "cache"));
  EXPECT_TRUE(IgnoredFile(rules, "cache"));
}

TEST(IgnoreRules, NegatedDirectoryPattern) {
  const IgnoreRules rules = RootRules("out*\n!output/\n");
  EXPECT_FALSE(IgnoredDir(rules, "output"));
  EXPECT_TRUE(IgnoredFile(rules, "output"));  // the negation is for directories only
  EXPECT_TRUE(IgnoredDir(rules, "outdir"));
}

// ---- IgnoreRules: anchoring ----------------------------------------------------------------

TEST(IgnoreRules, LeadingSlashAnchorsToTheFilesDirectory) {
  const IgnoreRules rules = RootRules("/build\n");
  EXPECT_TRUE(IgnoredDir(rules, "build"));
  EXPECT_TRUE(IgnoredFile(rules, "build"));
  EXPECT_FALSE(IgnoredDir(rules, "src/build"));
  EXPECT_EQ(rules.Match("build", true).rule, ".gitignore:1: /build");
}

TEST(IgnoreRules, NoSlashMatchesTheNameAtAnyDepth) {
  const IgnoreRules rules = RootRules("build\n*.o\n");
  EXPECT_TRUE(IgnoredDir(rules, "build"));
  EXPECT_TRUE(IgnoredDir(rules, "src/build"));
  EXPECT_TRUE(IgnoredDir(rules, "a/b/c/build"));
  EXPECT_FALSE(IgnoredDir(rules, "src/builder"));
  EXPECT_TRUE(IgnoredFile(rules, "a/b/c.o"));
  EXPECT_TRUE(IgnoredFile(rules, "c.o"));
}

TEST(IgnoreRules, MiddleSlashAnchorsToTheFilesDirectory) {
  const IgnoreRules rules = RootRules("doc/build\n");
  EXPECT_TRUE(IgnoredDir(rules, "doc/build"));
  EXPECT_FALSE(IgnoredDir(rules, "src/doc/build"));
  EXPECT_FALSE(IgnoredDir(rules, "build"));
}

TEST(IgnoreRules, AnchoredStarsDoNotCrossDirectories) {
  const IgnoreRules rules = RootRules("src/*.c\n");
  EXPECT_TRUE(IgnoredFile(rules, "src/main.c"));
  EXPECT_FALSE(IgnoredFile(rules, "src/x/main.c"));
  EXPECT_FALSE(IgnoredFile(rules, "main.c"));
}

TEST(IgnoreRules, DoubleStarPatterns) {
  const IgnoreRules rules = RootRules("**/foo\nbar/**\na/**/b\n");
  EXPECT_TRUE(IgnoredDir(rules, "foo"));
  EXPECT_TRUE(IgnoredFile(rules, "x/y/foo"));
  EXPECT_TRUE(IgnoredFile(rules, "bar/x"));
  EXPECT_TRUE(IgnoredFile(rules, "bar/x/y"));
  EXPECT_FALSE(IgnoredDir(rules, "bar"));
  EXPECT_FALSE(IgnoredFile(rules, "q/bar/x"));
  EXPECT_TRUE(IgnoredFile(rules, "a/b"));
  EXPECT_TRUE(IgnoredFile(rules, "a/x/b"));
  EXPECT_TRUE(IgnoredFile(rules, "a/x/y/b"));
  EXPECT_FALSE(IgnoredFile(rules, "z/a/b"));
  EXPECT_EQ(rules.Match("a/x/y/b", false).rule, ".gitignore:3: a/**/b");
}

TEST(IgnoreRules, CharacterClassesInPatterns) {
  const IgnoreRules rules = RootRules("*.[oa]\n[!d]*.txt\nv[0-9]/\n");
  EXPECT_TRUE(IgnoredFile(rules, "lib.a"));
  EXPECT_TRUE(IgnoredFile(rules, "x/lib.o"));
  EXPECT_FALSE(IgnoredFile(rules, "lib.so"));
  EXPECT_TRUE(IgnoredFile(rules, "notes.txt"));
  EXPECT_FALSE(IgnoredFile(rules, "draft.txt"));
  EXPECT_TRUE(IgnoredDir(rules, "v1"));
  EXPECT_FALSE(IgnoredDir(rules, "vx"));
}

TEST(IgnoreRules, EscapedGlobCharactersAreLiteral) {
  const IgnoreRules rules = RootRules(R"(\*.txt
what\?
)");
  EXPECT_TRUE(IgnoredFile(rules, "*.txt"));
  EXPECT_FALSE(IgnoredFile(rules, "a.txt"));
  EXPECT_TRUE(IgnoredFile(rules, "what?"));
  EXPECT_FALSE(IgnoredFile(rules, "whatx"));
}

// ---- IgnoreRules: nested ignore files ------------------------------------------------------

TEST(IgnoreRules, ANestedFileOverridesItsParent) {
  IgnoreRules rules;
  rules.AddFile("", "*.log\n", ".gitignore");
  rules.AddFile("sub", "# keep this one\n!keep.log\n", "sub/.gitignore");
  const IgnoreRules::Verdict kept = rules.Match("sub/keep.log", false);
  EXPECT_FALSE(kept.ignored);
  EXPECT_EQ(kept.rule, "sub/.gitignore:2: !keep.log");
  const IgnoreRules::Verdict deep = rules.Match("sub/deeper/keep.log", false);
  EXPECT_FALSE(deep.ignored);
  EXPECT_EQ(deep.rule, "sub/.gitignore:2: !keep.log");
  // Outside sub the root's rule still decides.
  EXPECT_TRUE(IgnoredFile(rules, "keep.log"));
  EXPECT_EQ(rules.Match("keep.log", false).rule, ".gitignore:1: *.log");
  EXPECT_TRUE(IgnoredFile(rules, "other/keep.log"));
  EXPECT_TRUE(IgnoredFile(rules, "sub/other.log"));
}

TEST(IgnoreRules, APatternOfASubdirectoryNeverAppliesOutsideIt) {
  IgnoreRules rules;
  rules.AddFile("sub", "*.tmp\nsub\nx/\n", "sub/.gitignore");
  EXPECT_TRUE(IgnoredFile(rules, "sub/a.tmp"));
  EXPECT_TRUE(IgnoredFile(rules, "sub/deep/a.tmp"));
  EXPECT_FALSE(IgnoredFile(rules, "a.tmp"));
  EXPECT_FALSE(IgnoredFile(rules, "other/a.tmp"));
  EXPECT_FALSE(IgnoredFile(rules, "subway/a.tmp"));  // a sibling sharing the prefix
  EXPECT_FALSE(IgnoredDir(rules, "sub"));            // nor to the directory itself
  EXPECT_TRUE(IgnoredDir(rules, "sub/sub"));
  EXPECT_FALSE(IgnoredDir(rules, "x"));
  EXPECT_TRUE(IgnoredDir(rules, "sub/x"));
}

TEST(IgnoreRules, AnchoredPatternsOfASubdirectoryAreRelativeToIt) {
  IgnoreRules rules;
  rules.AddFile("a/b", "/only\ndoc/build\n**/gen\n", "a/b/.gitignore");
  EXPECT_TRUE(IgnoredFile(rules, "a/b/only"));
  EXPECT_FALSE(IgnoredFile(rules, "a/b/x/only"));
  EXPECT_FALSE(IgnoredFile(rules, "only"));
  EXPECT_FALSE(IgnoredFile(rules, "a/only"));
  EXPECT_TRUE(IgnoredDir(rules, "a/b/doc/build"));
  EXPECT_FALSE(IgnoredDir(rules, "doc/build"));
  EXPECT_FALSE(IgnoredDir(rules, "a/b/x/doc/build"));
  EXPECT_TRUE(IgnoredDir(rules, "a/b/gen"));
  EXPECT_TRUE(IgnoredDir(rules, "a/b/x/y/gen"));
  EXPECT_FALSE(IgnoredDir(rules, "a/gen"));
  EXPECT_EQ(rules.Match("a/b/only", false).rule, "a/b/.gitignore:1: /only");
}

TEST(IgnoreRules, ADeeperFileComesAfterItsParentButSiblingsDoNotInteract) {
  IgnoreRules rules;
  rules.AddFile("", "!*.dat\n", ".gitignore");
  rules.AddFile("one", "*.dat\n", "one/.gitignore");
  rules.AddFile("two", "!x.dat\n", "two/.gitignore");
  EXPECT_TRUE(IgnoredFile(rules, "one/x.dat"));
  const IgnoreRules::Verdict two = rules.Match("two/x.dat", false);
  EXPECT_FALSE(two.ignored);
  EXPECT_EQ(two.rule, "two/.gitignore:1: !x.dat");
  EXPECT_EQ(rules.Match("x.dat", false).rule, ".gitignore:1: !*.dat");
}

TEST(IgnoreRules, TheSourceNamesAnyIgnoreFile) {
  IgnoreRules rules;
  rules.AddFile("", "\n\n*.ckpt\n", ".git/info/exclude");
  EXPECT_EQ(rules.Match("m/a.ckpt", false).rule, ".git/info/exclude:3: *.ckpt");
}

// ---- IgnoreRules: a tree's worth of paths --------------------------------------------------

// 200,000 paths against ~50 patterns, as the walker asks for a large workdir: it runs, and the
// verdicts add up to what the patterns say.
TEST(IgnoreRules, MatchesATreeOfTwoHundredThousandFiles) {
  IgnoreRules rules;
  std::string root;
  for (int i = 0; i < 40; ++i) root += "*.ext" + std::to_string(i) + "\n";  // match nothing below
  root += "/build/\n**/node_modules\ndocs/**/*.pdf\n*.[oa]\n*.log\n[Tt]emp*\n";
  rules.AddFile("", root, ".gitignore");
  rules.AddFile("d3", "!keep*.log\n/local/**\n", "d3/.gitignore");

  const char* const kExtensions[] = {"c", "h", "o", "log", "txt"};
  int ignored = 0;
  int expected = 0;
  for (int i = 0; i < 200'000; ++i) {
    const int dir = i % 10;
    const std::string ext = kExtensions[i % 5];
    const bool keep = (i / 5) % 2 == 0;
    const std::string path = "d" + std::to_string(dir) + "/s" + std::to_string(i % 13) + "/" +
                             (keep ? "keep" : "file") + std::to_string(i) + "." + ext;
    if (rules.Match(path, false).ignored) ++ignored;
    if (ext == "o") ++expected;
    if (ext == "log" && !(dir == 3 && keep)) ++expected;
  }
  EXPECT_EQ(ignored, expected);
  EXPECT_GT(expected, 0);
}

}  // namespace
}  // namespace berth::upload
