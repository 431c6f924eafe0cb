#include "server/log_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace berth {
namespace {

Status AppendToFile(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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
  }

  Result<int64_t> Size(const LogKey& key) override {
    struct stat st {};
    if (::stat(PathOf(key).c_str(), &st) != 0) return int64_t{0};
    return static_cast<int64_t>(st.st_size);
  }

  Status Append(const LogKey& key, int64_t /*at*/, std::string_view data) override {
    std::error_code ec;
    std::filesystem::create_directories(fmt::format("{}/{}", dir_, key.job), ec);
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

Result<int64_t> LogStore::SizeLocked(const LogKey& key) const {
  auto it = sizes_.find({key.job, key.attempt, key.rank});
  if (it != sizes_.end()) return it->second;
  Result<int64_t> size = bytes_->Size(key);
  if (size.ok()) sizes_[{key.job, key.attempt, key.rank}] = *size;
  return size;
}

int64_t LogStore::Size(int64_t job, int attempt, int rank) const {
  std::lock_guard lock(mu_);
  Result<int64_t> size = SizeLocked(LogKey{job, attempt, rank});
  return size.ok() ? *size : 0;
}

Result<int64_t> LogStore::Append(int64_t job, int attempt, int rank, int64_t offset,
                                 std::string_view data, const std::string& prefix) {
  std::lock_guard lock(mu_);
  const LogKey key{job, attempt, rank};
  Result<int64_t> known = SizeLocked(key);
  if (!known.ok()) return known.status();
  int64_t size = *known;
  if (offset > size)
    return Status::Conflict(fmt::format("log gap: have {} bytes, got data at {}", size, offset));
  int64_t skip = size - offset;
  if (skip >= static_cast<int64_t>(data.size())) return size;
  data.remove_prefix(static_cast<size_t>(skip));
  BERTH_RETURN_IF_ERROR(bytes_->Append(key, size, data));
  size += static_cast<int64_t>(data.size());
  sizes_[{job, attempt, rank}] = size;
  if (!prefix.empty()) {
    std::string lines;
    bool& mid_line = mid_line_[{job, attempt, rank}];
    for (char c : data) {
      if (!mid_line) lines += prefix;
      lines += c;
      mid_line = c != '\n';
    }
    const LogKey all{job, attempt, kAllRanks};
    Result<int64_t> all_size = SizeLocked(all);
    if (!all_size.ok()) return all_size.status();
    Status st = bytes_->Append(all, *all_size, lines);
    sizes_.erase({job, attempt, kAllRanks});
    BERTH_RETURN_IF_ERROR(st);
  }
  return size;
}

std::string LogStore::Read(int64_t job, int attempt, int rank, int64_t offset,
                           size_t max_bytes) const {
  return bytes_->Read(LogKey{job, attempt, rank}, offset, max_bytes);
}

}  // namespace berth
