// Uploading a local tree for a job (docs/user-guide.md "Workdir upload"): walk it with its ignore
// files, hash what changed since the last time (a stat cache under ~/.cache/berth), ask the
// server which blobs it lacks from us, send only those (small files many to a request, big ones
// in pieces that a retry resumes), then register the manifest. The job's spec names the
// manifest's digest.
//
// Thread-safety: one caller.
#pragma once

#include <cstdint>
#include <string>

#include "cli/connection.h"
#include "common/status.h"

namespace berth::cli {

struct UploadReport {
  std::string manifest;  // its digest
  int64_t files = 0;     // in the tree
  int64_t bytes = 0;
  int64_t sent_files = 0;  // blobs the server lacked
  int64_t sent_bytes = 0;
  double seconds = 0;
};

// Uploads `path` (a directory, or one file) through `conn`. `what` names it in messages
// ("workdir", "file_mounts: /data"). Says how it went on stderr when it took over a second, or
// always with `verbose`.
Result<UploadReport> UploadTree(Connection& conn, const std::string& path, const std::string& what,
                                bool verbose);

// The stat cache's directory: $XDG_CACHE_HOME/berth/uploads, or ~/.cache/berth/uploads.
std::string UploadCacheDir();

}  // namespace berth::cli
