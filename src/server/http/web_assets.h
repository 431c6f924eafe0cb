// The dashboard's files (src/web: its page, script and style sheet), compiled into the binary so
// that the server needs nothing installed beside it and the browser nothing from the network.
// Generated at build time by src/web/embed.cmake. Immutable; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace berth {

struct WebAsset {
  std::string_view path;          // "/app.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
  std::string_view etag;  // a quoted hash of the body
};

extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

// The asset served at `path` ("/" is "/index.html"), or nullptr.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace berth
