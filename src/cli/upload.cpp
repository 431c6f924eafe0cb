// Uploading a local tree for a job (cli/upload.h).
#include "cli/upload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "common/json_util.h"
#include "upload/blob_frames.h"
#include "upload/manifest.h"
#include "upload/tree_walk.h"

namespace berth::cli {
namespace {

// Says how far an upload got, on stderr: nothing in its first second (most uploads are done by
// then; BERTH_UPLOAD_PROGRESS_AFTER_MS sets another wait), then at most once a second on a
// terminal (one line, rewritten) and once every 5 s elsewhere (a log).
class UploadProgress {
 public:
  explicit UploadProgress(std::string what)
      : what_(std::move(what)), tty_(::isatty(STDERR_FILENO) == 1) {
    if (const char* after = std::getenv("BERTH_UPLOAD_PROGRESS_AFTER_MS"); after && *after) {
      quiet_ = std::chrono::milliseconds(std::max(0, std::atoi(after)));
    }
  }
  ~UploadProgress() { End(); }
  UploadProgress(const UploadProgress&) = delete;
  UploadProgress& operator=(const UploadProgress&) = delete;

  // A new phase: "hashing", "uploading"; `total` bytes to go through.
  void Phase(std::string verb, int64_t total) {
    verb_ = std::move(verb);
    total_ = total;
    done_ = 0;
    last_ = {};  // a new phase says itself at once (past the quiet start)
  }
  void Done(int64_t done) {
    done_ = done;
    const auto now = std::chrono::steady_clock::now();
    if (now - started_ < quiet_) return;
    if (now - last_ < (tty_ ? std::chrono::seconds(1) : std::chrono::seconds(5))) return;
    last_ = now;
    const double percent = total_ > 0 ? 100.0 * static_cast<double>(done_) / total_ : 100.0;
    const std::string line =
        fmt::format("{}: {} {} of {} ({:.0f}%)", what_, verb_, upload::HumanBytes(done_),
                    upload::HumanBytes(total_), percent);
    if (tty_) {
      fmt::print(stderr, "\r{}\033[K", line);
      open_line_ = true;
    } else {
      fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
  }
  void Add(int64_t bytes) { Done(done_ + bytes); }
  // Ends the rewritten line, if one was written.
  void End() {
    if (!open_line_) return;
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
    open_line_ = false;
  }

 private:
  const std::string what_;
  const bool tty_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::milliseconds quiet_{1000};
  std::chrono::steady_clock::time_point last_{};
  std::string verb_;
  int64_t total_ = 0;
  int64_t done_ = 0;
  bool open_line_ = false;
};

// Blobs up to this size go many to a request, up to kBatchBytes a request; bigger ones go in
// pieces of kPieceBytes (well under the server's request limit).
constexpr int64_t kBatchBytes = 8 << 20;
constexpr int64_t kPieceBytes = 16 << 20;
// Digests asked about per request (the server's limit, server/uploads.h).
constexpr size_t kAskPerCall = 20'000;

// Appends the frame of blob `digest` (the `size` bytes of the file at `path`) to `batch`, reading
// through `buf` (kBatchBytes, not zeroed first).
Status AppendFile(std::string& batch, char* buf, const std::string& digest, const std::string& path,
                  int64_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Invalid(fmt::format("cannot read {}: {}", path, strerror(errno)));
  size_t got = 0;
  while (got < static_cast<size_t>(size)) {
    ssize_t n = ::read(fd, buf + got, static_cast<size_t>(size) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != static_cast<size_t>(size)) {
    return Status::Invalid(fmt::format("{} changed while it was uploaded; submit again", path));
  }
  upload::AppendFrame(batch, digest, 0, std::string_view(buf, got));
  return Status::Ok();
}

// Sends batches handed to it on a thread of its own, so that the next batch is read while the
// server stores the last (at most two wait). The connection is its alone until Finish().
class BatchSender {
 public:
  explicit BatchSender(Connection& conn) : conn_(conn), thread_([this] { Run(); }) {}
  ~BatchSender() { Finish(); }
  // Hands `batch` over (it is left empty); false once a send failed (Finish says why).
  bool Send(std::string& batch) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < 2 || !status_.ok(); });
    if (!status_.ok()) return false;
    queue_.push_back(std::move(batch));
    batch.clear();
    cv_.notify_all();
    return true;
  }
  // Waits for every batch handed over; the first failure, if any.
  Status Finish() {
    {
      std::unique_lock lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  void Run() {
    while (true) {
      std::string batch;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        batch = std::move(queue_.front());
        queue_.pop_front();
        cv_.notify_all();
      }
      auto res = conn_.Call("POST", "/v1/uploads/blobs", batch, 300'000);
      if (!res.ok()) {
        std::unique_lock lock(mu_);
        status_ = res.status();
        queue_.clear();
        cv_.notify_all();
        return;
      }
    }
  }

  Connection& conn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool done_ = false;
  Status status_;
  std::thread thread_;
};

// Which of `digests` the server lacks from us.
Result<std::vector<std::string>> AskMissing(Connection& conn,
                                            const std::vector<std::string>& digests) {
  std::vector<std::string> missing;
  for (size_t at = 0; at < digests.size(); at += kAskPerCall) {
    json::array part;
    for (size_t i = at; i < std::min(digests.size(), at + kAskPerCall); ++i) {
      part.emplace_back(digests[i]);
    }
    auto res = conn.Call("POST", "/v1/uploads/missing",
                         SerializeJson(json::object{{"digests", std::move(part)}}));
    if (!res.ok()) return res.status();
    for (const json::value& d : res->as_object().at("missing").as_array()) {
      missing.emplace_back(d.as_string());
    }
  }
  return missing;
}

// Sends one big blob in pieces, from where the server's copy of it ends.
Status SendInPieces(Connection& conn, const std::string& digest, const std::string& path,
                    int64_t size, UploadProgress& progress) {
  auto at = conn.Call("GET", "/v1/uploads/blobs/" + digest + "/received");
  if (!at.ok()) return at.status();
  int64_t offset = AsInt(at->as_object().at("received")).value_or(0);
  if (offset > size) offset = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Invalid(fmt::format("cannot read {}: {}", path, strerror(errno)));
  std::string piece;
  Status st;
  do {
    piece.resize(static_cast<size_t>(std::min(kPieceBytes, size - offset)));
    ssize_t n = ::pread(fd, piece.data(), piece.size(), offset);
    if (n < 0 || static_cast<size_t>(n) != piece.size()) {
      st = Status::Invalid(fmt::format("{} changed while it was uploaded; submit again", path));
      break;
    }
    bool last = offset + n == size;
    auto res = conn.Call("PUT",
                         fmt::format("/v1/uploads/blobs/{}?offset={}&size={}&last={}", digest,
                                     offset, size, last ? 1 : 0),
                         piece, 300'000);
    if (!res.ok()) {
      st = res.status();
      break;
    }
    offset += n;
    progress.Add(n);
  } while (offset < size);
  ::close(fd);
  return st;
}

// Sends the blobs `missing` (small ones batched), counting what went into `report`.
Status SendBlobs(Connection& conn, const upload::HashedTree& tree,
                 const std::vector<std::string>& missing, UploadReport& report,
                 UploadProgress& progress) {
  std::map<std::string, int64_t> size_of;
  for (const upload::ManifestEntry& e : tree.manifest.entries) {
    if (e.kind == upload::ManifestEntry::Kind::kFile) size_of[e.digest] = e.size;
  }
  int64_t to_send = 0;
  for (const std::string& digest : missing) to_send += size_of.at(digest);
  progress.Phase("uploading", to_send);
  // Small blobs first, batched and sent on the sender's thread; then the big ones in pieces.
  std::vector<std::string> big;
  {
    BatchSender sender(conn);
    std::unique_ptr<char[]> buf(new char[kBatchBytes]);
    std::string batch;
    batch.reserve(2 * kBatchBytes);
    for (const std::string& digest : missing) {
      int64_t size = size_of.at(digest);
      report.sent_files += 1;
      report.sent_bytes += size;
      if (size > kBatchBytes) {
        big.push_back(digest);
        continue;
      }
      Status st = AppendFile(batch, buf.get(), digest, tree.file_of_digest.at(digest), size);
      progress.Add(size);
      if (!st.ok()) {
        sender.Finish();
        return st;
      }
      if (static_cast<int64_t>(batch.size()) >= kBatchBytes && !sender.Send(batch)) break;
    }
    if (!batch.empty()) sender.Send(batch);
    BERTH_RETURN_IF_ERROR(sender.Finish());
  }
  for (const std::string& digest : big) {
    BERTH_RETURN_IF_ERROR(
        SendInPieces(conn, digest, tree.file_of_digest.at(digest), size_of.at(digest), progress));
  }
  return Status::Ok();
}

// A tree of one file: the file, named by its own name.
Result<upload::HashedTree> HashOneFile(const std::string& path) {
  upload::Walk walk;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::Invalid(fmt::format("{}: {}", path, strerror(errno)));
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  upload::WalkedEntry e{.kind = upload::ManifestEntry::Kind::kFile,
                        .path = std::filesystem::path(path).filename().string(),
                        .mode = st.st_mode & 0777,
                        .size = st.st_size};
  walk.entries.push_back(e);
  return upload::HashTree(dir.empty() ? "." : dir, walk, "");
}

// Walks and hashes the directory `root`, checking the limits from the walk's sizes first: a tree
// over them is not read at all.
Result<upload::HashedTree> HashDirectory(const std::string& root,
                                         const upload::ManifestLimits& limits,
                                         const std::string& what, UploadProgress& progress) {
  auto walk = upload::WalkTree(root, false, limits.max_entries);
  if (!walk.ok()) return walk.status();
  upload::Manifest sizes;
  for (const upload::WalkedEntry& e : walk->entries) {
    sizes.entries.push_back({.kind = e.kind, .path = e.path, .size = e.size});
  }
  BERTH_RETURN_IF_ERROR(upload::CheckManifestLimits(sizes, limits, what));
  progress.Phase("hashing", sizes.TotalBytes());
  return upload::HashTree(root, *walk, upload::StatCacheFile(UploadCacheDir(), root),
                          [&](int64_t done) { progress.Done(done); });
}

}  // namespace

std::string UploadCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/berth/uploads";
  }
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/berth/uploads";
}

Result<UploadReport> UploadTree(Connection& conn, const std::string& path, const std::string& what,
                                bool verbose) {
  auto started = std::chrono::steady_clock::now();
  // The batches and requests are megabytes each: keep freed ones for the next rather than give
  // them back to the kernel and fault them in again (a third of the upload's CPU time before).
  ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 512 << 20);
  std::error_code ec;
  std::string root = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    return Status::Invalid(fmt::format("{}: {}: {}", what, path, strerror(errno)));
  }
  upload::ManifestLimits limits;
  UploadProgress progress(what);
  Result<upload::HashedTree> tree =
      S_ISDIR(st.st_mode) ? HashDirectory(root, limits, what, progress) : HashOneFile(root);
  if (!tree.ok()) {
    if (tree.status().code() == Code::kTooLarge) return tree.status();  // names `what` already
    return Status(tree.status().code(), what + ": " + tree.status().message());
  }
  BERTH_RETURN_IF_ERROR(upload::CheckManifestLimits(tree->manifest, limits, what));

  UploadReport report;
  report.files = tree->manifest.Files();
  report.bytes = tree->manifest.TotalBytes();
  std::vector<std::string> digests;
  for (const auto& [digest, file] : tree->file_of_digest) digests.push_back(digest);
  auto missing = AskMissing(conn, digests);
  if (!missing.ok()) return missing.status();
  BERTH_RETURN_IF_ERROR(SendBlobs(conn, *tree, *missing, report, progress));
  progress.End();
  auto registered =
      conn.Call("POST", "/v1/uploads/manifests", upload::SerializeManifest(tree->manifest));
  if (!registered.ok())
    return Status(registered.status().code(), what + ": " + registered.status().message());
  report.manifest = std::string(registered->as_object().at("manifest").as_string());
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (verbose || report.seconds > 1.0) {
    fmt::print(stderr, "{}: {} files ({}), {} changed ({}) uploaded in {:.1f} s\n", what,
               report.files, upload::HumanBytes(report.bytes), report.sent_files,
               upload::HumanBytes(report.sent_bytes), report.seconds);
  }
  return report;
}

}  // namespace berth::cli
