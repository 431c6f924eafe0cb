// Terminal: the pseudo-terminal of an interactive rank as the node supervisor holds it —
// the master side, and a scrollback ring of what the job printed, addressed by byte offsets
// counted from the step's start, so that a client that attaches again asks for what it has not
// seen ("from offset N") and learns what the ring no longer holds.
//
// The job's side (the slave) becomes the run step's controlling terminal and its stdin, stdout and
// stderr (supervise/step.h). What the job prints is read by the node supervisor whether or not
// anyone is attached, so the job never blocks on a full terminal; it also goes to output.log.
//
// Not thread-safe: the node supervisor is single-threaded.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/sockets.h"  // SendPending, for the legs
#include "common/status.h"
#include "common/term_channel.h"

namespace berth {

// The last `capacity` bytes appended, and the count of all bytes ever appended.
class Scrollback {
 public:
  explicit Scrollback(size_t capacity) : capacity_(capacity) {}
  void Append(std::string_view data);
  // Bytes ever appended: the offset the next byte will have.
  int64_t total() const { return total_; }
  // What is held from `offset` on. *from is where it begins: `offset`, or later when the ring no
  // longer holds the bytes from `offset` (then from the first line start after the gap, so that a
  // replay does not begin inside a line or an escape sequence, where there is one).
  // At most `max_bytes` of it.
  std::string Since(int64_t offset, int64_t* from, size_t max_bytes = SIZE_MAX) const;

 private:
  size_t capacity_;
  std::string ring_;   // the held bytes, oldest first, at most capacity_ (compacted by Append)
  int64_t total_ = 0;  // bytes ever appended; ring_ holds [total_ - ring_.size(), total_)
};

// A pseudo-terminal pair, both close-on-exec; the master non-blocking.
struct PtyPair {
  int master = -1;
  int slave = -1;
};

// Opens a pseudo-terminal of `rows` x `cols`. With `owner` >= 0 the slave's device is given to that
// user with mode 0620 (as a login would), for the programs that open it again by name.
Result<PtyPair> OpenPty(int rows, int cols, int64_t owner = -1);

// Sets the terminal's size (TIOCSWINSZ on the master); the job's foreground process group gets
// SIGWINCH.
Status ResizePty(int master, int rows, int cols);

// The frames of a terminal leg (the node supervisor's `attach` connection, node_supervisor.h):
// one byte of channel (common/term_channel.h), four of length (big-endian), then the bytes.
// At most this many bytes in one frame.
inline constexpr size_t kMaxTermFrame = 64 << 10;
void AppendTermFrame(std::string* out, TermChannel channel, std::string_view payload);
// Takes the first frame of `in` when it is complete (*used: its size); nullopt when more bytes are
// needed. Invalid for an unknown channel or a length over kMaxTermFrame.
struct TermFrame {
  TermChannel channel;
  std::string payload;
};
Result<std::optional<TermFrame>> TakeTermFrame(std::string_view in, size_t* used);

}  // namespace berth
