// Blob frames' encoding (upload/blob_frames.h).
#include "upload/blob_frames.h"

#include <fmt/format.h>

#include "common/strings.h"
#include "upload/digest.h"

namespace berth::upload {

void AppendFrame(std::string& body, std::string_view digest, int64_t offset,
                 std::string_view data) {
  body += fmt::format("{} {} {}\n", digest, offset, data.size());
  body += data;
}

Result<std::vector<BlobFrame>> ParseFrames(std::string_view body) {
  std::vector<BlobFrame> frames;
  while (!body.empty()) {
    size_t nl = body.find('\n');
    auto bad = [&] {
      return Status::Invalid(
          fmt::format("blob frame {}: expected a header \"DIGEST OFFSET SIZE\\n\" and SIZE bytes",
                      frames.size()));
    };
    if (nl == std::string_view::npos || nl > 128) return bad();
    std::vector<std::string> fields = Split(body.substr(0, nl), ' ');
    if (fields.size() != 3 || !IsDigest(fields[0])) return bad();
    auto offset = ParseDecimal(fields[1]);
    auto size = ParseDecimal(fields[2]);
    body.remove_prefix(nl + 1);
    if (!offset || !size || *offset < 0 || *size < 0 ||
        static_cast<uint64_t>(*size) > body.size()) {
      return bad();
    }
    frames.push_back({fields[0], *offset, body.substr(0, static_cast<size_t>(*size))});
    body.remove_prefix(static_cast<size_t>(*size));
  }
  return frames;
}

}  // namespace berth::upload
