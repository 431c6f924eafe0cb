// BlobStore: where the server keeps uploaded content (workdirs, file mounts, their manifests) by
// digest (upload/digest.h), and who uploaded what (docs/design.md "Uploads"). A blob's bytes are
// stored once however many users upload them, but each user must send the bytes themselves before
// the blob counts as theirs: Missing answers from the asker's own uploads only, so nobody learns
// what another user uploaded, and nobody can claim content by knowing its digest.
//
// Backends: files under the server's state dir with their index in SQLite (one server), or
// PostgreSQL (several servers: any leader serves every blob after a failover). Digests are checked
// before a blob is stored: kConflict names both digests on a mismatch.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

class BlobStore {
 public:
  virtual ~BlobStore() = default;
  // Of `digests`, those `owner` has not uploaded (in the order given). Those they have count as
  // used now (Collect keeps them for the retention period from now).
  virtual Result<std::vector<std::string>> Missing(std::string_view owner,
                                                   const std::vector<std::string>& digests) = 0;
  // Stores `data` as blob `digest`, uploaded by `owner`.
  virtual Status Put(std::string_view owner, const std::string& digest, std::string_view data) = 0;
  // Stores several blobs of `owner` as Put does each, in one commit where the backend can (the
  // blobs before the first that fails are kept).
  struct Blob {
    std::string digest;
    std::string_view data;
  };
  virtual Status PutAll(std::string_view owner, const std::vector<Blob>& blobs) {
    for (const Blob& b : blobs) BERTH_RETURN_IF_ERROR(Put(owner, b.digest, b.data));
    return Status::Ok();
  }
  // A blob sent in pieces (too big for one request): how many bytes of it `owner` has sent so far.
  virtual Result<int64_t> Received(std::string_view owner, const std::string& digest) = 0;
  // Appends `data` at byte `offset`, which must be Received (kConflict otherwise: the caller goes
  // on from Received). With `last`, checks and stores the whole blob. Answers Received after.
  virtual Result<int64_t> Append(std::string_view owner, const std::string& digest, int64_t offset,
                                 std::string_view data, bool last) = 0;
  // A stored blob's size (kNotFound when there is none).
  virtual Result<int64_t> Size(const std::string& digest) = 0;
  // The sizes of `digests`, in the order given; -1 for one not stored.
  virtual Result<std::vector<int64_t>> Sizes(const std::vector<std::string>& digests) {
    std::vector<int64_t> out;
    out.reserve(digests.size());
    for (const std::string& d : digests) {
      auto size = Size(d);
      if (!size.ok() && size.status().code() != Code::kNotFound) return size.status();
      out.push_back(size.ok() ? *size : -1);
    }
    return out;
  }
  // The bytes `owner` keeps here: the blobs they uploaded (each counted in full, whoever else also
  // has it) and the pieces of blobs they are still sending. What a per-user quota counts.
  virtual Result<int64_t> UsedBy(std::string_view owner) = 0;
  // The bytes free on the disk the blobs are written to; nullopt for a backend with no disk of
  // its own (PostgreSQL).
  virtual std::optional<int64_t> FreeBytes() { return std::nullopt; }
  // Up to `max_bytes` of a stored blob from `offset`.
  virtual Result<std::string> Read(const std::string& digest, int64_t offset, size_t max_bytes) = 0;
  // Deletes the blobs for which `live` is false and that nobody uploaded or asked about since
  // `before` (with who had them), and pieces nobody went on with since `pieces_before`; at most
  // 10,000 blobs a call. Answers how many blobs went.
  virtual Result<int64_t> Collect(const std::function<bool(const std::string&)>& live,
                                  TimeMs before, TimeMs pieces_before) = 0;
};

// The single-server backend: blobs as files under `dir` (data/ab/DIGEST), partial uploads under
// dir/partial, the index in dir/blobs.db.
Result<std::unique_ptr<BlobStore>> OpenFileBlobStore(const std::string& dir, const Clock& clock);

// The PostgreSQL backend (store/pg_blob_store.cpp): tables upload_* of the database at `conninfo`,
// whose schema PgStore::Open has migrated. Writes are not fenced: content-addressed blobs are the
// same whichever server writes them.
Result<std::unique_ptr<BlobStore>> OpenPgBlobStore(const std::string& conninfo, const Clock& clock);

}  // namespace berth
