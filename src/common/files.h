// Small whole-file helpers shared by the server, the agent, the supervisor and the CLI (state
// files, pid files, tokens, run plans). Thread-safe: each call opens its own descriptor.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace berth {

// The whole file, or nullopt if it cannot be read.
std::optional<std::string> ReadFile(const std::string& path);
// The whole file, or `fallback` if it cannot be read.
std::string ReadFileOr(const std::string& path, const std::string& fallback = "");

// Writes via a temp file and rename, so readers see the old or the new content, never half. The
// temp file is created afresh with `mode` (less the umask), so a secret is never readable by
// others, not even briefly. `sync` also makes it survive a power loss. Returns false on any failure
// (errno says why).
bool WriteFileAtomic(const std::string& path, const std::string& data, bool sync = true,
                     mode_t mode = 0644);
// Writes in place (one inode, no temp file): for files nobody reads before they are complete. The
// file is not truncated to empty first (the data goes over the old, then the rest is cut): ext4
// writes a file that was truncated to nothing and written again out to disk as it is closed (its
// guard against a crash leaving it empty), which made every job's launch wait for block I/O.
bool WriteFileInPlace(const std::string& path, const std::string& data, mode_t mode = 0644);

}  // namespace berth
