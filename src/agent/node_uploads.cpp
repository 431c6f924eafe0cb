// A node's upload cache and the per-attempt copies built from it (agent/node_uploads.h).
#include "agent/node_uploads.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/files.h"
#include "upload/blob_frames.h"
#include "upload/digest.h"

namespace berth {
namespace {

// Blobs asked for in one fetch (the server answers as many as fit in its answer).
constexpr size_t kWantPerFetch = 2000;

std::string Errno(std::string_view what, const std::string& path) {
  return fmt::format("cannot {} {}: {}", what, path, strerror(errno));
}

// Copies all of `from` into `to` (both open), in the kernel where it can.
Status CopyFd(int from, int to, int64_t size, const std::string& what) {
  int64_t left = size;
  while (left > 0) {
    ssize_t n = ::copy_file_range(from, nullptr, to, nullptr, static_cast<size_t>(left), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL)) {
      // Fall back to read/write.
      std::vector<char> buf(1 << 20);
      while (left > 0) {
        ssize_t r = ::read(from, buf.data(), std::min<size_t>(buf.size(), left));
        if (r <= 0) return Status::Internal(Errno("read the cached blob of", what));
        if (::write(to, buf.data(), static_cast<size_t>(r)) != r) {
          return Status::Internal(Errno("write", what));
        }
        left -= r;
      }
      return Status::Ok();
    }
    if (n <= 0) return Status::Internal(Errno("copy into", what));
    left -= n;
  }
  return Status::Ok();
}

Status MakeFile(const upload::ManifestEntry& e, const std::string& path, const std::string& blob,
                std::optional<NodeUploads::Owner> owner) {
  int from = ::open(blob.c_str(), O_RDONLY | O_CLOEXEC);
  if (from < 0) return Status::Internal(Errno("open the cached blob for", path));
  int to = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (to < 0) {
    ::close(from);
    return Status::Internal(Errno("create", path));
  }
  Status st = CopyFd(from, to, e.size, path);
  if (st.ok() && owner && ::fchown(to, owner->uid, owner->gid) != 0) {
    st = Status::Internal(Errno("give away", path));
  }
  if (st.ok() && ::fchmod(to, e.mode) != 0) st = Status::Internal(Errno("chmod", path));
  ::close(from);
  ::close(to);
  return st;
}

}  // namespace

Status Materialize(const upload::Manifest& manifest, const std::string& dest,
                   const std::function<std::string(const std::string&)>& blob_path,
                   std::optional<NodeUploads::Owner> owner) {
  if (::mkdir(dest.c_str(), 0700) != 0) return Status::Internal(Errno("create", dest));
  // Entries are sorted by path, so a directory comes before what is in it; one not listed (an
  // implied parent) is made on the way.
  auto ensure_parents = [&](const std::string& rel) -> Status {
    for (size_t slash = rel.find('/'); slash != std::string::npos;
         slash = rel.find('/', slash + 1)) {
      std::string dir = dest + "/" + rel.substr(0, slash);
      if (::mkdir(dir.c_str(), 0700) == 0) {
        if (owner && ::lchown(dir.c_str(), owner->uid, owner->gid) != 0) {
          return Status::Internal(Errno("give away", dir));
        }
      } else if (errno != EEXIST) {
        return Status::Internal(Errno("create", dir));
      }
    }
    return Status::Ok();
  };
  for (const upload::ManifestEntry& e : manifest.entries) {
    std::string path = dest + "/" + e.path;
    BERTH_RETURN_IF_ERROR(ensure_parents(e.path));
    switch (e.kind) {
      case upload::ManifestEntry::Kind::kDir:
        if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
          return Status::Internal(Errno("create", path));
        }
        if (owner && ::lchown(path.c_str(), owner->uid, owner->gid) != 0) {
          return Status::Internal(Errno("give away", path));
        }
        if (::chmod(path.c_str(), e.mode | 0700) != 0) {
          return Status::Internal(Errno("chmod", path));
        }
        break;
      case upload::ManifestEntry::Kind::kSymlink:
        if (::symlink(e.target.c_str(), path.c_str()) != 0) {
          return Status::Internal(Errno("create the symlink", path));
        }
        if (owner && ::lchown(path.c_str(), owner->uid, owner->gid) != 0) {
          return Status::Internal(Errno("give away", path));
        }
        break;
      case upload::ManifestEntry::Kind::kFile:
        BERTH_RETURN_IF_ERROR(MakeFile(e, path, blob_path(e.digest), owner));
        break;
    }
  }
  // Last, the top: until now only root could enter it.
  if (owner && ::chown(dest.c_str(), owner->uid, owner->gid) != 0) {
    return Status::Internal(Errno("give away", dest));
  }
  return Status::Ok();
}

