// The PostgreSQL BlobStore (store/blob_store.h): a blob is rows of upload_chunks (1 MiB each) and
// one row of upload_blobs, written in one transaction; owners in upload_owners; pieces of a big
// blob still arriving in upload_pieces, per owner, moved into chunks when the last one checks out.
// Every server sharing the database serves every blob (docs/ha.md).
#include <fmt/format.h>

#include <map>
#include <set>

#include "common/mutex.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "store/blob_store.h"
#include "store/pg.h"
#include "upload/digest.h"

namespace berth {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

Status Mismatch(const std::string& digest, const std::string& actual) {
  return Status::Conflict(fmt::format(
      "the content sent as {} has digest {}: it changed while it was sent, or was corrupted",
      digest, actual));
}

// `digests` as a PostgreSQL array literal. Digests are hex (checked here): safe in one.
Result<std::string> DigestArray(const std::vector<std::string>& digests) {
  std::string array = "{";
  for (const std::string& d : digests) {
    if (!upload::IsDigest(d)) return Status::Invalid("not a digest: " + d);
    array += (array.size() > 1 ? "," : "") + d;
  }
  return array + "}";
}

class PgBlobStore final : public BlobStore {
 public:
  PgBlobStore(std::unique_ptr<PgConn> db, const Clock& clock) : db_(std::move(db)), clock_(clock) {}

  Result<std::vector<std::string>> Missing(std::string_view owner,
                                           const std::vector<std::string>& digests) override {
    auto array = DigestArray(digests);
    if (!array.ok()) return array.status();
    MutexLock lock(mu_);
    // What the owner has counts as used now: kept for the retention period from now on.
    Result<PgResult> r = db_->Query(
        "UPDATE upload_owners SET stored_ms = $3 WHERE owner = $1 AND digest = ANY($2::text[]) "
        "RETURNING digest",
        PgParams().Add(owner).Add(*array).Add(clock_.Now()));
    if (!r.ok()) return r.status();
    std::set<std::string_view> have;
    for (int i = 0; i < r->rows(); ++i) have.insert(r->TextView(i, 0));
    std::vector<std::string> missing;
    for (const std::string& d : digests) {
      if (!have.count(d)) missing.push_back(d);
    }
    return missing;
  }

  Status Put(std::string_view owner, const std::string& digest, std::string_view data) override {
    std::string actual = Sha256Hex(data);
    if (actual != digest) return Mismatch(digest, actual);
    MutexLock lock(mu_);
    auto txn = PgTransaction::Begin(*db_);
    if (!txn.ok()) return txn.status();
    Result<PgResult> known =
        db_->Query("SELECT 1 FROM upload_blobs WHERE digest = $1", PgParams().Add(digest));
    if (!known.ok()) return known.status();
    if (known->rows() == 0) {
      for (size_t at = 0; at < data.size() || at == 0; at += kChunkBytes) {
        BERTH_RETURN_IF_ERROR(db_->Run(
            "INSERT INTO upload_chunks(digest, start, data) VALUES ($1, $2, decode($3, 'hex')) "
            "ON CONFLICT DO NOTHING",
            PgParams()
                .Add(digest)
                .Add(static_cast<int64_t>(at))
                .Add(HexEncode(data.substr(at, kChunkBytes)))));
        if (data.empty()) break;
      }
      BERTH_RETURN_IF_ERROR(AddBlob(digest, static_cast<int64_t>(data.size())));
    }
    BERTH_RETURN_IF_ERROR(AddOwner(owner, digest));
    return txn->Commit();
  }

  Result<int64_t> Received(std::string_view owner, const std::string& digest) override {
    MutexLock lock(mu_);
    return ReceivedLocked(owner, digest);
  }

