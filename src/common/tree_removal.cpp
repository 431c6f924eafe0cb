// Removing a tree without following links (common/tree_removal.h).
#include "common/tree_removal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace berth {
namespace {

constexpr int kMaxDepth = 256;

using Hook = std::function<void(const std::string&)>;

// Removes what the directory open as `dir` (on device `dev`, at `path`) holds, then closes `dir`.
// Answers whether it is empty now.
bool EmptyDir(int dir, dev_t dev, const std::string& path, int depth, const Hook& before_open) {
  DIR* d = ::fdopendir(dir);
  if (d == nullptr) {
    ::close(dir);
    return false;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  const int fd = ::dirfd(d);
  bool emptied = true;
  for (const std::string& name : names) {
    if (::unlinkat(fd, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      emptied = false;
      continue;
    }
    if (before_open) before_open(path + "/" + name);
    const int sub = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      // Not a directory (any more): a link swapped in meanwhile, removed as a link.
      if (::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) emptied = false;
      continue;
    }
    struct stat st {};
    if (::fstat(sub, &st) != 0 || st.st_dev != dev || depth >= kMaxDepth) {
      ::close(sub);  // another file system (a mount), or too deep: left as it is
      emptied = false;
      continue;
    }
    if (!EmptyDir(sub, dev, path + "/" + name, depth + 1, before_open)) emptied = false;
    if (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) emptied = false;
  }
  ::closedir(d);
  return emptied;
}

}  // namespace

bool RemoveTreeNoFollow(const std::string& path, const Hook& before_open) {
  const size_t slash = path.find_last_of('/');
  const std::string parent =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") return false;
  const int at = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return errno == ENOENT;
  bool gone = false;
  struct stat st {};
  if (::fstatat(at, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    gone = errno == ENOENT;
  } else if (!S_ISDIR(st.st_mode)) {
    gone = ::unlinkat(at, base.c_str(), 0) == 0 || errno == ENOENT;
  } else {
    const int dir = ::openat(at, base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir >= 0) {
      EmptyDir(dir, st.st_dev, path, 0, before_open);
      gone = ::unlinkat(at, base.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT;
    } else if (errno == ELOOP || errno == ENOTDIR) {
      gone = ::unlinkat(at, base.c_str(), 0) == 0 || errno == ENOENT;
    }
  }
  ::close(at);
  return gone;
}

}  // namespace berth