NodeUploads::NodeUploads(std::string dir, int64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string NodeUploads::PathOf(const std::string& digest) const {
  return dir_ + "/" + digest.substr(0, 2) + "/" + digest;
}

int64_t NodeUploads::cached_bytes() {
  MutexLock lock(mu_);
  return total_;
}

void NodeUploads::LoadIndex() {
  if (loaded_) return;
  loaded_ = true;
  std::error_code ec;
  std::filesystem::create_directories(dir_ + "/partial", ec);
  ::chmod(dir_.c_str(), 0700);
  std::filesystem::remove_all(dir_ + "/partial", ec);  // pieces of an earlier run: fetched again
  std::filesystem::create_directories(dir_ + "/partial", ec);
  for (const auto& sub : std::filesystem::directory_iterator(dir_, ec)) {
    if (!sub.is_directory() || sub.path().filename() == "partial") continue;
    for (const auto& f : std::filesystem::directory_iterator(sub.path(), ec)) {
      std::string name = f.path().filename().string();
      if (!upload::IsDigest(name)) continue;
      int64_t size = static_cast<int64_t>(f.file_size(ec));
      index_[name] = Cached{size, 0};
      total_ += size;
    }
  }
}

Result<NodeUploads::Built> NodeUploads::Build(AgentConnection& conn, const BlobFetch& base,
                                              const std::string& manifest_digest,
                                              const std::string& dest, std::optional<Owner> owner,
                                              const std::function<bool()>& cancelled) {
  MutexLock lock(mu_);
  LoadIndex();
  Built built;
  // The manifest first (its size is unknown until it comes: -1).
  auto fetched = Fetch(conn, base, {{manifest_digest, -1}}, cancelled);
  if (!fetched.ok()) return fetched.status();
  built.fetched_bytes += *fetched;
  auto text = ReadFile(PathOf(manifest_digest));
  if (!text) return Status::Internal("cannot read the cached manifest " + manifest_digest);
  // The node's limits are the widest a server allows; the server checked the user's.
  upload::ManifestLimits limits{
      .max_total_bytes = INT64_MAX, .max_entries = INT64_MAX, .max_file_bytes = INT64_MAX};
  auto manifest = upload::ParseManifest(*text, limits);
  if (!manifest.ok())
    return Status::Internal("upload " + manifest_digest + ": " + manifest.status().message());
  std::map<std::string, int64_t> wanted = {{manifest_digest, 0}};
  for (const upload::ManifestEntry& e : manifest->entries) {
    if (e.kind != upload::ManifestEntry::Kind::kFile) continue;
    wanted[e.digest] = e.size;
    built.files += 1;
    built.bytes += e.size;
  }
  fetched = Fetch(conn, base, wanted, cancelled);
  if (!fetched.ok()) return fetched.status();
  built.fetched_bytes += *fetched;
  for (const auto& [digest, size] : wanted) index_[digest].last_use = ++uses_;
  BERTH_RETURN_IF_ERROR(Materialize(
      *manifest, dest, [this](const std::string& d) { return PathOf(d); }, owner));
  Evict(wanted);
  return built;
}

Result<int64_t> NodeUploads::Fetch(AgentConnection& conn, const BlobFetch& base,
                                   const std::map<std::string, int64_t>& wanted,
                                   const std::function<bool()>& cancelled) {
  int64_t fetched = 0;
  while (true) {
    if (cancelled && cancelled()) {
      return Status::Unavailable("the fetch of the job's uploads was stopped");
    }
    BlobFetch fetch = base;
    for (const auto& [digest, size] : wanted) {
      if (index_.count(digest)) continue;
      struct stat st;
      int64_t have = ::stat((dir_ + "/partial/" + digest).c_str(), &st) == 0 ? st.st_size : 0;
      fetch.want.emplace_back(digest, have);
      if (fetch.want.size() >= kWantPerFetch) break;
    }
    if (fetch.want.empty()) return fetched;
    auto body = conn.FetchBlobs(fetch);
    if (!body.ok()) return body.status();
    auto frames = upload::ParseFrames(*body);
    if (!frames.ok()) return frames.status();
    if (frames->empty()) return Status::Internal("the server sent none of the blobs asked for");
    for (const upload::BlobFrame& f : *frames) {
      auto size = wanted.find(f.digest);
      if (size == wanted.end()) return Status::Internal("the server sent an unasked blob");
      if (f.data.empty() && size->second >= 0 && f.offset < size->second) {
        // The server has no more of it: asking again would bring nothing, for ever.
        ::unlink((dir_ + "/partial/" + f.digest).c_str());
        return Status::Invalid(fmt::format(
            "blob {} ends after {} bytes, but its manifest says {}: the upload is incomplete "
            "(upload the workdir again)",
            f.digest, f.offset, size->second));
      }
      BERTH_RETURN_IF_ERROR(Store(f.digest, f.offset, f.data, size->second));
      fetched += static_cast<int64_t>(f.data.size());
    }
  }
}

Status NodeUploads::Store(const std::string& digest, int64_t offset, std::string_view data,
                          int64_t size) {
  std::string partial = dir_ + "/partial/" + digest;
  int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal(Errno("create", partial));
  Status st;
  if (::pwrite(fd, data.data(), data.size(), offset) != static_cast<ssize_t>(data.size())) {
    st = Status::Internal(Errno("write", partial));
  }
  // A blob of unknown size (-1: a manifest) is complete once its digest is right, or wrong when
  // the server has no more of it to send.
  const bool unknown = size < 0;
  if (st.ok() && (unknown || offset + static_cast<int64_t>(data.size()) >= size)) {
    ::lseek(fd, 0, SEEK_SET);
    auto hashed = upload::Sha256OfFd(fd, partial);
    if (!hashed.ok()) {
      st = hashed.status();
    } else if (hashed->first != digest && unknown && !data.empty()) {
      // more to come
    } else if (hashed->first != digest) {
      st = Status::Internal(
          fmt::format("blob {} came with digest {}: corrupted on the way", digest, hashed->first));
      ::unlink(partial.c_str());
    } else {
      std::string to = PathOf(digest);
      ::mkdir(to.substr(0, to.rfind('/')).c_str(), 0700);
      if (::rename(partial.c_str(), to.c_str()) != 0) {
        st = Status::Internal(Errno("keep", to));
      } else {
        index_[digest] = Cached{hashed->second, ++uses_};
        total_ += hashed->second;
      }
    }
  }
  ::close(fd);
  return st;
}

void NodeUploads::Evict(const std::map<std::string, int64_t>& keep) {
  if (total_ <= max_bytes_) return;
  std::vector<std::pair<uint64_t, std::string>> by_use;
  for (const auto& [digest, c] : index_) {
    if (!keep.count(digest)) by_use.emplace_back(c.last_use, digest);
  }
  std::sort(by_use.begin(), by_use.end());
  for (const auto& [use, digest] : by_use) {
    if (total_ <= max_bytes_ * 8 / 10) break;
    ::unlink(PathOf(digest).c_str());
    total_ -= index_[digest].size;
    index_.erase(digest);
  }
}

}  // namespace berth
