// Cgroup2Of: a process's cgroup in the cgroup2 hierarchy, as /proc names it.
// OwnCgroup2Dir: where a test may make cgroup2 cgroups of its own on this machine — this process's
// directory in the cgroup2 hierarchy (/sys/fs/cgroup/unified on a hybrid host, /sys/fs/cgroup on a
// v2 one), or "" when there is none or it is not writable (not root). The hybrid hierarchy has no
// controllers, but takes processes, BPF device programs and clone3's CLONE_INTO_CGROUP.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "common/strings.h"

namespace berth::testing {

// The cgroup2 line of /proc/PID/cgroup, without its "0::" ("" when there is none).
inline std::string Cgroup2Of(pid_t pid) {
  for (const std::string& line :
       Split(ReadFileOr("/proc/" + std::to_string(pid) + "/cgroup"), '\n')) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

inline std::string OwnCgroup2Dir() {
  const std::string own = Cgroup2Of(::getpid());
  for (const char* mount : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    if (std::filesystem::exists(std::string(mount) + "/cgroup.procs") &&
        std::filesystem::exists(std::string(mount) + "/cgroup.subtree_control")) {
      std::string dir = std::string(mount) + (own == "/" ? "" : own);
      return ::access(dir.c_str(), W_OK) == 0 ? dir : "";
    }
  }
  return "";
}

}  // namespace berth::testing
