// Digests of uploaded content (upload/digest.h).
#include "upload/digest.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/strings.h"

namespace berth::upload {

bool IsDigest(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<std::pair<std::string, int64_t>> Sha256OfFd(int fd, const std::string& what) {
  Sha256 h;
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal("cannot read " + what + ": " + strerror(errno));
    if (n == 0) break;
    h.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
    total += n;
  }
  return std::make_pair(h.Finish(), total);
}

}  // namespace berth::upload
