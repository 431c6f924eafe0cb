// The text of the image-pull script a container rank runs as its first step (agent/pull.sh,
// compiled in by src/agent/embed_text.cmake). PullScript (agent/container.h) puts the variables
// and the podman function it reads before it.
//
// Thread-safety: a constant.
#pragma once

#include <string_view>

namespace berth {

extern const std::string_view kPullScript;

}  // namespace berth
