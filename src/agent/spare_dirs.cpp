// SpareDirs: recycled job directories (spare_dirs.h).
#include "agent/spare_dirs.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "agent/job_account.h"
#include "common/strings.h"
#include "common/tree_removal.h"

namespace berth {

namespace {

// The files a job's directory holds; Recycle empties them, and anything else makes it remove the
// directory instead.
// (gpu_hold: agent/gpu_watch.h's, for a rank whose GPUs are sampled.)
constexpr std::string_view kJobFiles[] = {"run.json", "supervisor.pid", "events", "output.log",
                                          "gpu_hold"};

}  // namespace

bool SpareDirs::Adopt(const std::string& name) {
  if (!StartsWith(name, kPrefix)) return false;
  MutexLock lock(mu_);
  spares_.push_back(jobs_dir_ + "/" + name);
  next_ = std::max<int64_t>(next_, std::atoll(name.c_str() + kPrefix.size()) + 1);
  return true;
}

bool SpareDirs::Take(const std::string& dir) {
  std::string spare;
  {
    MutexLock lock(mu_);
    if (spares_.empty()) return false;
    spare = std::move(spares_.back());
    spares_.pop_back();
  }
  // Over an existing job directory (a launch sent again) the rename fails, and the spare goes.
  if (::rename(spare.c_str(), dir.c_str()) == 0) return true;
  RemoveTreeNoFollow(spare);
  return false;
}

void SpareDirs::Recycle(const std::string& dir, bool reusable) {
  // The work dir is its user's: removed as them; what they cannot remove themselves (files of
  // another uid, from a rootless container) is removed below without following any link.
  RemoveTreeAsOwner(dir + "/work");
  bool keep = reusable && size() < kMaxSpares && Empty(dir);
  if (keep) {
    MutexLock lock(mu_);
    std::string spare = fmt::format("{}/{}{}", jobs_dir_, kPrefix, next_++);
    if (::rename(dir.c_str(), spare.c_str()) == 0) {
      spares_.push_back(std::move(spare));
      return;
    }
  }
  RemoveTreeNoFollow(dir);
}

size_t SpareDirs::size() const {
  MutexLock lock(mu_);
  return spares_.size();
}

bool SpareDirs::Empty(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  bool keep = d != nullptr;
  while (keep && d) {
    dirent* e = readdir(d);
    if (!e) break;
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    keep = std::find(std::begin(kJobFiles), std::end(kJobFiles), name) != std::end(kJobFiles);
  }
  if (d) closedir(d);
  if (!keep) return false;
  // Emptied and given back to the agent's user (a job's output is its user's, see the
  // supervisor), so that nothing of one job is readable through the next.
  for (std::string_view name : kJobFiles) {
    std::string path = dir + "/" + std::string(name);
    int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno != ENOENT) return false;
      continue;
    }
    struct stat st {};
    const bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                      ((st.st_uid == ::geteuid() && st.st_gid == ::getegid()) ||
                       ::fchown(fd, ::geteuid(), ::getegid()) == 0);
    ::close(fd);
    if (!ours) return false;
  }
  return true;
}

}  // namespace berth
