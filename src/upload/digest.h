// SHA-256 digests as the names of uploaded content (docs/design.md "Uploads"): a digest is always
// 64 lowercase hex characters, of a file's bytes (a blob) or of a manifest's canonical text,
// computed with common/sha256.h.
//
// Thread-safety: the functions are thread-safe; one Sha256 object is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/sha256.h"  // Sha256, Sha256Hex: what a digest is computed with
#include "common/status.h"

namespace berth::upload {

// Whether `text` has a digest's form: 64 lowercase hex characters.
bool IsDigest(std::string_view text);

// The digest of the file open at `fd` read from its start to its end, and how many bytes that
// was; an error naming `what` when it cannot be read.
Result<std::pair<std::string, int64_t>> Sha256OfFd(int fd, const std::string& what);

}  // namespace berth::upload
