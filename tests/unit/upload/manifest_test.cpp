// Manifests (upload/manifest.h), blob frames (upload/blob_frames.h) and the tree walk's stat
// cache (upload/tree_walk.h).
#include "upload/manifest.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "fakes/temp_dir.h"
#include "upload/blob_frames.h"
#include "upload/digest.h"
#include "upload/tree_walk.h"

namespace berth::upload {
namespace {

using berth::testing::TempDir;

const std::string kDigest = Sha256Hex("hello\n");

Manifest Sample() {
  Manifest m;
  m.entries.push_back({.kind = ManifestEntry::Kind::kFile,
                       .path = "b/x.py",
                       .mode = 0755,
                       .size = 6,
                       .digest = kDigest});
  m.entries.push_back({.kind = ManifestEntry::Kind::kDir, .path = "b", .mode = 0750});
  m.entries.push_back({.kind = ManifestEntry::Kind::kSymlink, .path = "a", .target = "b/x.py"});
  return m;
}

TEST(ManifestTest, CanonicalTextRoundTripsSorted) {
  std::string text = SerializeManifest(Sample());
  auto parsed = ParseManifest(text, ManifestLimits{});
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->entries.size(), 3u);
  EXPECT_EQ(parsed->entries[0].path, "a");
  EXPECT_EQ(parsed->entries[1].path, "b");
  EXPECT_EQ(parsed->entries[2].path, "b/x.py");
  EXPECT_EQ(parsed->entries[2].mode, 0755u);
  EXPECT_EQ(SerializeManifest(*parsed), text);  // the same tree, the same digest
  EXPECT_EQ(parsed->Files(), 1);
  EXPECT_EQ(parsed->TotalBytes(), 6);
}

TEST(ManifestTest, RefusesWhatIsUnsafeToRebuildAsRoot) {
  auto refused = [](const std::string& entries) {
    auto r = ParseManifest(R"({"version":1,"entries":)" + entries + "}", ManifestLimits{});
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  const std::string d = kDigest;
  EXPECT_NE(refused(R"([["f","../x",420,6,")" + d + R"("]])").find("not a plain relative path"),
            std::string::npos);
  EXPECT_NE(refused(R"([["f","/etc/passwd",420,6,")" + d + R"("]])").find("plain relative"),
            std::string::npos);
  EXPECT_NE(refused(R"([["f","a/./b",420,6,")" + d + R"("]])").find("plain relative"),
            std::string::npos);
  // Below a symlink or a file: a rebuild would write through it.
  EXPECT_NE(refused(R"([["l","a","/etc"],["f","a/passwd",420,6,")" + d + R"("]])")
                .find("not a directory"),
            std::string::npos);
  EXPECT_NE(refused(R"([["f","a",420,6,")" + d + R"("],["f","a/b",420,6,")" + d + R"("]])")
                .find("not a directory"),
            std::string::npos);
  // Repeated or unsorted.
  EXPECT_NE(refused(R"([["d","a",493],["d","a",493]])").find("out of order or repeated"),
            std::string::npos);
  // setuid bits, bad digests, wrong shapes.
  EXPECT_NE(refused(R"([["f","a",2541,6,")" + d + R"("]])").find("permission bits"),
            std::string::npos);
  EXPECT_NE(refused(R"([["f","a",420,6,"abc"]])").find("digest"), std::string::npos);
  EXPECT_NE(refused(R"([["x","a"]])").find("expected"), std::string::npos);
}

TEST(ManifestTest, LimitsNameTheBiggestDirectories) {
  Manifest m;
  m.entries.push_back({.kind = ManifestEntry::Kind::kFile,
                       .path = "data/a/big",
                       .size = 3LL << 30,
                       .digest = kDigest});
  m.entries.push_back({.kind = ManifestEntry::Kind::kFile,
                       .path = ".git/pack",
                       .size = 100 << 20,
                       .digest = kDigest});
  ManifestLimits limits{
      .max_total_bytes = 2LL << 30, .max_entries = 10, .max_file_bytes = 8LL << 30};
  Status st = CheckManifestLimits(m, limits, "the workdir");
  EXPECT_EQ(st.code(), Code::kTooLarge);
  EXPECT_EQ(st.message(),
            "the workdir holds 3.1 GiB, over the limit of 2.0 GiB; the biggest directories: data/ "
            "(3.0 GiB), data/a/ (3.0 GiB), .git/ (100 MiB)");
  limits.max_file_bytes = 512 << 20;
  EXPECT_EQ(CheckManifestLimits(m, limits, "the workdir").message(),
            "the workdir: data/a/big is 3.0 GiB, over the limit of 512 MiB per file");
  limits = ManifestLimits{.max_entries = 1};
  EXPECT_NE(CheckManifestLimits(m, limits, "the workdir").message().find("over the limit of 1"),
            std::string::npos);
}

TEST(BlobFramesTest, RoundTripAndMalformed) {
  std::string body;
  AppendFrame(body, kDigest, 0, "hello\n");
  AppendFrame(body, kDigest, 3, "");
  auto frames = ParseFrames(body);
  ASSERT_TRUE(frames.ok());
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_EQ((*frames)[0].data, "hello\n");
  EXPECT_EQ((*frames)[1].offset, 3);
  EXPECT_FALSE(ParseFrames(kDigest + " 0 99\nshort").ok());
  EXPECT_FALSE(ParseFrames("nodigest 0 1\nx").ok());
  EXPECT_FALSE(ParseFrames(kDigest + " -1 1\nx").ok());
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TreeWalkTest, IgnoresWhatGitIgnoresAndSkyignoreWins) {
  TempDir dir;
  ::mkdir(dir.File("sub").c_str(), 0755);
  WriteText(dir.File(".gitignore"), "*.log\n");
  WriteText(dir.File("a.log"), "x");
  WriteText(dir.File("keep.py"), "x");
  WriteText(dir.File("sub/b.log"), "x");
  auto walk = WalkTree(dir.path(), true, 1000);
  ASSERT_TRUE(walk.ok());
  std::set<std::string> paths;
  for (const auto& e : walk->entries) paths.insert(e.path);
  EXPECT_EQ(paths, (std::set<std::string>{".gitignore", "keep.py", "sub"}));
  ASSERT_EQ(walk->left_out.size(), 2u);
  EXPECT_EQ(walk->left_out[0].why, ".gitignore:1: *.log");

  WriteText(dir.File(".skyignore"), "keep.py\n");
  walk = WalkTree(dir.path(), false, 1000);
  ASSERT_TRUE(walk.ok());
  paths.clear();
  for (const auto& e : walk->entries) paths.insert(e.path);
  EXPECT_TRUE(paths.count("a.log"));  // .gitignore no longer applies
  EXPECT_FALSE(paths.count("keep.py"));

  auto capped = WalkTree(dir.path(), false, 2);
  EXPECT_EQ(capped.status().code(), Code::kTooLarge);
}

TEST(TreeWalkTest, StatCacheSkipsUnchangedFiles) {
  TempDir dir;
  TempDir cache;
  WriteText(dir.File("a"), "hello\n");
  WriteText(dir.File("b"), "other\n");
  std::string cache_file = StatCacheFile(cache.path(), dir.path());
  auto walk = WalkTree(dir.path(), false, 1000);
  auto first = HashTree(dir.path(), *walk, cache_file);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->bytes_read, 12);
  EXPECT_EQ(first->file_of_digest.count(kDigest), 1u);
  auto again = HashTree(dir.path(), *WalkTree(dir.path(), false, 1000), cache_file);
  EXPECT_EQ(again->bytes_read, 0);
  EXPECT_EQ(again->manifest, first->manifest);
  WriteText(dir.File("b"), "changed!\n");
  auto changed = HashTree(dir.path(), *WalkTree(dir.path(), false, 1000), cache_file);
  EXPECT_EQ(changed->bytes_read, 9);
}

}  // namespace
}  // namespace berth::upload
