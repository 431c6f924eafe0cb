#include "net/ws_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/sockets.h"

namespace berth::net {

Status RelayStream(WebSocketClient& ws, int fd, const std::atomic<bool>& stop) {
  std::string to_fd;  // the WebSocket's bytes, not yet written to the socket
  size_t to_fd_pos = 0;
  bool fd_ended = false;  // the socket's peer ended its half (our empty message is queued)
  bool ws_ended = false;  // the WebSocket's peer ended its half
  bool fd_shut = false;   // ...and it was passed on: shutdown(SHUT_WR)
  while (!stop) {
    while (!ws_ended && to_fd.size() - to_fd_pos < kStreamBufferBytes) {
      auto message = ws.TakeMessage();
      if (!message) break;
      if (message->empty()) {
        ws_ended = true;
      } else {
        to_fd += *message;
      }
    }
    if (!SendPending(fd, to_fd, &to_fd_pos)) {
      (void)ws.CloseAndWait(4001, "the connection was reset", 2'000);
      return Status::Unavailable(std::string("the connection failed: ") + std::strerror(errno));
    }
    if (to_fd_pos == to_fd.size()) {
      to_fd.clear();
      to_fd_pos = 0;
      if (ws_ended && !fd_shut) {
        ::shutdown(fd, SHUT_WR);
        fd_shut = true;
      }
    }
    if (fd_ended && fd_shut) return ws.CloseAndWait(1000, "", 5'000);
    if (ws.closed()) {
      if (ws.close_code() == 1000 || ws.close_code() == 1005) return Status::Ok();
      return Status::Unavailable("the other side closed the stream (" +
                                 std::to_string(ws.close_code()) + " " + ws.close_reason() + ")");
    }
    pollfd fds[2];
    fds[0] = {ws.fd(), ws.events(), 0};
    short events = 0;
    if (!fd_ended && ws.unsent() < kStreamBufferBytes) events |= POLLIN;
    if (to_fd_pos < to_fd.size()) events |= POLLOUT;
    fds[1] = {fd, events, 0};
    if (::poll(fds, 2, 500) < 0 && errno != EINTR) {
      return Status::Internal(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[kStreamChunkBytes];
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        ws.Send(std::string_view(buf, static_cast<size_t>(n)));
      } else if (n == 0) {
        fd_ended = true;
        ws.Send("");
      } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        (void)ws.CloseAndWait(4001, "the connection was reset", 2'000);
        return Status::Unavailable(std::string("the connection failed: ") + std::strerror(errno));
      }
    }
    if (Status pumped = ws.Pump(); !pumped.ok() && !ws.closed()) return pumped;
  }
  (void)ws.CloseAndWait(1001, "stopping", 1'000);
  return Status::Ok();
}

}  // namespace berth::net
