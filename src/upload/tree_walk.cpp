// Walking a local tree with its ignore files, and hashing it through a stat cache
// (upload/tree_walk.h).
#include "upload/tree_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "common/files.h"
#include "upload/digest.h"
#include "upload/ignore_rules.h"

namespace berth::upload {
namespace {

constexpr const char* kSkyIgnore = ".skyignore";
constexpr const char* kGitIgnore = ".gitignore";

// `name` inside `dir` (relative to the root; "" is the root).
std::string ChildPath(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// What a directory entry that is not a file, directory or symlink is called in a reason.
std::string SpecialKind(mode_t mode) {
  if (S_ISSOCK(mode)) return "a socket: not uploaded";
  if (S_ISFIFO(mode)) return "a named pipe: not uploaded";
  return "a device: not uploaded";
}

// Reads the ignore file `name` in `dir` (relative to root) into `rules`, if it is there.
void AddIgnoreFile(const std::string& root, const std::string& dir, const std::string& name,
                   IgnoreRules& rules) {
  std::string rel = ChildPath(dir, name);
  std::optional<std::string> text = ReadFile(root + "/" + rel);
  if (text) rules.AddFile(dir, *text, rel);
}

class Walker {
 public:
  Walker(const std::string& root, bool keep_left_out, int64_t max_entries)
      : root_(root), keep_left_out_(keep_left_out), max_entries_(max_entries) {}

  Result<Walk> Run() {
    struct stat st;
    if (::stat(root_.c_str(), &st) != 0) {
      return Status::Invalid(fmt::format("workdir {}: {}", root_, strerror(errno)));
    }
    if (!S_ISDIR(st.st_mode)) return Status::Invalid("workdir " + root_ + ": not a directory");
    sky_ = ::access((root_ + "/" + kSkyIgnore).c_str(), F_OK) == 0;
    if (sky_) {
      AddIgnoreFile(root_, "", kSkyIgnore, rules_);
    } else {
      AddIgnoreFile(root_, "", ".git/info/exclude", rules_);
    }
    std::vector<std::string> pending = {""};
    while (!pending.empty()) {
      std::string dir = std::move(pending.back());
      pending.pop_back();
      BERTH_RETURN_IF_ERROR(WalkDir(dir, pending));
    }
    return std::move(walk_);
  }

 private:
  void Leave(std::string path, std::string why) {
    if (keep_left_out_) walk_.left_out.push_back({std::move(path), std::move(why)});
  }

  // Lists `dir`'s entries into the walk, queuing its subdirectories on `pending`.
  Status WalkDir(const std::string& dir, std::vector<std::string>& pending) {
    std::string abs = dir.empty() ? root_ : root_ + "/" + dir;
    if (!sky_) AddIgnoreFile(root_, dir, kGitIgnore, rules_);
    DIR* d = ::opendir(abs.c_str());
    if (!d) {
      Leave(dir + "/", std::string("cannot read: ") + strerror(errno));
      return Status::Ok();
    }
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
    }
    int dfd = ::dirfd(d);
    std::sort(names.begin(), names.end());
    Status st;
    for (const std::string& name : names) {
      st = Visit(dfd, dir, name, pending);
      if (!st.ok()) break;
    }
    ::closedir(d);
    return st;
  }

  Status Visit(int dfd, const std::string& dir, const std::string& name,
               std::vector<std::string>& pending) {
    std::string path = ChildPath(dir, name);
    struct stat st;
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      Leave(path, std::string("cannot stat: ") + strerror(errno));
      return Status::Ok();
    }
    bool is_dir = S_ISDIR(st.st_mode);
    if (!rules_.empty()) {
      IgnoreRules::Verdict v = rules_.Match(path, is_dir);
      if (v.ignored) {
        ++walk_.ignored;
        Leave(is_dir ? path + "/" : path, v.rule);
        return Status::Ok();
      }
    }
    WalkedEntry e;
    e.path = path;
    e.mode = st.st_mode & 0777;
    e.mtime_ns = Nanos(st.st_mtim);
    e.ctime_ns = Nanos(st.st_ctim);
    e.inode = st.st_ino;
    if (is_dir) {
      e.kind = ManifestEntry::Kind::kDir;
      pending.push_back(path);
    } else if (S_ISREG(st.st_mode)) {
      e.kind = ManifestEntry::Kind::kFile;
      e.size = st.st_size;
    } else if (S_ISLNK(st.st_mode)) {
      e.kind = ManifestEntry::Kind::kSymlink;
      std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
      ssize_t n = ::readlinkat(dfd, name.c_str(), target.data(), target.size());
      if (n <= 0) {
        Leave(path, std::string("cannot read the link: ") + strerror(errno));
        return Status::Ok();
      }
      target.resize(static_cast<size_t>(n));
      e.target = std::move(target);
    } else {
      Leave(path, SpecialKind(st.st_mode));
      return Status::Ok();
    }
    walk_.entries.push_back(std::move(e));
    if (static_cast<int64_t>(walk_.entries.size()) > max_entries_) {
      return Status::TooLarge(fmt::format(
          "workdir {} holds more than {} files and directories (the walk was in {}/); leave "
          "some out with a .gitignore or .skyignore, or use a smaller workdir",
          root_, max_entries_, dir.empty() ? "." : dir));
    }
    return Status::Ok();
  }

