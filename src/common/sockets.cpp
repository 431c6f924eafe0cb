#include "common/sockets.h"

#include <sys/socket.h>

#include <cerrno>

namespace berth {

bool SendPending(int fd, const std::string& out, size_t* pos) {
  while (*pos < out.size()) {
    ssize_t n = ::send(fd, out.data() + *pos, out.size() - *pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *pos += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace berth
