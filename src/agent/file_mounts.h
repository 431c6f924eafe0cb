// File mounts on the node (docs/task-yaml.md "file_mounts"): each mount's uploaded tree is built in
// the job's directory by the agent (agent/node_uploads.h), then put at its target by a few lines of
// shell that run before the job's setup, as the job's user — so a mount can land only where its
// user may write, exactly as if the user had copied it there.
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <vector>

namespace berth {

struct MountPlacement {
  std::string built;   // the built copy: a directory, or the one file of a file source
  std::string target;  // as the task says: absolute, "~/..." or relative to the workdir
  bool file = false;   // the source was one file
};

// The shell that places every mount (before `setup`, in the workdir): a directory merges into the
// target (made if missing), a file replaces it; a failure says which target and exits 1.
std::string FileMountScript(const std::vector<MountPlacement>& mounts);

}  // namespace berth
