// SpareDirs: the agent's pool of recycled job directories. A finished job's directory, emptied, is
// renamed to a spare (<state>/jobs/.spare-N), and the next launch renames a spare into place. On
// ext4 without a journal, creating a job's directory and its four files was most of the kernel
// time of a launch (ext4 searches for a free inode past every recently deleted one); a rename and a
// truncate allocate none. At most kMaxSpares are kept.
//
// Thread-safety: thread-safe (its own lock, never held across file system work).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace berth {

class SpareDirs {
 public:
  static constexpr std::string_view kPrefix = ".spare-";
  static constexpr size_t kMaxSpares = 1024;

  // `jobs_dir` is <state>/jobs, where the job directories and the spares are.
  explicit SpareDirs(std::string jobs_dir) : jobs_dir_(std::move(jobs_dir)) {}

  // Whether `name` (an entry of the jobs dir) is a spare; if so it is taken into the pool (an
  // earlier agent's, found at start).
  bool Adopt(const std::string& name) EXCLUDES(mu_);
  // Renames a spare to `dir` (false: none left, or the rename failed and the spare went).
  bool Take(const std::string& dir) EXCLUDES(mu_);
  // Empties a finished job's directory and keeps it as a spare, or removes it: when not
  // `reusable` (the job's supervisor died, and its processes may still write to its files), with
  // too many spares, or with an unexpected entry in it.
  void Recycle(const std::string& dir, bool reusable) EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  // Whether `dir` holds only a job's files, each emptied and given back to the agent's user.
  static bool Empty(const std::string& dir);

  const std::string jobs_dir_;
  mutable Mutex mu_;
  std::vector<std::string> spares_ GUARDED_BY(mu_);
  int64_t next_ GUARDED_BY(mu_) = 0;  // the next spare's number
};

}  // namespace berth
