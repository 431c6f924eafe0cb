// The server's uploads (server/uploads.h) over the file blob store: who may use what, what a node
// may read, and what retention collects.
#include "server/uploads.h"

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "fakes/fake_clock.h"
#include "fakes/temp_dir.h"
#include "upload/blob_frames.h"
#include "upload/digest.h"

namespace berth {
namespace {

using berth::testing::FakeClock;
using berth::testing::TempDir;

constexpr DurationMs kDay = 24LL * 3'600'000;

class UploadsTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(UploadQuota{}); }
  void Open(UploadQuota quota) {
    uploads_.reset();
    auto blobs = OpenFileBlobStore(dir_.path(), clock_);
    ASSERT_TRUE(blobs.ok()) << blobs.status().message();
    uploads_ = std::make_unique<Uploads>(std::move(*blobs), upload::ManifestLimits{}, quota);
  }
  // Uploads `text` as `user`'s; answers its digest.
  std::string Send(const std::string& user, const std::string& text) {
    std::string digest = Sha256Hex(text);
    std::string body;
    upload::AppendFrame(body, digest, 0, text);
    EXPECT_TRUE(uploads_->PutFrames(user, body).ok());
    return digest;
  }
  // A manifest of one file with `text`, registered by `user`; `size` overrides the file's size.
  Result<Uploads::Registered> Register(const std::string& user, const std::string& text,
                                       std::optional<int64_t> size = std::nullopt) {
    upload::Manifest m;
    m.entries.push_back({.kind = upload::ManifestEntry::Kind::kFile,
                         .path = "f",
                         .mode = 0644,
                         .size = size.value_or(static_cast<int64_t>(text.size())),
                         .digest = Sha256Hex(text)});
    return uploads_->RegisterManifest(user, upload::SerializeManifest(m));
  }
  bool Has(const std::string& user, const std::string& digest) {
    auto missing = uploads_->Missing(user, {digest});
    return missing.ok() && missing->empty();
  }
  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Uploads> uploads_;
};

TEST_F(UploadsTest, ASpecMayNameOnlyItsUsersManifests) {
  Send("alice", "secret\n");
  auto m = Register("alice", "secret\n");
  ASSERT_TRUE(m.ok()) << m.status().message();
  JobSpec spec;
  spec.workdir_upload = m->digest;
  EXPECT_TRUE(uploads_->CheckSpec("alice", spec).ok());
  Status bob = uploads_->CheckSpec("bob", spec);
  EXPECT_EQ(bob.code(), Code::kInvalidArgument);
  EXPECT_NE(bob.message().find("not one of your uploads"), std::string::npos);
  // Nor may bob register a manifest naming alice's blob: he never sent it.
  auto stolen = Register("bob", "secret\n");
  EXPECT_EQ(stolen.status().code(), Code::kConflict);
}

TEST_F(UploadsTest, ANodeReadsOnlyWhatTheJobsManifestsHold) {
  Send("alice", "inside\n");
  std::string other = Send("alice", "outside\n");
  auto m = Register("alice", "inside\n");
  ASSERT_TRUE(m.ok());
  auto frames = uploads_->ReadFrames({m->digest}, {{Sha256Hex("inside\n"), 2}});
  ASSERT_TRUE(frames.ok()) << frames.status().message();
  auto parsed = upload::ParseFrames(*frames);
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].data, "side\n");
  EXPECT_EQ(uploads_->ReadFrames({m->digest}, {{other, 0}}).status().code(), Code::kForbidden);
}

TEST_F(UploadsTest, RetentionCollectsWhatNoLiveJobUsesAndNobodyTouched) {
  std::string loose = Send("alice", "loose\n");
  std::string asked = Send("alice", "asked about\n");
  Send("alice", "in a live job\n");
  auto live = Register("alice", "in a live job\n");
  ASSERT_TRUE(live.ok());
  clock_.StepWall(6 * kDay);
  EXPECT_TRUE(Has("alice", asked));  // asking counts as a use
  clock_.StepWall(2 * kDay);
  auto gone = uploads_->Collect({live->digest}, clock_.Now() - 7 * kDay, clock_.Now() - kDay);
  ASSERT_TRUE(gone.ok()) << gone.status().message();
  EXPECT_EQ(*gone, 1);
  EXPECT_FALSE(Has("alice", loose));
  EXPECT_TRUE(Has("alice", asked));
  EXPECT_TRUE(Has("alice", live->digest));
  EXPECT_TRUE(Has("alice", Sha256Hex("in a live job\n")));
  // Once the job has ended, its upload goes too.
  clock_.StepWall(8 * kDay);
  gone = uploads_->Collect({}, clock_.Now() - 7 * kDay, clock_.Now() - kDay);
  EXPECT_EQ(*gone, 3);
  EXPECT_FALSE(Has("alice", live->digest));
}

// A manifest whose entry said its file was bigger than the blob uploaded was accepted, and each
// node that fetched it asked for the missing bytes for ever (about 3,600 requests a second), its
// launches stuck. The size is checked at registration now.
TEST_F(UploadsTest, AManifestMustGiveEachFileTheSizeItWasUploadedWith) {
  Send("alice", "twelve bytes");
  auto over = Register("alice", "twelve bytes", 1 << 20);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kInvalidArgument);
  EXPECT_NE(over.status().message().find("says blob"), std::string::npos);
  EXPECT_NE(over.status().message().find("is 1048576 bytes, but the one uploaded is 12"),
            std::string::npos);
  EXPECT_EQ(Register("alice", "twelve bytes", 11).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Register("alice", "twelve bytes").ok());
}

// Any user could park 512 MiB pieces in the server's state disk for a week, without limit. Each
// user's blobs and pieces now count against a quota, and uploads stop while the disk is short of
// its floor.
TEST_F(UploadsTest, AUsersUploadsStayWithinTheirQuotaAndTheDisksFloor) {
  Open(UploadQuota{.per_user_bytes = 1000, .min_free_bytes = 0});
  const std::string first(600, 'a');
  Send("alice", first);
  const std::string second(600, 'b');
  std::string body;
  upload::AppendFrame(body, Sha256Hex(second), 0, second);
  auto over = uploads_->PutFrames("alice", body);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kTooLarge);
  EXPECT_NE(over.status().message().find("quota of 1000 B per user"), std::string::npos)
      << over.status().message();
  // Pieces count too, as they come.
  auto piece = uploads_->PutPiece("alice", Sha256Hex(second), 0, second.substr(0, 500), false, 600);
  ASSERT_FALSE(piece.ok());
  EXPECT_EQ(piece.status().code(), Code::kTooLarge);
  // Bob has a quota of his own.
  EXPECT_TRUE(uploads_->PutFrames("bob", body).ok());

  // A disk whose free space is below the floor takes no upload from anyone.
  Open(UploadQuota{.per_user_bytes = 0, .min_free_bytes = int64_t{1} << 60});
  auto full = uploads_->PutFrames("carol", body);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Code::kNoSpace);
  EXPECT_NE(full.status().message().find("TiB free for its own state"), std::string::npos)
      << full.status().message();
}

}  // namespace
}  // namespace berth