  Result<int64_t> Append(std::string_view owner, const std::string& digest, int64_t offset,
                         std::string_view data, bool last) override {
    MutexLock lock(mu_);
    auto txn = PgTransaction::Begin(*db_);
    if (!txn.ok()) return txn.status();
    auto received = ReceivedLocked(owner, digest);
    if (!received.ok()) return received.status();
    if (*received != offset) {
      return Status::Conflict(
          fmt::format("blob {}: {} bytes received so far, not {}; go on from {}", digest, *received,
                      offset, *received));
    }
    if (!data.empty()) {
      BERTH_RETURN_IF_ERROR(db_->Run(
          "INSERT INTO upload_pieces(owner, digest, start, data, stored_ms) VALUES ($1, "
          "$2, $3, decode($4, 'hex'), $5)",
          PgParams().Add(owner).Add(digest).Add(offset).Add(HexEncode(data)).Add(clock_.Now())));
    }
    const int64_t total = offset + static_cast<int64_t>(data.size());
    if (last) {
      Status st = Complete(owner, digest, total);
      if (st.code() == Code::kConflict) {
        // The pieces do not add up: forget them (the client starts over), and say why.
        auto forget = db_->Run("DELETE FROM upload_pieces WHERE owner = $1 AND digest = $2",
                               PgParams().Add(owner).Add(digest));
        BERTH_RETURN_IF_ERROR(forget);
        BERTH_RETURN_IF_ERROR(txn->Commit());
        return st;
      }
      BERTH_RETURN_IF_ERROR(st);
    }
    BERTH_RETURN_IF_ERROR(txn->Commit());
    return total;
  }

  Result<int64_t> Size(const std::string& digest) override {
    MutexLock lock(mu_);
    Result<PgResult> r =
        db_->Query("SELECT size FROM upload_blobs WHERE digest = $1", PgParams().Add(digest));
    if (!r.ok()) return r.status();
    if (r->rows() == 0) return Status::NotFound("no blob " + digest);
    return r->Int(0, 0);
  }

  Result<std::string> Read(const std::string& digest, int64_t offset, size_t max_bytes) override {
    MutexLock lock(mu_);
    return ReadRows("upload_chunks", "digest = $1", PgParams().Add(digest), offset, max_bytes);
  }

  Result<std::vector<int64_t>> Sizes(const std::vector<std::string>& digests) override {
    auto array = DigestArray(digests);
    if (!array.ok()) return array.status();
    MutexLock lock(mu_);
    Result<PgResult> r =
        db_->Query("SELECT digest, size FROM upload_blobs WHERE digest = ANY($1::text[])",
                   PgParams().Add(*array));
    if (!r.ok()) return r.status();
    std::map<std::string_view, int64_t> found;
    for (int i = 0; i < r->rows(); ++i) found.emplace(r->TextView(i, 0), r->Int(i, 1));
    std::vector<int64_t> out;
    out.reserve(digests.size());
    for (const std::string& d : digests) {
      auto it = found.find(d);
      out.push_back(it == found.end() ? -1 : it->second);
    }
    return out;
  }

  Result<int64_t> UsedBy(std::string_view owner) override {
    MutexLock lock(mu_);
    Result<PgResult> r = db_->Query(
        "SELECT (SELECT COALESCE(sum(b.size), 0) FROM upload_owners o JOIN upload_blobs b "
        "ON b.digest = o.digest WHERE o.owner = $1) + (SELECT COALESCE(sum(length(data)), 0) "
        "FROM upload_pieces WHERE owner = $1)",
        PgParams().Add(owner));
    if (!r.ok()) return r.status();
    return r->Int(0, 0);
  }

  Result<int64_t> Collect(const std::function<bool(const std::string&)>& live, TimeMs before,
                          TimeMs pieces_before) override {
    MutexLock lock(mu_);
    BERTH_RETURN_IF_ERROR(db_->Run(
        "DELETE FROM upload_pieces p WHERE NOT EXISTS (SELECT 1 FROM upload_pieces q WHERE "
        "q.owner = p.owner AND q.digest = p.digest AND q.stored_ms >= $1)",
        PgParams().Add(pieces_before)));
    Result<PgResult> old = db_->Query(
        "SELECT digest FROM upload_blobs b WHERE NOT EXISTS (SELECT 1 FROM upload_owners o WHERE "
        "o.digest = b.digest AND o.stored_ms >= $1) LIMIT 10000",
        PgParams().Add(before));
    if (!old.ok()) return old.status();
    int64_t gone = 0;
    for (int i = 0; i < old->rows(); ++i) {
      std::string digest = old->Text(i, 0);
      if (live(digest)) continue;
      auto txn = PgTransaction::Begin(*db_);
      if (!txn.ok()) return txn.status();
      for (const char* sql : {"DELETE FROM upload_blobs WHERE digest = $1",
                              "DELETE FROM upload_owners WHERE digest = $1",
                              "DELETE FROM upload_chunks WHERE digest = $1"}) {
        BERTH_RETURN_IF_ERROR(db_->Run(sql, PgParams().Add(digest)));
      }
      BERTH_RETURN_IF_ERROR(txn->Commit());
      ++gone;
    }
    return gone;
  }

