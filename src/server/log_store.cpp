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
    if (key.rank < LogStore::kAllRanks) {              // a time index
      const int rank = LogStore::TimesRank(key.rank);  // the inverse of itself
      if (rank == LogStore::kAllRanks)
        return fmt::format("{}/{}/attempt-{}.all.times", dir_, key.job, key.attempt);
      return fmt::format("{}/{}/attempt-{}.rank-{}.times", dir_, key.job, key.attempt, rank);
    }
    if (key.rank == LogStore::kAllRanks) {
      return fmt::format("{}/{}/attempt-{}.all.log", dir_, key.job, key.attempt);
    }
    return fmt::format("{}/{}/attempt-{}.rank-{}.log", dir_, key.job, key.attempt, key.rank);
  }

  std::string dir_;
};

}  // namespace

LogStore::LogStore(std::string dir, const Clock& clock)
    : bytes_(std::make_unique<FileLogBytes>(std::move(dir))), clock_(clock) {}

LogStore::LogStore(std::unique_ptr<LogBytes> bytes, const Clock& clock)
    : bytes_(std::move(bytes)), clock_(clock) {}

namespace {

std::string EncodeStamp(int64_t offset, TimeMs ms) {
  std::string out(LogStore::kStampBytes, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((static_cast<uint64_t>(offset) >> (8 * i)) & 0xff);
    out[8 + i] = static_cast<char>((static_cast<uint64_t>(ms) >> (8 * i)) & 0xff);
  }
  return out;
}

int64_t DecodeInt64(std::string_view bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return static_cast<int64_t>(v);
}

// "2026-12-02T03:28:46Z ": whole seconds, as the index keeps one record a second.
std::string StampPrefix(TimeMs ms) {
  std::string t = FormatRfc3339(ms - ms % 1000);
  if (const size_t dot = t.find('.'); dot != std::string::npos) t = t.substr(0, dot) + "Z";
  return t + " ";
}

}  // namespace

void LogStore::StampLocked(const LogKey& key, Cached& log, int64_t at) {
  const LogKey times{key.job, key.attempt, TimesRank(key.rank)};
  if (!log.times_size) {
    Result<int64_t> size = bytes_->Size(times);
    if (!size.ok()) return;
    log.times_size = *size;
    if (*size >= kStampBytes && *size % kStampBytes == 0) {
      const std::string last = bytes_->Read(times, *size - kStampBytes, kStampBytes);
      if (static_cast<int64_t>(last.size()) == kStampBytes)
        log.last_stamp = DecodeInt64(last.substr(8));
    }
  }
  if (*log.times_size % kStampBytes != 0) return;
  const TimeMs now = clock_.Now();
  if (*log.times_size > 0 && log.last_stamp / 1000 == now / 1000) return;
  const int64_t times_at = *log.times_size;
  log.times_size.reset();  // asked again if this append fails part way
  if (!bytes_->Append(times, times_at, EncodeStamp(at, now)).ok()) return;
  log.times_size = times_at + kStampBytes;
  log.last_stamp = now;
}

std::vector<std::pair<int64_t, TimeMs>> LogStore::StampsCovering(const LogKey& key, int64_t offset,
                                                                 int64_t end) const {
  const LogKey times{key.job, key.attempt, TimesRank(key.rank)};
  std::vector<std::pair<int64_t, TimeMs>> out;
  Result<int64_t> size = bytes_->Size(times);
  if (!size.ok() || *size < kStampBytes) return out;
  const int64_t count = *size / kStampBytes;
  auto record = [&](int64_t i) -> std::optional<std::pair<int64_t, TimeMs>> {
    const std::string r = bytes_->Read(times, i * kStampBytes, kStampBytes);
    if (static_cast<int64_t>(r.size()) != kStampBytes) return std::nullopt;
    return std::pair{DecodeInt64(r), DecodeInt64(std::string_view(r).substr(8))};
  };
  // The last record at or before `offset` (binary search; records are in offset order).
  int64_t lo = 0, hi = count - 1, first = 0;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    auto r = record(mid);
    if (!r) return out;
    if (r->first <= offset) {
      first = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  // From there on, in blocks, until a record past `end`.
  constexpr int64_t kBlock = 256;
  for (int64_t i = first; i < count; i += kBlock) {
    const std::string block =
        bytes_->Read(times, i * kStampBytes, static_cast<size_t>(kBlock * kStampBytes));
    for (size_t k = 0; k + kStampBytes <= block.size(); k += kStampBytes) {
      const std::string_view r = std::string_view(block).substr(k, kStampBytes);
      out.emplace_back(DecodeInt64(r), DecodeInt64(r.substr(8)));
      if (out.back().first > end) return out;
    }
    if (static_cast<int64_t>(block.size()) < kBlock * kStampBytes) break;
  }
  return out;
}

std::string LogStore::ReadStamped(int64_t job, int attempt, int rank, int64_t offset,
                                  size_t max_bytes, size_t* raw_bytes) const {
  const LogKey key{job, attempt, rank};
  const std::string data = bytes_->Read(key, offset, max_bytes);
  *raw_bytes = data.size();
  if (data.empty()) return data;
  const auto stamps = StampsCovering(key, offset, offset + static_cast<int64_t>(data.size()));
  bool line_start = offset == 0 || bytes_->Read(key, offset - 1, 1) == "\n";
  std::string out;
  out.reserve(data.size() + data.size() / 8);
  size_t next = 0;  // the first stamp past the current byte
  for (size_t i = 0; i < data.size(); ++i) {
    const int64_t at = offset + static_cast<int64_t>(i);
    if (line_start) {
      while (next < stamps.size() && stamps[next].first <= at) ++next;
      if (next > 0) out += StampPrefix(stamps[next - 1].second);
    }
    out += data[i];
    line_start = data[i] == '\n';
  }
  return out;
}

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
  StampLocked(key, log, size);
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
    const int64_t all_at = (*all_log)->size;
    if (Status st = bytes_->Append(all, all_at, lines); !st.ok()) {
      cache_.Erase(all);  // its size is asked again: a failed append may have written part
      return st;
    }
    (*all_log)->size = all_at + static_cast<int64_t>(lines.size());
    StampLocked(all, **all_log, all_at);
  }
  return new_size;
}

std::string LogStore::Read(int64_t job, int attempt, int rank, int64_t offset,
                           size_t max_bytes) const {
  return bytes_->Read(LogKey{job, attempt, rank}, offset, max_bytes);
}

}  // namespace berth
