// The single-server blob store (store/blob_store.h): digests checked, owners kept apart, pieces
// resumed.
#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "fakes/temp_dir.h"
#include "store/blob_store.h"
#include "upload/digest.h"

namespace berth {
namespace {

using berth::testing::FakeClock;
using berth::testing::TempDir;

class FileBlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = OpenFileBlobStore(dir_.path(), clock_);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    store_ = std::move(*opened);
  }
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<BlobStore> store_;
};

TEST_F(FileBlobStoreTest, AnOwnerSeesOnlyWhatTheyUploaded) {
  const std::string data = "hello\n";
  const std::string digest = upload::Sha256Hex(data);
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

TEST_F(FileBlobStoreTest, AMismatchIsAConflictAndKeepsNothing) {
  const std::string digest = upload::Sha256Hex("one");
  Status st = store_->Put("alice", digest, "two");
  EXPECT_EQ(st.code(), Code::kConflict);
  EXPECT_NE(st.message().find(upload::Sha256Hex("two")), std::string::npos);
  EXPECT_EQ(store_->Size(digest).status().code(), Code::kNotFound);
  EXPECT_FALSE(store_->Missing("alice", {digest})->empty());
}

TEST_F(FileBlobStoreTest, PiecesResumeWhereTheyStopped) {
  const std::string data(3000, 'x');
  const std::string digest = upload::Sha256Hex(data);
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
  const std::string other = upload::Sha256Hex("abc");
  EXPECT_EQ(store_->Append("alice", other, 0, "abd", true).status().code(), Code::kConflict);
  EXPECT_EQ(*store_->Received("alice", other), 0);
}

TEST_F(FileBlobStoreTest, OwnersSurviveAReopen) {
  const std::string digest = upload::Sha256Hex("kept");
  ASSERT_TRUE(store_->Put("alice", digest, "kept").ok());
  store_.reset();
  auto reopened = OpenFileBlobStore(dir_.path(), clock_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE((*reopened)->Missing("alice", {digest})->empty());
}

}  // namespace
}  // namespace berth
