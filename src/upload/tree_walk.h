// WalkTree and HashTree: what the client uploads of a local directory (docs/user-guide.md
// "Workdir upload"). WalkTree lists the tree's files, directories and symlinks, leaving out what
// the ignore files say (upload/ignore_rules.h: the root's `.skyignore` when there is one, else
// `.git/info/exclude` and every directory's `.gitignore`) and what cannot be uploaded (sockets,
// devices, unreadable directories), each with the reason. HashTree turns a walk into a Manifest,
// reading a file only when its size, mtime, ctime or inode changed since the digest it remembers
// in a stat cache file (so an unchanged tree is not read again).
//
// Thread-safety: none needed; plain functions over the file system, one caller per cache file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "upload/manifest.h"

namespace berth::upload {

struct WalkedEntry {
  ManifestEntry::Kind kind = ManifestEntry::Kind::kFile;
  std::string path;  // relative to the root
  uint32_t mode = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  std::string target;  // symlinks
};

struct LeftOut {
  std::string path;  // relative; directories end in '/'
  std::string why;   // ".gitignore:3: *.log", "a socket", "cannot read: Permission denied"
};

struct Walk {
  std::vector<WalkedEntry> entries;
  std::vector<LeftOut> left_out;  // only what WalkTree was asked to keep (see `keep_left_out`)
  int64_t ignored = 0;            // how many paths were left out by an ignore file
};

// Walks `root` (a directory). With `keep_left_out`, every path left out is listed with its reason
// (an ignored directory once, not what is inside it). Stops with kTooLarge once the walk passes
// `max_entries` (the error says where it was), so a mistaken `workdir: /` does not run for minutes.
Result<Walk> WalkTree(const std::string& root, bool keep_left_out, int64_t max_entries);

// What HashTree made: the manifest, and for each digest one local file that has it (to upload).
struct HashedTree {
  Manifest manifest;
  std::map<std::string, std::string> file_of_digest;  // digest -> absolute path
  int64_t bytes_read = 0;                             // read to hash (not from the cache)
};

// Hashes `walk`'s files under `root`. `cache_file` ("" for none) keeps the digests of files by
// path with their size, mtime, ctime and inode; it is read first and rewritten after.
// `hashed`, when given, hears after each file the bytes of the walk's files done so far (cached
// or read): a caller's progress.
Result<HashedTree> HashTree(const std::string& root, const Walk& walk,
                            const std::string& cache_file,
                            const std::function<void(int64_t)>& hashed = {});

// The stat cache file of `root` under `cache_dir` (one per tree: its name is the digest of the
// root's absolute path).
std::string StatCacheFile(const std::string& cache_dir, const std::string& root);

}  // namespace berth::upload
