// NodeUploads: a node's copy of the uploads its jobs use (docs/user-guide.md "Workdir upload",
// docs/operators.md "Upload cache"). Blobs are fetched from the server once per node into a cache
// only root reads (digests checked), kept by least recent use under a size limit; each attempt then
// gets its own copy of the tree, owned by the job's user — never a link to a cached blob, so a job
// that writes into its files changes neither the cache nor another job's copy.
//
// The tree is built inside a directory nobody else can enter yet (the caller's, 0700), with every
// entry made new (O_EXCL, no symlink followed) and handed to the user as it is made.
//
// Thread-safety: thread-safe (one fetch at a time; mu_).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "agent/connection.h"
#include "common/mutex.h"
#include "common/status.h"
#include "upload/manifest.h"

namespace berth {

class NodeUploads {
 public:
  // The cache lives in `dir`; over `max_bytes` the least recently used blobs go until it is under
  // 80% of it (never those of the tree being built).
  NodeUploads(std::string dir, int64_t max_bytes);

  struct Owner {
    uid_t uid;
    gid_t gid;
  };
  struct Built {
    int64_t files = 0;
    int64_t bytes = 0;
    int64_t fetched_bytes = 0;  // from the server (the rest was in the cache)
  };
  // Builds the tree of manifest `manifest` in `dest` (which must not exist; its parent must be
  // private to root), owned by `owner` (none: the agent's own user), fetching what the cache
  // lacks through `conn` with `base` (node, session, job). Every round of fetching must bring
  // bytes: a blob that ends before the size its manifest gives fails the build, saying so.
  // `cancelled` is asked before each round: once it answers true the build stops (Unavailable).
  Result<Built> Build(AgentConnection& conn, const BlobFetch& base, const std::string& manifest,
                      const std::string& dest, std::optional<Owner> owner,
                      const std::function<bool()>& cancelled) EXCLUDES(mu_);

  int64_t cached_bytes() EXCLUDES(mu_);

 private:
  std::string PathOf(const std::string& digest) const;
  // Loads the cache's index from its files (at the first Build).
  void LoadIndex() REQUIRES(mu_);
  // Fetches every digest of `wanted` the cache lacks. Answers the bytes fetched.
  Result<int64_t> Fetch(AgentConnection& conn, const BlobFetch& base,
                        const std::map<std::string, int64_t>& wanted,
                        const std::function<bool()>& cancelled) REQUIRES(mu_);
  // Writes one fetched frame into the partial file of its blob; a complete one is checked and
  // moved into the cache. `size` -1: not known (a manifest).
  Status Store(const std::string& digest, int64_t offset, std::string_view data, int64_t size)
      REQUIRES(mu_);
  void Evict(const std::map<std::string, int64_t>& keep) REQUIRES(mu_);

  const std::string dir_;
  const int64_t max_bytes_;
  Mutex mu_;
  bool loaded_ GUARDED_BY(mu_) = false;
  struct Cached {
    int64_t size = 0;
    uint64_t last_use = 0;
  };
  std::map<std::string, Cached> index_ GUARDED_BY(mu_);
  int64_t total_ GUARDED_BY(mu_) = 0;
  uint64_t uses_ GUARDED_BY(mu_) = 0;
};

// Builds `manifest`'s tree in `dest` from the blobs `blob_path` names (exposed for tests).
Status Materialize(const upload::Manifest& manifest, const std::string& dest,
                   const std::function<std::string(const std::string&)>& blob_path,
                   std::optional<NodeUploads::Owner> owner);

}  // namespace berth
