#include "agent/node_credential.h"

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace berth {

Result<std::string> ObtainNodeCredential(const std::string& state_dir,
                                         const std::string& join_token, const std::string& node,
                                         const JoinFunction& join, DurationMs give_up_ms) {
  const std::string path = state_dir + "/node-credential";
  {
    std::ifstream in(path);
    std::string kept;
    if (in && std::getline(in, kept) && !Trim(kept).empty()) return Trim(kept);
  }
  if (join_token.empty()) return std::string();
  const int64_t deadline = MonotonicMs() + give_up_ms;
  DurationMs pause = 200;
  for (;;) {
    Result<std::string> credential = join(join_token, node);
    if (credential.ok()) {
      ::mkdir(state_dir.c_str(), 0700);
      if (!WriteFileAtomic(path, *credential + "\n", /*sync=*/true, 0600)) {
        return Status::Internal("joined, but cannot keep the node's credential in " + path +
                                ": an admin revokes it (berth admin node revoke " + node +
                                ") and makes a new join token");
      }
      LogInfo("joined the cluster: node {}'s credential is kept in {}", node, path);
      return credential;
    }
    if (credential.status().code() != Code::kUnavailable || MonotonicMs() >= deadline) {
      return Status(credential.status().code(),
                    "joining the cluster as node " + node + ": " + credential.status().message());
    }
    LogWarn("joining the cluster: {}; retrying", credential.status().message());
    std::this_thread::sleep_for(std::chrono::milliseconds(pause));
    pause = std::min<DurationMs>(pause * 2, 5'000);
  }
}

}  // namespace berth
