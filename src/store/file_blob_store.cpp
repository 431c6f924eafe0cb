// The single-server BlobStore (store/blob_store.h): each blob a file under data/, written to a
// temporary name and renamed into place; its index (sizes, owners) in SQLite. Files are not synced
// one by one (a 10,000-file workdir would wait for 10,000 syncs): Missing checks that a blob's file
// is there with its size, so one lost in a crash is simply asked for again.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/mutex.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "store/blob_store.h"
#include "store/sqlite.h"
#include "upload/digest.h"

namespace berth {
namespace {

constexpr int kBusyTimeoutMs = 10'000;

// An error writing `what`: out of disk is kNoSpace (507), anything else internal.
Status WriteError(const std::string& what, int err) {
  std::string m = fmt::format("cannot write {}: {}", what, strerror(err));
  return err == ENOSPC || err == EDQUOT
             ? Status::NoSpace("the server's upload store is full (" + m + ")")
             : Status::Internal(m);
}

Status WriteAll(int fd, std::string_view data, int64_t offset, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd, data.data(), data.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return WriteError(what, errno);
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return Status::Ok();
}

class FileBlobStore final : public BlobStore {
 public:
  FileBlobStore(std::string dir, const Clock& clock, std::unique_ptr<SqliteDb> db)
      : dir_(std::move(dir)), clock_(clock), db_(std::move(db)) {}

  Result<std::vector<std::string>> Missing(std::string_view owner,
                                           const std::vector<std::string>& digests) override {
    std::vector<std::string> missing;
    MutexLock lock(mu_);
    auto tx = Transaction::Begin(*db_, Transaction::Mode::kWrite);
    if (!tx.ok()) return tx.status();
    {
      auto stmt = db_->Cached(
          "SELECT b.size FROM owners o JOIN blobs b ON b.digest = o.digest "
          "WHERE o.owner = ?1 AND o.digest = ?2");
      if (!stmt.ok()) return stmt.status();
      // What the owner has counts as used now: kept for the retention period from now on.
      auto touch = db_->Cached("UPDATE owners SET stored_ms = ?3 WHERE owner = ?1 AND digest = ?2");
      if (!touch.ok()) return touch.status();
      const TimeMs now = clock_.Now();
      for (const std::string& digest : digests) {
        (*stmt)->Reset();
        (*stmt)->Bind(1, owner).Bind(2, digest);
        auto row = (*stmt)->Step();
        if (!row.ok()) return row.status();
        if (!*row || !HasFile(digest, (*stmt)->Int(0))) {
          missing.push_back(digest);
          continue;
        }
        (*touch)->Reset();
        BERTH_RETURN_IF_ERROR((*touch)->Bind(1, owner).Bind(2, digest).Bind(3, now).Run());
      }
    }
    BERTH_RETURN_IF_ERROR(tx->Commit());
    return missing;
  }

  Status Put(std::string_view owner, const std::string& digest, std::string_view data) override {
    return PutAll(owner, {Blob{digest, data}});
  }

  Status PutAll(std::string_view owner, const std::vector<Blob>& blobs) override {
    std::vector<std::pair<std::string, int64_t>> stored;
    Status st;
    for (const Blob& b : blobs) {
      st = Keep(b.digest, b.data);
      if (!st.ok()) break;
      stored.emplace_back(b.digest, static_cast<int64_t>(b.data.size()));
    }
    Status indexed = Index(owner, stored);
    return st.ok() ? indexed : st;
  }

  Result<int64_t> Received(std::string_view owner, const std::string& digest) override {
    struct stat st;
    if (::stat(PartialPath(owner, digest).c_str(), &st) != 0) return int64_t{0};
    return static_cast<int64_t>(st.st_size);
  }

  Result<int64_t> Append(std::string_view owner, const std::string& digest, int64_t offset,
                         std::string_view data, bool last) override {
    std::string path = PartialPath(owner, digest);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return WriteError(path, errno);
    // One request at a time per partial blob (a retry racing the request it repeats).
    ::flock(fd, LOCK_EX);
    Result<int64_t> out = AppendLocked(fd, path, owner, digest, offset, data, last);
    ::close(fd);
    return out;
  }

  Result<int64_t> Size(const std::string& digest) override {
    struct stat st;
    if (::stat(DataPath(digest).c_str(), &st) != 0) {
      return Status::NotFound("no blob " + digest);
    }
    return static_cast<int64_t>(st.st_size);
  }

