#include "server/log_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace berth {
namespace {

Status AppendToFile(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal(fmt::format("cannot open {}: {}", path, strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Status::Internal(fmt::format("cannot write {}: {}", path, strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

// One file per log under <dir>/<job>/ (one server's disk).
class FileLogBytes final : public LogBytes {
 public:
  explicit FileLogBytes(std::string dir) : dir_(std::move(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    ::chmod(dir_.c_str(), 0700);
  }

  Result<int64_t> Size(const LogKey& key) override {
    struct stat st {};
    if (::stat(PathOf(key).c_str(), &st) != 0) return int64_t{0};
    return static_cast<int64_t>(st.st_size);
  }

  Status Append(const LogKey& key, int64_t /*at*/, std::string_view data) override {
    std::string job_dir = fmt::format("{}/{}", dir_, key.job);
    if (::mkdir(job_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Internal(fmt::format("cannot create {}: {}", job_dir, strerror(errno)));
    }
    return AppendToFile(PathOf(key), data);
  }

  std::string Read(const LogKey& key, int64_t offset, size_t max_bytes) override {
    int fd = ::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    std::string out(max_bytes, '\0');
    ssize_t n = ::pread(fd, out.data(), max_bytes, offset);
    ::close(fd);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
  }

 private:
  std::string PathOf(const LogKey& key) const {
    if (key.rank == LogStore::kAllRanks) {
      return fmt::format("{}/{}/attempt-{}.all.log", dir_, key.job, key.attempt);
    }
    return fmt::format("{}/{}/attempt-{}.rank-{}.log", dir_, key.job, key.attempt, key.rank);
  }

  std::string dir_;
};

}  // namespace

LogStore::LogStore(std::string dir) : bytes_(std::make_unique<FileLogBytes>(std::move(dir))) {}

LogStore::LogStore(std::unique_ptr<LogBytes> bytes) : bytes_(std::move(bytes)) {}

Result<LogStore::Cached*> LogStore::CachedLocked(const LogKey& key) const {
  if (Cached* found = cache_.Find(key)) return found;
  Result<int64_t> size = bytes_->Size(key);
  if (!size.ok()) return size.status();
  return &cache_.Put(key, Cached{.size = *size});
}

int64_t LogStore::Size(int64_t job, int attempt, int rank) const {
  std::lock_guard lock(mu_);
  Result<Cached*> cached = CachedLocked(LogKey{job, attempt, rank});
  return cached.ok() ? (*cached)->size : 0;
}

size_t LogStore::cached() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

Result<int64_t> LogStore::Append(int64_t job, int attempt, int rank, int64_t offset,
                                 std::string_view data, const std::string& prefix) {
  std::lock_guard lock(mu_);
  const LogKey key{job, attempt, rank};
  Result<Cached*> known = CachedLocked(key);
  if (!known.ok()) return known.status();
  Cached& log = **known;
  const int64_t size = log.size;
  if (offset > size)
    return Status::Conflict(fmt::format("log gap: have {} bytes, got data at {}", size, offset));
  int64_t skip = size - offset;
  if (skip >= static_cast<int64_t>(data.size())) return size;
  data.remove_prefix(static_cast<size_t>(skip));
  bool mid_line = false;  // whether `data` continues a line (interleaved log only)
  if (!prefix.empty()) {
    if (!log.mid_line) log.mid_line = size > 0 && bytes_->Read(key, size - 1, 1) != "\n";
    mid_line = *log.mid_line;
  }
  BERTH_RETURN_IF_ERROR(bytes_->Append(key, size, data));
  log.size = size + static_cast<int64_t>(data.size());
  log.mid_line = data.back() != '\n';
  const int64_t new_size = log.size;
  if (!prefix.empty()) {
    // `log` may be evicted below: only copies are used from here on.
    std::string lines;
    for (char c : data) {
      if (!mid_line) lines += prefix;
      lines += c;
      mid_line = c != '\n';
    }
    const LogKey all{job, attempt, kAllRanks};
    Result<Cached*> all_log = CachedLocked(all);
    if (!all_log.ok()) return all_log.status();
    Status st = bytes_->Append(all, (*all_log)->size, lines);
    cache_.Erase(all);  // its size is asked again: a failed append may have written part
    BERTH_RETURN_IF_ERROR(st);
  }
  return new_size;
}

std::string LogStore::Read(int64_t job, int attempt, int rank, int64_t offset,
                           size_t max_bytes) const {
  return bytes_->Read(LogKey{job, attempt, rank}, offset, max_bytes);
}

}  // namespace berth
