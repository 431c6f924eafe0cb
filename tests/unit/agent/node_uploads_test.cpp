// A node's upload cache and the copies built from it (agent/node_uploads.h), against a fake
// server connection.
#include "agent/node_uploads.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "common/files.h"
#include "common/sha256.h"
#include "fakes/fake_connection.h"
#include "fakes/temp_dir.h"
#include "upload/digest.h"

namespace berth {
namespace {

using berth::testing::FakeConnection;
using berth::testing::TempDir;

class NodeUploadsTest : public ::testing::Test {
 protected:
  // A manifest of `files` (path -> text) added to the fake server; answers its digest.
  std::string Publish(const std::map<std::string, std::string>& files) {
    upload::Manifest m;
    for (const auto& [path, text] : files) {
      std::string digest = Sha256Hex(text);
      conn_.AddBlob(digest, text);
      m.entries.push_back({.kind = upload::ManifestEntry::Kind::kFile,
                           .path = path,
                           .mode = 0640,
                           .size = static_cast<int64_t>(text.size()),
                           .digest = digest});
    }
    std::string text = upload::SerializeManifest(m);
    std::string digest = Sha256Hex(text);
    conn_.AddBlob(digest, text);
    return digest;
  }
  TempDir dir_;
  FakeConnection conn_;
  BlobFetch base_{.node = "n", .session = "s", .job = 1, .want = {}};
};

TEST_F(NodeUploadsTest, BuildsTheTreeAndFetchesEachBlobOnce) {
  NodeUploads uploads(dir_.File("cache"), 1 << 20);
  std::string manifest = Publish({{"a.py", "print(1)\n"}, {"sub/b.txt", "bee\n"}});
  auto built = uploads.Build(conn_, base_, manifest, dir_.File("w1"), std::nullopt, {});
  ASSERT_TRUE(built.ok()) << built.status().message();
  EXPECT_EQ(built->files, 2);
  EXPECT_GT(built->fetched_bytes, 13);
  EXPECT_EQ(ReadFile(dir_.File("w1/sub/b.txt")), "bee\n");
  struct stat st;
  ASSERT_EQ(::stat(dir_.File("w1/a.py").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(st.st_nlink, 1u);  // a copy, never a link to the cache
  // The same manifest again: nothing fetched.
  int fetches = conn_.blob_fetches();
  built = uploads.Build(conn_, base_, manifest, dir_.File("w2"), std::nullopt, {});
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->fetched_bytes, 0);
  EXPECT_EQ(conn_.blob_fetches(), fetches);  // the manifest is cached too
  // Writing into one copy changes neither the cache nor the other copy.
  WriteFileInPlace(dir_.File("w1/a.py"), "changed\n");
  built = uploads.Build(conn_, base_, manifest, dir_.File("w3"), std::nullopt, {});
  EXPECT_EQ(ReadFile(dir_.File("w3/a.py")), "print(1)\n");
  EXPECT_EQ(ReadFile(dir_.File("w2/a.py")), "print(1)\n");
}

TEST_F(NodeUploadsTest, ACorruptBlobFailsTheBuild) {
  NodeUploads uploads(dir_.File("cache"), 1 << 20);
  std::string manifest = Publish({{"a", "good\n"}});
  conn_.AddBlob(Sha256Hex("good\n"), "evil\n");
  auto built = uploads.Build(conn_, base_, manifest, dir_.File("w"), std::nullopt, {});
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("corrupted"), std::string::npos);
}

TEST_F(NodeUploadsTest, TheCacheKeepsUnderItsLimit) {
  NodeUploads uploads(dir_.File("cache"), 2000);
  std::string first = Publish({{"a", std::string(1500, 'a')}});
  std::string second = Publish({{"b", std::string(1500, 'b')}});
  ASSERT_TRUE(uploads.Build(conn_, base_, first, dir_.File("w1"), std::nullopt, {}).ok());
  ASSERT_TRUE(uploads.Build(conn_, base_, second, dir_.File("w2"), std::nullopt, {}).ok());
  EXPECT_LE(uploads.cached_bytes(), 2000);
  EXPECT_EQ(ReadFile(dir_.File("w2/b")), std::string(1500, 'b'));
}

// A manifest whose entry claims more bytes than the blob has: the server has no more to send, and
// the fetch asked for the rest for ever (~3,600 requests a second), the node's launches stuck
// behind it. A round that brings nothing now fails the build, naming the blob.
TEST_F(NodeUploadsTest, ABlobThatEndsBeforeItsManifestsSizeFailsTheBuild) {
  NodeUploads uploads(dir_.File("cache"), 1 << 20);
  const std::string text = "short\n";
  upload::Manifest m;
  m.entries.push_back({.kind = upload::ManifestEntry::Kind::kFile,
                       .path = "a",
                       .mode = 0640,
                       .size = 1 << 20,
                       .digest = Sha256Hex(text)});
  conn_.AddBlob(Sha256Hex(text), text);
  const std::string manifest_text = upload::SerializeManifest(m);
  const std::string manifest = Sha256Hex(manifest_text);
  conn_.AddBlob(manifest, manifest_text);
  auto built = uploads.Build(conn_, base_, manifest, dir_.File("w"), std::nullopt, {});
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("ends after 6 bytes, but its manifest says 1048576"),
            std::string::npos)
      << built.status().message();
  EXPECT_LE(conn_.blob_fetches(), 4);
}

// A cancel (or the agent's stop) ends a fetch at its next round.
TEST_F(NodeUploadsTest, ACancelledBuildStopsFetching) {
  NodeUploads uploads(dir_.File("cache"), 1 << 20);
  std::string manifest = Publish({{"a", "x\n"}});
  auto built =
      uploads.Build(conn_, base_, manifest, dir_.File("w"), std::nullopt, [] { return true; });
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("stopped"), std::string::npos);
  EXPECT_EQ(conn_.blob_fetches(), 0);
}

}  // namespace
}  // namespace berth