  std::string root_;
  bool keep_left_out_;
  int64_t max_entries_;
  bool sky_ = false;
  IgnoreRules rules_;
  Walk walk_;
};

// One remembered digest: the file's identity when it was read.
struct CachedDigest {
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  std::string digest;
};

// The cache file: one line per file, "size mtime_ns ctime_ns inode digest path" (paths with a
// newline are not cached).
std::unordered_map<std::string, CachedDigest> LoadCache(const std::string& file) {
  std::unordered_map<std::string, CachedDigest> cache;
  if (file.empty()) return cache;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    CachedDigest c;
    std::string path;
    if (!(fields >> c.size >> c.mtime_ns >> c.ctime_ns >> c.inode >> c.digest)) continue;
    if (fields.get() != ' ' || !std::getline(fields, path) || !IsDigest(c.digest)) continue;
    cache.emplace(std::move(path), std::move(c));
  }
  return cache;
}

void SaveCache(const std::string& file, const Walk& walk, const Manifest& manifest) {
  if (file.empty()) return;
  std::unordered_map<std::string_view, const WalkedEntry*> by_path;
  for (const WalkedEntry& e : walk.entries) by_path.emplace(e.path, &e);
  std::string text;
  for (const ManifestEntry& m : manifest.entries) {
    if (m.kind != ManifestEntry::Kind::kFile || m.path.find('\n') != std::string::npos) continue;
    const WalkedEntry& e = *by_path.at(m.path);
    text += fmt::format("{} {} {} {} {} {}\n", e.size, e.mtime_ns, e.ctime_ns, e.inode, m.digest,
                        m.path);
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path(), ec);
  WriteFileAtomic(file, text, /*sync=*/false, 0600);
}

}  // namespace

Result<Walk> WalkTree(const std::string& root, bool keep_left_out, int64_t max_entries) {
  return Walker(root, keep_left_out, max_entries).Run();
}

Result<HashedTree> HashTree(const std::string& root, const Walk& walk,
                            const std::string& cache_file,
                            const std::function<void(int64_t)>& hashed) {
  std::unordered_map<std::string, CachedDigest> cache = LoadCache(cache_file);
  HashedTree out;
  int64_t done = 0;
  out.manifest.entries.reserve(walk.entries.size());
  for (const WalkedEntry& w : walk.entries) {
    ManifestEntry m{.kind = w.kind, .path = w.path, .mode = w.mode};
    if (w.kind == ManifestEntry::Kind::kSymlink) {
      m.mode = 0777;
      m.target = w.target;
    } else if (w.kind == ManifestEntry::Kind::kFile) {
      std::string abs = root + "/" + w.path;
      auto hit = cache.find(w.path);
      if (hit != cache.end() && hit->second.size == w.size && hit->second.mtime_ns == w.mtime_ns &&
          hit->second.ctime_ns == w.ctime_ns && hit->second.inode == w.inode) {
        m.digest = hit->second.digest;
        m.size = w.size;
      } else {
        int fd = ::open(abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
          return Status::Invalid(fmt::format("cannot read {}: {}", abs, strerror(errno)));
        }
        auto digest = Sha256OfFd(fd, abs);
        ::close(fd);
        if (!digest.ok()) return digest.status();
        m.digest = digest->first;
        m.size = digest->second;
        out.bytes_read += m.size;
      }
      out.file_of_digest.emplace(m.digest, std::move(abs));
      done += m.size;
      if (hashed) hashed(done);
    }
    out.manifest.entries.push_back(std::move(m));
  }
  SaveCache(cache_file, walk, out.manifest);
  return out;
}

std::string StatCacheFile(const std::string& cache_dir, const std::string& root) {
  return cache_dir + "/" + Sha256Hex(root).substr(0, 32);
}

}  // namespace berth::upload
