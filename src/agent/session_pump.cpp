#include "agent/session_pump.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "supervise/terminal.h"

namespace berth {

namespace {

// The leg's side: frames to send it, and bytes read from it not yet a whole frame.
struct LegBuffers {
  std::string out;
  size_t out_pos = 0;
  std::string in;
  bool eof = false;
  bool closed_for_input = false;  // a write failed: the rank ended, what it sent is still read
};

// Reads what the leg sent and forwards each whole frame as a message. False when the leg broke
// the framing.
bool ReadLeg(int fd, LegBuffers& leg, net::WebSocketClient& ws) {
  char buf[16384];
  for (size_t total = 0; total < kPumpBufferBytes;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      leg.eof = true;
      break;
    }
    leg.in.append(buf, static_cast<size_t>(n));
    total += static_cast<size_t>(n);
  }
  size_t at = 0;
  while (true) {
    size_t used = 0;
    auto frame = TakeTermFrame(std::string_view(leg.in).substr(at), &used);
    if (!frame.ok()) return false;
    if (!*frame) break;
    at += used;
    std::string message(1, static_cast<char>((*frame)->channel));
    message += (*frame)->payload;
    ws.Send(message);
  }
  leg.in.erase(0, at);
  return true;
}

// Writes what is queued for the leg. False when the leg is gone.
bool WriteLeg(int fd, LegBuffers& leg) {
  if (!SendPending(fd, leg.out, &leg.out_pos)) return false;
  if (leg.out_pos == leg.out.size()) {
    leg.out.clear();
    leg.out_pos = 0;
  }
  return true;
}

}  // namespace

Status RelaySession(net::WebSocketClient& ws, int leg_fd, const std::atomic<bool>& stop) {
  LegBuffers leg;
  while (!stop) {
    // The user's messages become the leg's frames while the leg keeps up (dropped once it takes
    // no more).
    while (leg.out.size() - leg.out_pos < kPumpBufferBytes) {
      auto message = ws.TakeMessage();
      if (!message) break;
      if (message->empty() || leg.closed_for_input) continue;
      const auto channel = static_cast<TermChannel>(static_cast<uint8_t>((*message)[0]));
      if (channel != TermChannel::kStdin && channel != TermChannel::kControl) continue;
      AppendTermFrame(&leg.out, channel, std::string_view(*message).substr(1, kMaxTermFrame));
    }
    if (!leg.closed_for_input && !WriteLeg(leg_fd, leg)) {
      // The rank ended while the user typed (a piped stdin's last Ctrl-D finds the leg closed):
      // what the leg sent before it closed — the rank's last output, its exit — is still read
      // and passed on below, and the session ends as it would have.
      leg.closed_for_input = true;
      leg.out.clear();
      leg.out_pos = 0;
    }
    if (ws.closed()) return Status::Ok();  // the user went away; the caller closes the leg
    if (leg.eof) {
      // The rank ended and the leg sent all it had (its exit last; a partial frame after it would
      // never be completed): pass the rest on, then close once the server has read it all.
      return ws.CloseAndWait(1000, "", 5'000);
    }
    pollfd fds[2];
    fds[0] = {ws.fd(), ws.events(), 0};
    short leg_events = 0;
    if (!leg.eof && ws.unsent() < kPumpBufferBytes) leg_events |= POLLIN;
    if (leg.out_pos < leg.out.size()) leg_events |= POLLOUT;
    fds[1] = {leg_fd, leg_events, 0};
    if (::poll(fds, 2, 500) < 0 && errno != EINTR) {
      return Status::Internal(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!ReadLeg(leg_fd, leg, ws)) {
        (void)ws.CloseAndWait(1011, "the job's terminal sent a malformed frame", 2'000);
        return Status::Internal("the node supervisor sent a malformed terminal frame");
      }
    }
    BERTH_RETURN_IF_ERROR(ws.Pump());
  }
  (void)ws.CloseAndWait(1001, "the agent is stopping", 1'000);
  return Status::Ok();
}

}  // namespace berth