  Result<std::string> Read(const std::string& digest, int64_t offset, size_t max_bytes) override {
    int fd = ::open(DataPath(digest).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::NotFound("no blob " + digest);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return Status::Internal("cannot stat blob " + digest);
    }
    // What there is to read, not what the caller could take: a small blob costs its size.
    max_bytes = static_cast<size_t>(std::clamp<int64_t>(st.st_size - offset, 0, max_bytes));
    std::string out(max_bytes, '\0');
    size_t got = 0;
    while (got < max_bytes) {
      ssize_t n =
          ::pread(fd, out.data() + got, max_bytes - got, offset + static_cast<int64_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::close(fd);
    out.resize(got);
    return out;
  }

  Result<int64_t> UsedBy(std::string_view owner) override {
    int64_t used = 0;
    {
      MutexLock lock(mu_);
      auto stmt = db_->Cached(
          "SELECT COALESCE(SUM(b.size), 0) FROM owners o JOIN blobs b ON b.digest = o.digest "
          "WHERE o.owner = ?1");
      if (!stmt.ok()) return stmt.status();
      (*stmt)->Reset();
      (*stmt)->Bind(1, owner);
      auto row = (*stmt)->Step();
      if (!row.ok()) return row.status();
      if (*row) used = (*stmt)->Int(0);
    }
    // Pieces still arriving: named for their owner (PartialPath).
    const std::string prefix = OwnerPrefix(owner);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/partial", ec)) {
      if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
      struct stat st;
      if (::stat(entry.path().c_str(), &st) == 0) used += static_cast<int64_t>(st.st_size);
    }
    return used;
  }

  std::optional<int64_t> FreeBytes() override {
    struct statvfs fs {};
    if (::statvfs(dir_.c_str(), &fs) != 0) return std::nullopt;
    return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  }

  Result<int64_t> Collect(const std::function<bool(const std::string&)>& live, TimeMs before,
                          TimeMs pieces_before) override {
    std::vector<std::string> gone;
    {
      MutexLock lock(mu_);
      auto tx = Transaction::Begin(*db_, Transaction::Mode::kWrite);
      if (!tx.ok()) return tx.status();
      {
        auto old = db_->Prepare(
            "SELECT digest FROM blobs b WHERE NOT EXISTS (SELECT 1 FROM owners o WHERE "
            "o.digest = b.digest AND o.stored_ms >= ?1) LIMIT 10000");
        if (!old.ok()) return old.status();
        old->Bind(1, before);
        Status read = old->ForEachRow([&]() -> Status {
          std::string digest = old->Text(0);
          if (!live(digest)) gone.push_back(std::move(digest));
          return Status::Ok();
        });
        if (!read.ok()) return read;
        auto del_blob = db_->Cached("DELETE FROM blobs WHERE digest = ?1");
        if (!del_blob.ok()) return del_blob.status();
        auto del_owners = db_->Cached("DELETE FROM owners WHERE digest = ?1");
        if (!del_owners.ok()) return del_owners.status();
        for (const std::string& digest : gone) {
          (*del_blob)->Reset();
          BERTH_RETURN_IF_ERROR((*del_blob)->Bind(1, digest).Run());
          (*del_owners)->Reset();
          BERTH_RETURN_IF_ERROR((*del_owners)->Bind(1, digest).Run());
        }
      }
      BERTH_RETURN_IF_ERROR(tx->Commit());
    }
    // The index first, then the files: a blob the index no longer has is never served.
    for (const std::string& digest : gone) ::unlink(DataPath(digest).c_str());
    RemovePiecesOlderThan(pieces_before);
    return static_cast<int64_t>(gone.size());
  }

 private:
  // Pieces of uploads nobody went on with since `before` (wall ms).
  void RemovePiecesOlderThan(TimeMs before) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/partial", ec)) {
      struct stat st;
      if (::stat(entry.path().c_str(), &st) != 0) continue;
      const TimeMs mtime =
          static_cast<TimeMs>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
      if (mtime < before) ::unlink(entry.path().c_str());
    }
  }

  Result<int64_t> AppendLocked(int fd, const std::string& path, std::string_view owner,
                               const std::string& digest, int64_t offset, std::string_view data,
                               bool last) {
    struct stat st;
    if (::fstat(fd, &st) != 0) return Status::Internal("cannot stat " + path);
    if (st.st_size != offset) {
      return Status::Conflict(
          fmt::format("blob {}: {} bytes received so far, not {}; go on from {}", digest,
                      st.st_size, offset, st.st_size));
    }
    BERTH_RETURN_IF_ERROR(WriteAll(fd, data, offset, path));
    int64_t received = offset + static_cast<int64_t>(data.size());
    // A piece's time is the store's clock's (what Collect compares with), not the disk's.
    const TimeMs now = clock_.Now();
    const timespec at{.tv_sec = now / 1000, .tv_nsec = (now % 1000) * 1'000'000};
    const timespec times[2] = {at, at};
    ::futimens(fd, times);
    if (!last) return received;
    ::lseek(fd, 0, SEEK_SET);
    auto hashed = upload::Sha256OfFd(fd, path);
    if (!hashed.ok()) return hashed.status();
    if (hashed->first != digest) {
      ::unlink(path.c_str());
      return Mismatch(digest, hashed->first);
    }
    BERTH_RETURN_IF_ERROR(Publish(path, digest));
    BERTH_RETURN_IF_ERROR(Index(owner, {{digest, received}}));
    return received;
  }

