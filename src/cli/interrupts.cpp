// Ctrl-C and Ctrl-\ while a command waits on its job (cli/interrupts.h).
#include "cli/interrupts.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

namespace berth::cli {
namespace {

std::atomic<int> g_interrupt_fd{-1};  // the write end of the live Interrupts' pipe

void OnInterrupt(int sig) {
  const int fd = g_interrupt_fd.load();
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!::write(fd, &byte, 1);
}

}  // namespace

Interrupts::Interrupts(std::function<void(int sig, bool repeated)> on_signal)
    : on_signal_(std::move(on_signal)) {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) return;  // no pipe: the signals keep what they did
  g_interrupt_fd = pipe_[1];
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  ::sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the command's own calls go on undisturbed
  ::sigaction(SIGINT, &action, &old_int_);
  ::sigaction(SIGQUIT, &action, &old_quit_);
  thread_ = std::thread([this] { Run(); });
}

Interrupts::~Interrupts() {
  if (!thread_.joinable()) return;
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGQUIT, &old_quit_, nullptr);
  g_interrupt_fd = -1;
  const unsigned char stop = 0;
  (void)!::write(pipe_[1], &stop, 1);
  thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void Interrupts::Run() {
  std::optional<std::chrono::steady_clock::time_point> last_int;
  while (true) {
    unsigned char sig = 0;
    const ssize_t n = ::read(pipe_[0], &sig, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || sig == 0) return;
    bool repeated = false;
    if (sig == SIGINT) {
      const auto now = std::chrono::steady_clock::now();
      repeated = last_int && now - *last_int <= kRepeatWithin;
      last_int = now;
    }
    on_signal_(sig, repeated);
  }
}

}  // namespace berth::cli
