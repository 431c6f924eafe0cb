#include "supervise/terminal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace berth {

void Scrollback::Append(std::string_view data) {
  total_ += static_cast<int64_t>(data.size());
  if (data.size() >= capacity_) {
    ring_.assign(data.substr(data.size() - capacity_));
    return;
  }
  // Compacted once the string is twice the capacity: amortised O(1) a byte.
  ring_.append(data);
  if (ring_.size() > 2 * capacity_) ring_.erase(0, ring_.size() - capacity_);
}

std::string Scrollback::Since(int64_t offset, int64_t* from, size_t max_bytes) const {
  const size_t held = std::min(ring_.size(), capacity_);
  const int64_t first = total_ - static_cast<int64_t>(held);
  const std::string_view kept = std::string_view(ring_).substr(ring_.size() - held);
  if (offset >= total_) {
    *from = total_;
    return "";
  }
  if (offset >= first) {
    *from = std::max<int64_t>(offset, 0);
    return std::string(kept.substr(static_cast<size_t>(*from - first), max_bytes));
  }
  // Part of what was asked for is gone: start at a line's beginning where the ring has one.
  size_t nl = kept.find('\n');
  size_t start = nl == std::string_view::npos ? 0 : nl + 1;
  *from = first + static_cast<int64_t>(start);
  return std::string(kept.substr(start, max_bytes));
}

Result<PtyPair> OpenPty(int rows, int cols, int64_t owner) {
  PtyPair pty;
  pty.master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (pty.master < 0) return Status::Internal(std::string("posix_openpt: ") + strerror(errno));
  auto fail = [&](const char* what) {
    Status st = Status::Internal(std::string(what) + ": " + strerror(errno));
    ::close(pty.master);
    if (pty.slave >= 0) ::close(pty.slave);
    return st;
  };
  if (::unlockpt(pty.master) != 0) return fail("unlockpt");
  char name[128];
  if (::ptsname_r(pty.master, name, sizeof(name)) != 0) return fail("ptsname");
  pty.slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (pty.slave < 0) return fail("open the terminal");
  if (owner >= 0) {
    if (::fchown(pty.slave, static_cast<uid_t>(owner), static_cast<gid_t>(-1)) != 0 ||
        ::fchmod(pty.slave, 0620) != 0) {
      return fail("give the terminal to the job's user");
    }
  }
  ::fcntl(pty.master, F_SETFL, ::fcntl(pty.master, F_GETFL) | O_NONBLOCK);
  if (Status st = ResizePty(pty.master, rows, cols); !st.ok()) {
    ::close(pty.master);
    ::close(pty.slave);
    return st;
  }
  return pty;
}

Status ResizePty(int master, int rows, int cols) {
  winsize size{};
  size.ws_row = static_cast<unsigned short>(std::clamp(rows, 1, 10000));
  size.ws_col = static_cast<unsigned short>(std::clamp(cols, 1, 10000));
  if (::ioctl(master, TIOCSWINSZ, &size) != 0) {
    return Status::Internal(std::string("cannot size the terminal: ") + strerror(errno));
  }
  return Status::Ok();
}

void AppendTermFrame(std::string* out, TermChannel channel, std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  out->push_back(static_cast<char>(channel));
  for (int shift = 24; shift >= 0; shift -= 8)
    out->push_back(static_cast<char>((n >> shift) & 0xFF));
  out->append(payload);
}

Result<std::optional<TermFrame>> TakeTermFrame(std::string_view in, size_t* used) {
  *used = 0;
  if (in.size() < 5) return std::optional<TermFrame>();
  const auto* b = reinterpret_cast<const uint8_t*>(in.data());
  if (b[0] != 0 && b[0] != 1 && b[0] != 3) {
    return Status::Invalid("terminal frame on unknown channel " + std::to_string(b[0]));
  }
  const uint32_t n = (uint32_t{b[1]} << 24) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 8) | b[4];
  if (n > kMaxTermFrame)
    return Status::Invalid("terminal frame of " + std::to_string(n) + " bytes");
  if (in.size() < 5 + size_t{n}) return std::optional<TermFrame>();
  *used = 5 + n;
  return std::optional<TermFrame>(
      TermFrame{static_cast<TermChannel>(b[0]), std::string(in.substr(5, n))});
}

}  // namespace berth
