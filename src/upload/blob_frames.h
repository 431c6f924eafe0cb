// Blob frames: several blobs (or pieces of them) in one HTTP body, for uploads of many small files
// in one request and for a node's fetch of what it lacks (docs/api.md "Uploads"). Each frame is a
// header line "DIGEST OFFSET SIZE\n" and then SIZE bytes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace berth::upload {

struct BlobFrame {
  std::string digest;
  int64_t offset = 0;     // where in the blob these bytes go
  std::string_view data;  // into the body parsed
};

// Appends a frame to `body`.
void AppendFrame(std::string& body, std::string_view digest, int64_t offset, std::string_view data);

// The frames of `body` (which must outlive them); InvalidArgument naming the frame when malformed.
Result<std::vector<BlobFrame>> ParseFrames(std::string_view body);

}  // namespace berth::upload
