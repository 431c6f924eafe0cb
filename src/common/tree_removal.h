// RemoveTreeNoFollow: removes a directory tree the way a privileged process must remove one that
// others can write into (a job's work dir, as root). Every entry is opened relative to its parent's
// descriptor with O_NOFOLLOW, so a symbolic link is removed, never followed, even one swapped in
// for a directory while the walk runs (a path walked by name could be redirected to /etc between
// its check and its use); the walk never leaves the tree's file system (a mount inside, and what is
// under it, is left in place) and stops at a depth of 256.
//
// Thread-safety: thread-safe (each call works on descriptors of its own).
#pragma once

#include <functional>
#include <string>

namespace berth {

// Removes `path` (a directory, with everything in it, or any other file). Answers whether it is
// gone. `before_open` (tests) is called with each subdirectory's path just before it is opened.
bool RemoveTreeNoFollow(const std::string& path,
                        const std::function<void(const std::string&)>& before_open = {});

}  // namespace berth