 private:
  Result<int64_t> ReceivedLocked(std::string_view owner, const std::string& digest) REQUIRES(mu_) {
    Result<PgResult> r = db_->Query(
        "SELECT COALESCE(max(start + length(data)), 0) FROM upload_pieces "
        "WHERE owner = $1 AND digest = $2",
        PgParams().Add(owner).Add(digest));
    if (!r.ok()) return r.status();
    return r->Int(0, 0);
  }

  // Up to `max_bytes` from `offset` of the chunks of `table` that `where` selects.
  Result<std::string> ReadRows(const std::string& table, const std::string& where, PgParams params,
                               int64_t offset, size_t max_bytes) REQUIRES(mu_) {
    const int64_t end = offset + static_cast<int64_t>(max_bytes);
    const int n = static_cast<int>(params.size());
    params.Add(end).Add(offset);
    Result<PgResult> r = db_->Query(
        fmt::format("SELECT start, encode(data, 'hex') FROM {} WHERE {} AND start < ${} AND "
                    "start + length(data) > ${} ORDER BY start",
                    table, where, n + 1, n + 2),
        params);
    if (!r.ok()) return r.status();
    std::string out;
    for (int i = 0; i < r->rows() && out.size() < max_bytes; ++i) {
      const int64_t at = offset + static_cast<int64_t>(out.size());
      const int64_t start = r->Int(i, 0);
      if (start > at) break;
      const std::string chunk = PgUnhex(r->TextView(i, 1));
      const size_t from = static_cast<size_t>(at - start);
      if (from >= chunk.size()) continue;
      out.append(chunk, from, std::min(chunk.size() - from, max_bytes - out.size()));
    }
    return out;
  }

  // Checks the pieces of `digest` from `owner` (`total` bytes) and makes them the blob.
  Status Complete(std::string_view owner, const std::string& digest, int64_t total) REQUIRES(mu_) {
    Sha256 hash;
    for (int64_t at = 0; at < total;) {
      auto part = ReadRows("upload_pieces", "owner = $1 AND digest = $2",
                           PgParams().Add(owner).Add(digest), at, 8 * kChunkBytes);
      if (!part.ok()) return part.status();
      if (part->empty()) return Status::Internal("blob " + digest + ": a piece is missing");
      hash.Update(*part);
      at += static_cast<int64_t>(part->size());
    }
    std::string actual = hash.Finish();
    if (actual != digest) return Mismatch(digest, actual);
    BERTH_RETURN_IF_ERROR(
        db_->Run("INSERT INTO upload_chunks(digest, start, data) SELECT digest, start, data FROM "
                 "upload_pieces WHERE owner = $1 AND digest = $2 ON CONFLICT DO NOTHING",
                 PgParams().Add(owner).Add(digest)));
    BERTH_RETURN_IF_ERROR(db_->Run("DELETE FROM upload_pieces WHERE owner = $1 AND digest = $2",
                                   PgParams().Add(owner).Add(digest)));
    BERTH_RETURN_IF_ERROR(AddBlob(digest, total));
    return AddOwner(owner, digest);
  }

  Status AddBlob(const std::string& digest, int64_t size) REQUIRES(mu_) {
    return db_->Run(
        "INSERT INTO upload_blobs(digest, size, stored_ms) VALUES ($1, $2, $3) "
        "ON CONFLICT (digest) DO NOTHING",
        PgParams().Add(digest).Add(size).Add(clock_.Now()));
  }

  Status AddOwner(std::string_view owner, const std::string& digest) REQUIRES(mu_) {
    return db_->Run(
        "INSERT INTO upload_owners(owner, digest, stored_ms) VALUES ($1, $2, $3) "
        "ON CONFLICT (owner, digest) DO UPDATE SET stored_ms = excluded.stored_ms",
        PgParams().Add(owner).Add(digest).Add(clock_.Now()));
  }

  Mutex mu_;
  std::unique_ptr<PgConn> db_ GUARDED_BY(mu_);
  const Clock& clock_;
};

}  // namespace

Result<std::unique_ptr<BlobStore>> OpenPgBlobStore(const std::string& conninfo,
                                                   const Clock& clock) {
  Result<std::unique_ptr<PgConn>> db = PgConn::Connect(conninfo);
  if (!db.ok()) return db.status();
  return std::unique_ptr<BlobStore>(new PgBlobStore(std::move(*db), clock));
}

}  // namespace berth
