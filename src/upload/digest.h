// SHA-256 digests, the names of uploaded content (docs/design.md "Uploads"): a digest is always
// 64 lowercase hex characters, of a file's bytes (a blob) or of a manifest's canonical text.
//
// Thread-safety: the functions are thread-safe; one Sha256 object is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace berth::upload {

// Whether `text` has a digest's form: 64 lowercase hex characters.
bool IsDigest(std::string_view text);

// The digest of `data`.
std::string Sha256Hex(std::string_view data);

// A digest computed over bytes given in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view data);
  // The digest of everything given; the object is spent.
  std::string Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The digest of the file open at `fd` read from its start to its end, and how many bytes that
// was; an error naming `what` when it cannot be read.
Result<std::pair<std::string, int64_t>> Sha256OfFd(int fd, const std::string& what);

}  // namespace berth::upload
