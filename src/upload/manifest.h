// Manifest: what an uploaded tree holds (a workdir, or a file mount's source), entry by entry —
// each file's path, mode, size and digest, each directory, each symlink's target — so that a node
// can rebuild the tree from blobs it fetches by digest (docs/design.md "Uploads"). Its canonical
// text (SerializeManifest) is JSON with the entries sorted by path; its digest names it in a job's
// spec, and it is itself stored as a blob.
//
// ParseManifest accepts only what is safe to rebuild as root: relative paths without "." or ".."
// segments, each once, none below a symlink or a file, modes without setuid, setgid or sticky bits.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace berth::upload {

struct ManifestEntry {
  enum class Kind { kFile, kDir, kSymlink };
  Kind kind = Kind::kFile;
  std::string path;      // relative, '/'-separated
  uint32_t mode = 0644;  // permission bits only (0777)
  int64_t size = 0;      // files
  std::string digest;    // files
  std::string target;    // symlinks
  bool operator==(const ManifestEntry&) const = default;
};

struct Manifest {
  std::vector<ManifestEntry> entries;  // sorted by path (SerializeManifest sorts)
  int64_t TotalBytes() const;
  int64_t Files() const;
  bool operator==(const Manifest&) const = default;
};

// Limits of one uploaded tree (docs/user-guide.md "Workdir upload"); the server's are options.
struct ManifestLimits {
  int64_t max_total_bytes = 2LL << 30;   // 2 GiB
  int64_t max_entries = 200'000;         // files, directories and symlinks
  int64_t max_file_bytes = 512LL << 20;  // 512 MiB
};

// The canonical text: sorts `manifest`'s entries by path first.
std::string SerializeManifest(Manifest manifest);

// Parses and checks a manifest's text (see the header comment), and that it is within `limits`
// (the message names the biggest directories, CheckManifestLimits).
Result<Manifest> ParseManifest(std::string_view text, const ManifestLimits& limits);

// Ok, or kTooLarge naming which limit is passed and the biggest directories (by bytes or by entry
// count, whichever is over): "the workdir holds 3.1 GiB, over the limit of 2 GiB; the biggest
// directories: data/ (2.9 GiB), .git/ (150 MiB)". `what` names the tree ("workdir").
Status CheckManifestLimits(const Manifest& manifest, const ManifestLimits& limits,
                           std::string_view what = "the upload");

// "2.1 MB"-style sizes, in the units people see in `ls -h` (1024-based: KiB, MiB, GiB).
std::string HumanBytes(int64_t bytes);

}  // namespace berth::upload
