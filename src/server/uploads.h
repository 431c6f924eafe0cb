// Uploads: the server's side of content-addressed workdirs and file mounts (docs/user-guide.md
// "Workdir upload", docs/design.md "Uploads"). Users send the blobs they lack (Missing answers from
// their own uploads only), then register a manifest naming them; a submission may name only
// manifests its user registered (or could have: every file of it is theirs), so nobody's job can
// reach blobs its user never sent. A node reads a blob only for a job placed on it whose spec
// names a manifest that holds the blob (the Core checks the placement).
//
// Thread-safety: thread-safe; the caches are guarded by mu_, the BlobStore is thread-safe itself.
#pragma once

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/lru_cache.h"
#include "common/mutex.h"
#include "common/status.h"
#include "spec/job_spec.h"
#include "store/blob_store.h"
#include "upload/manifest.h"

namespace berth {

// What a user may keep in the server's upload store, and what the store keeps free for the rest of
// the server's state (docs/security.md "Limits").
struct UploadQuota {
  // Bytes of blobs a user uploaded plus pieces of those still arriving (0: no quota).
  int64_t per_user_bytes = 20LL << 30;
  // Uploads are refused while the upload store's disk has less than this free, so that they never
  // fill the disk the job store needs (ignored by a backend with no disk of its own).
  int64_t min_free_bytes = 1LL << 30;
};

class Uploads {
 public:
  // The most digests one Missing call may ask about, and the most bytes one blob frame read
  // answers (the rest in later calls).
  static constexpr size_t kMaxAskedDigests = 20'000;
  static constexpr size_t kMaxReadBytes = 8 << 20;

  Uploads(std::unique_ptr<BlobStore> blobs, upload::ManifestLimits limits, UploadQuota quota = {});

  // Of `digests`, those `user` has not uploaded.
  Result<std::vector<std::string>> Missing(const std::string& user,
                                           const std::vector<std::string>& digests);
  // Stores the whole blobs framed in `body` (upload/blob_frames.h; every offset 0). Answers how
  // many were stored.
  Result<int64_t> PutFrames(const std::string& user, std::string_view body);
  // One piece of a blob sent in pieces (BlobStore::Append); `size`: the whole blob's, checked
  // against the per-file limit before anything is kept.
  Result<int64_t> PutPiece(const std::string& user, const std::string& digest, int64_t offset,
                           std::string_view data, bool last, int64_t size);
  Result<int64_t> Received(const std::string& user, const std::string& digest);

  // Checks a manifest's text (its limits; every file in it `user`'s, of the size it says) and
  // keeps it as a blob of theirs. Answers its digest. A file whose stored blob has another size
  // is refused (Invalid): a node fetching it would wait for bytes that never come.
  struct Registered {
    std::string digest;
    int64_t files = 0;
    int64_t bytes = 0;
  };
  Result<Registered> RegisterManifest(const std::string& user, std::string_view text);

  // Ok when every manifest `spec` names (workdir_upload, file_mounts) is one `user` may use.
  Status CheckSpec(const std::string& user, const JobSpec& spec);

  // Frames of the blobs `wanted` (digest, offset) for a node fetching `manifests`' content: each
  // wanted digest must be one of `manifests` or a file in one; up to kMaxReadBytes in all (at least
  // one frame's worth).
  Result<std::string> ReadFrames(const std::vector<std::string>& manifests,
                                 const std::vector<std::pair<std::string, int64_t>>& wanted);

  // Deletes blobs that no manifest of `live_manifests` holds (nor is one of them) and that nobody
  // uploaded or asked about since `before`, and pieces of unfinished uploads left since
  // `pieces_before`. Answers how many blobs went.
  Result<int64_t> Collect(const std::set<std::string>& live_manifests, TimeMs before,
                          TimeMs pieces_before);

  // Blobs received whole from users since the start (berth_upload_blobs_total).
  int64_t blobs_received() const { return blobs_received_.load(); }
  int64_t bytes_received() const { return bytes_received_.load(); }
  // Bytes received in pieces (berth_upload_piece_bytes_total): a resumed upload sends only the
  // rest.
  int64_t piece_bytes() const { return piece_bytes_.load(); }

 private:
  // The file digests of a stored manifest, parsed once and kept in a small cache.
  Result<std::shared_ptr<const std::unordered_set<std::string>>> FilesOf(
      const std::string& manifest) EXCLUDES(mu_);
  // Ok when `user` may store `incoming` more bytes: within their quota (TooLarge, 413, past it) and
  // with the disk's floor kept free (NoSpace, 507).
  Status CheckRoom(const std::string& user, int64_t incoming);
  // Reads a whole stored blob (a manifest).
  Result<std::string> ReadWhole(const std::string& digest);

  std::unique_ptr<BlobStore> blobs_;
  upload::ManifestLimits limits_;
  UploadQuota quota_;
  Mutex mu_;
  // (user, manifest) pairs checked: every file of the manifest is the user's.
  LruCache<std::string, bool> usable_ GUARDED_BY(mu_){4096};
  LruCache<std::string, std::shared_ptr<const std::unordered_set<std::string>>> files_
      GUARDED_BY(mu_){16};
  std::atomic<int64_t> blobs_received_{0};
  std::atomic<int64_t> bytes_received_{0};
  std::atomic<int64_t> piece_bytes_{0};
};

}  // namespace berth
