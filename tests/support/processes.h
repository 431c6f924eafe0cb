// ProcessesWithEnv: the live processes whose environment holds given entries, for tests that must
// find every process they started (supervisors and jobs inherit a tag the test sets) and prove none
// is left. Reads /proc; thread-safe.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/files.h"

namespace berth::testing {

// Live processes other than this one whose environment holds every one of `wanted`
// ("NAME=VALUE"). Zombies have no environment, so they are not counted.
inline std::vector<pid_t> ProcessesWithEnv(const std::vector<std::string>& wanted) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string env = ReadFileOr(std::string("/proc/") + e->d_name + "/environ");
    size_t found = 0;
    for (size_t at = 0; at < env.size();) {
      size_t end = env.find('\0', at);
      if (end == std::string::npos) end = env.size();
      for (const auto& w : wanted) {
        if (env.compare(at, end - at, w) == 0) ++found;
      }
      at = end + 1;
    }
    if (!wanted.empty() && found == wanted.size()) out.push_back(pid);
  }
  closedir(d);
  return out;
}

}  // namespace berth::testing
