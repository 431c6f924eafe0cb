#include "server/log_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace berth {

LogStore::LogStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
}

std::string LogStore::PathOf(int64_t job, int attempt, int rank) const {
  if (rank == kAllRanks) return fmt::format("{}/{}/attempt-{}.all.log", dir_, job, attempt);
  return fmt::format("{}/{}/attempt-{}.rank-{}.log", dir_, job, attempt, rank);
}

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

}  // namespace

int64_t LogStore::Size(int64_t job, int attempt, int rank) const {
  std::lock_guard lock(mu_);
  auto it = sizes_.find({job, attempt, rank});
  if (it != sizes_.end()) return it->second;
  struct stat st {};
  if (::stat(PathOf(job, attempt, rank).c_str(), &st) != 0) return 0;
  return st.st_size;
}

Result<int64_t> LogStore::Append(int64_t job, int attempt, int rank, int64_t offset,
                                 std::string_view data, const std::string& prefix) {
  std::lock_guard lock(mu_);
  std::string path = PathOf(job, attempt, rank);
  auto key = std::make_tuple(job, attempt, rank);
  auto it = sizes_.find(key);
  int64_t size;
  if (it != sizes_.end()) {
    size = it->second;
  } else {
    struct stat st {};
    size = ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
  }
  if (offset > size)
    return Status::Conflict(fmt::format("log gap: have {} bytes, got data at {}", size, offset));
  int64_t skip = size - offset;
  if (skip >= static_cast<int64_t>(data.size())) return size;
  data.remove_prefix(static_cast<size_t>(skip));
  std::error_code ec;
  std::filesystem::create_directories(fmt::format("{}/{}", dir_, job), ec);
  BERTH_RETURN_IF_ERROR(AppendToFile(path, data));
  if (!prefix.empty()) {
    std::string lines;
    bool& mid_line = mid_line_[key];
    for (char c : data) {
      if (!mid_line) lines += prefix;
      lines += c;
      mid_line = c != '\n';
    }
    BERTH_RETURN_IF_ERROR(AppendToFile(PathOf(job, attempt, kAllRanks), lines));
    sizes_.erase({job, attempt, kAllRanks});
  }
  size += static_cast<int64_t>(data.size());
  sizes_[key] = size;
  return size;
}

std::string LogStore::Read(int64_t job, int attempt, int rank, int64_t offset,
                           size_t max_bytes) const {
  std::string path = PathOf(job, attempt, rank);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out(max_bytes, '\0');
  ssize_t n = ::pread(fd, out.data(), max_bytes, offset);
  ::close(fd);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

}  // namespace berth
