// Interrupts: what Ctrl-C (SIGINT) and Ctrl-\ (SIGQUIT) do while a command waits on a job it
// submitted (`berth exec` following a batch job's output, `berth shell` or `exec -it` waiting for
// their job to start). Neither simply kills the command any more, which left the job running (or
// queued, to take a GPU later with nobody attached) without a word: the command decides, and says
// what happened.
//
// From construction to destruction, each SIGINT and SIGQUIT is handed to `on_signal` on a thread of
// this object (the signal handler only writes a byte to a pipe), so the callback may block and make
// requests of its own (on its own connection: Connection is not thread-safe). The dispositions
// before construction are put back on destruction.
//
// Thread-safety: construct and destroy on one thread, one Interrupts at a time in a process.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace berth::cli {

class Interrupts {
 public:
  // A SIGINT this soon after the one before is `repeated` (srun's "Ctrl-C twice").
  static constexpr std::chrono::milliseconds kRepeatWithin{1000};

  // `on_signal(sig, repeated)`: sig is SIGINT or SIGQUIT.
  explicit Interrupts(std::function<void(int sig, bool repeated)> on_signal);
  ~Interrupts();
  Interrupts(const Interrupts&) = delete;
  Interrupts& operator=(const Interrupts&) = delete;

 private:
  void Run();

  std::function<void(int, bool)> on_signal_;
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_quit_ {};
  std::thread thread_;
};

}  // namespace berth::cli
