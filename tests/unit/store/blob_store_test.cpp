// The blob stores (store/blob_store.h), files and PostgreSQL, held to one contract: digests
// checked, owners kept apart, pieces resumed.
#include "store/blob_store.h"

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "fakes/fake_clock.h"
#include "fakes/temp_dir.h"
#include "store/pg_store.h"
#include "support/pg_test_server.h"
#include "upload/digest.h"

namespace berth {
namespace {

using berth::testing::FakeClock;
using berth::testing::PgTestDatabase;
using berth::testing::TempDir;

class BlobStoreTest : public ::testing::TestWithParam<bool> {
 protected:
  bool pg() const { return GetParam(); }
  void SetUp() override {
    if (pg()) {
      auto db = PgTestDatabase::Create();
      ASSERT_TRUE(db.ok()) << db.status().message();
      pg_db_ = std::move(*db);
      auto schema = OpenPgStore(pg_db_->uri());  // migrates the schema
      ASSERT_TRUE(schema.ok()) << schema.status().message();
    }
    Open();
  }
  void Open() {
    auto opened =
        pg() ? OpenPgBlobStore(pg_db_->uri(), clock_) : OpenFileBlobStore(dir_.path(), clock_);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    store_ = std::move(*opened);
  }
  TempDir dir_;
  std::unique_ptr<PgTestDatabase> pg_db_;
  FakeClock clock_;
  std::unique_ptr<BlobStore> store_;
};

TEST_P(BlobStoreTest, AnOwnerSeesOnlyWhatTheyUploaded) {
  const std::string data = "hello\n";
  const std::string digest = Sha256Hex(data);
  EXPECT_EQ(*store_->Missing("alice", {digest}), std::vector<std::string>{digest});
  ASSERT_TRUE(store_->Put("alice", digest, data).ok());
  EXPECT_TRUE(store_->Missing("alice", {digest})->empty());
  // Bob must send the bytes himself; knowing the digest is not enough.
  EXPECT_EQ(*store_->Missing("bob", {digest}), std::vector<std::string>{digest});
  ASSERT_TRUE(store_->Put("bob", digest, data).ok());
  EXPECT_TRUE(store_->Missing("bob", {digest})->empty());
  EXPECT_EQ(*store_->Size(digest), 6);
  EXPECT_EQ(*store_->Read(digest, 2, 100), "llo\n");
}

TEST_P(BlobStoreTest, AMismatchIsAConflictAndKeepsNothing) {
  const std::string digest = Sha256Hex("one");
  Status st = store_->Put("alice", digest, "two");
  EXPECT_EQ(st.code(), Code::kConflict);
  EXPECT_NE(st.message().find(Sha256Hex("two")), std::string::npos);
  EXPECT_EQ(store_->Size(digest).status().code(), Code::kNotFound);
  EXPECT_FALSE(store_->Missing("alice", {digest})->empty());
}

TEST_P(BlobStoreTest, PiecesResumeWhereTheyStopped) {
  const std::string data(3000, 'x');
  const std::string digest = Sha256Hex(data);
  EXPECT_EQ(*store_->Append("alice", digest, 0, data.substr(0, 1000), false), 1000);
  // A retry from the wrong place is told where to go on.
  auto wrong = store_->Append("alice", digest, 0, data.substr(0, 1000), false);
  EXPECT_EQ(wrong.status().code(), Code::kConflict);
  EXPECT_EQ(*store_->Received("alice", digest), 1000);
  EXPECT_EQ(*store_->Received("bob", digest), 0);  // pieces are per owner
  EXPECT_EQ(*store_->Append("alice", digest, 1000, data.substr(1000), true), 3000);
  EXPECT_TRUE(store_->Missing("alice", {digest})->empty());
  EXPECT_EQ(*store_->Read(digest, 0, 5000), data);
  // A whole blob sent in pieces that do not add up is refused.
  const std::string other = Sha256Hex("abc");
  EXPECT_EQ(store_->Append("alice", other, 0, "abd", true).status().code(), Code::kConflict);
  EXPECT_EQ(*store_->Received("alice", other), 0);
}

TEST_P(BlobStoreTest, OwnersSurviveAReopen) {
  const std::string digest = Sha256Hex("kept");
  ASSERT_TRUE(store_->Put("alice", digest, "kept").ok());
  store_.reset();
  Open();
  EXPECT_TRUE(store_->Missing("alice", {digest})->empty());
  EXPECT_EQ(*store_->Read(digest, 0, 100), "kept");
}

TEST_P(BlobStoreTest, BigBlobsReadAcrossChunks) {
  std::string data;
  for (int i = 0; i < 300'000; ++i) data += static_cast<char>(i * 7 % 251);  // 3 MiB-ish: chunks
  data += data + data + data + data + data + data + data + data + data;
  const std::string digest = Sha256Hex(data);
  ASSERT_TRUE(store_->Put("alice", digest, data).ok());
  EXPECT_EQ(*store_->Size(digest), static_cast<int64_t>(data.size()));
  EXPECT_EQ(*store_->Read(digest, 1'000'000, 2'500'000), data.substr(1'000'000, 2'500'000));
  EXPECT_EQ(*store_->Read(digest, 0, data.size() + 10), data);
  const std::string empty = Sha256Hex("");
  ASSERT_TRUE(store_->Put("alice", empty, "").ok());
  EXPECT_EQ(*store_->Size(empty), 0);
  EXPECT_EQ(*store_->Read(empty, 0, 10), "");
}

// What a user keeps (their blobs and the pieces they are sending) is what the upload quota counts;
// a blob's size is what the manifest check compares with.
TEST_P(BlobStoreTest, AnOwnersBytesCountTheirBlobsAndTheirPieces) {
  const std::string a(1000, 'a');
  const std::string b(300, 'b');
  ASSERT_TRUE(store_->Put("alice", Sha256Hex(a), a).ok());
  ASSERT_TRUE(store_->Put("bob", Sha256Hex(a), a).ok());  // stored once, bob's too
  ASSERT_TRUE(store_->Append("alice", Sha256Hex(b + b), 0, b, false).ok());
  EXPECT_EQ(*store_->UsedBy("alice"), 1300);
  EXPECT_EQ(*store_->UsedBy("bob"), 1000);
  EXPECT_EQ(*store_->UsedBy("carol"), 0);
  EXPECT_EQ(*store_->Sizes({Sha256Hex(a), Sha256Hex("none")}), (std::vector<int64_t>{1000, -1}));
}

// Pieces of an upload nobody goes on with expire after their own (short) retention, whatever the
// blobs' retention; finished blobs stay.
TEST_P(BlobStoreTest, UnfinishedPiecesExpireOnTheirOwn) {
  const std::string kept = "kept";
  ASSERT_TRUE(store_->Put("alice", Sha256Hex(kept), kept).ok());
  const std::string big(2000, 'p');
  ASSERT_TRUE(store_->Append("alice", Sha256Hex(big), 0, big.substr(0, 500), false).ok());
  auto live = [](const std::string&) { return false; };
  constexpr DurationMs kHour = 3'600'000;
  ASSERT_TRUE(store_->Collect(live, clock_.Now() - 7 * 24 * kHour, clock_.Now() - 6 * kHour).ok());
  EXPECT_EQ(*store_->Received("alice", Sha256Hex(big)), 500) << "not old yet";
  clock_.StepWall(7 * kHour);
  ASSERT_TRUE(store_->Collect(live, clock_.Now() - 7 * 24 * kHour, clock_.Now() - 6 * kHour).ok());
  EXPECT_EQ(*store_->Received("alice", Sha256Hex(big)), 0);
  EXPECT_TRUE(store_->Missing("alice", {Sha256Hex(kept)})->empty());
  EXPECT_EQ(*store_->UsedBy("alice"), 4);
}

INSTANTIATE_TEST_SUITE_P(Backends, BlobStoreTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Postgres" : "Files"; });

}  // namespace
}  // namespace berth