  // Checks `data` against `digest` and writes it under data/ unless it is there already.
  Status Keep(const std::string& digest, std::string_view data) {
    std::string actual = Sha256Hex(data);
    if (actual != digest) return Mismatch(digest, actual);
    if (HasFile(digest, static_cast<int64_t>(data.size()))) return Status::Ok();
    std::string tmp = TempPath(digest);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return WriteError(tmp, errno);
    Status st = WriteAll(fd, data, 0, tmp);
    ::close(fd);
    if (st.ok()) st = Publish(tmp, digest);
    if (!st.ok()) ::unlink(tmp.c_str());
    return st;
  }

  static Status Mismatch(const std::string& digest, const std::string& actual) {
    return Status::Conflict(fmt::format(
        "the content sent as {} has digest {}: it changed while it was sent, or was corrupted",
        digest, actual));
  }

  std::string DataPath(const std::string& digest) const {
    return dir_ + "/data/" + digest.substr(0, 2) + "/" + digest;
  }
  std::string TempPath(const std::string& digest) const {
    return dir_ + "/partial/put-" + RandomHex(8) + "-" + digest;
  }
  std::string PartialPath(std::string_view owner, const std::string& digest) const {
    return dir_ + "/partial/" + OwnerPrefix(owner) + digest;
  }
  static std::string OwnerPrefix(std::string_view owner) {
    return Sha256Hex(owner).substr(0, 16) + "-";
  }

  bool HasFile(const std::string& digest, int64_t size) const {
    struct stat st;
    return ::stat(DataPath(digest).c_str(), &st) == 0 && st.st_size == size;
  }

  // Moves the complete blob at `from` to its place under data/.
  Status Publish(const std::string& from, const std::string& digest) {
    std::string to = DataPath(digest);
    ::mkdir(to.substr(0, to.rfind('/')).c_str(), 0700);
    if (::rename(from.c_str(), to.c_str()) != 0) return WriteError(to, errno);
    return Status::Ok();
  }

  // Records `blobs` (digest, size) as `owner`'s, in one transaction.
  Status Index(std::string_view owner, const std::vector<std::pair<std::string, int64_t>>& blobs) {
    if (blobs.empty()) return Status::Ok();
    MutexLock lock(mu_);
    auto tx = Transaction::Begin(*db_, Transaction::Mode::kWrite);
    if (!tx.ok()) return tx.status();
    {
      auto blob = db_->Cached(
          "INSERT INTO blobs (digest, size, stored_ms) VALUES (?1, ?2, ?3) "
          "ON CONFLICT (digest) DO UPDATE SET size = excluded.size");
      if (!blob.ok()) return blob.status();
      auto own = db_->Cached(
          "INSERT INTO owners (owner, digest, stored_ms) VALUES (?1, ?2, ?3) "
          "ON CONFLICT DO UPDATE SET stored_ms = excluded.stored_ms");
      if (!own.ok()) return own.status();
      const TimeMs now = clock_.Now();
      for (const auto& [digest, size] : blobs) {
        BERTH_RETURN_IF_ERROR((*blob)->Bind(1, digest).Bind(2, size).Bind(3, now).Run());
        (*blob)->Reset();
        BERTH_RETURN_IF_ERROR((*own)->Bind(1, owner).Bind(2, digest).Bind(3, now).Run());
        (*own)->Reset();
      }
    }
    return tx->Commit();
  }

  const std::string dir_;
  const Clock& clock_;
  Mutex mu_;
  std::unique_ptr<SqliteDb> db_ GUARDED_BY(mu_);
};

}  // namespace

Result<std::unique_ptr<BlobStore>> OpenFileBlobStore(const std::string& dir, const Clock& clock) {
  std::error_code ec;
  for (const char* sub : {"data", "partial"}) {
    std::filesystem::create_directories(dir + "/" + sub, ec);
    if (ec) return Status::Internal(fmt::format("cannot create {}/{}: {}", dir, sub, ec.message()));
  }
  ::chmod(dir.c_str(), 0700);
  auto db = SqliteDb::Open(dir + "/blobs.db");
  if (!db.ok()) return db.status();
  BERTH_RETURN_IF_ERROR((*db)->Exec("PRAGMA busy_timeout = " + std::to_string(kBusyTimeoutMs)));
  (*db)->QueryText("PRAGMA journal_mode = WAL");
  BERTH_RETURN_IF_ERROR((*db)->Exec("PRAGMA synchronous = NORMAL"));
  BERTH_RETURN_IF_ERROR((*db)->Exec(
      "CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, size INTEGER NOT NULL, "
      "stored_ms INTEGER NOT NULL) WITHOUT ROWID;"
      "CREATE TABLE IF NOT EXISTS owners (owner TEXT NOT NULL, digest TEXT NOT NULL, "
      "stored_ms INTEGER NOT NULL, PRIMARY KEY (owner, digest)) WITHOUT ROWID;"));
  return std::unique_ptr<BlobStore>(std::make_unique<FileBlobStore>(dir, clock, std::move(*db)));
}

}  // namespace berth
