// A command run to completion with a hard timeout: the node's health probes and the admin's
// prolog and epilog scripts (docs/operators.md "Node health"). The command runs in a process
// group of its own with stdin from /dev/null and stdout and stderr captured (the first 64 KiB);
// at its timeout, or when the caller's `abort` says so, the whole group is killed with SIGKILL, so
// a hung script and everything it started are gone when Run returns.
//
// The child is started as a "clone" child (one that sends its parent no SIGCHLD), so that the
// agent's `waitpid(-1, ...)` reaping of supervisors never takes its exit status.
//
// Thread-safety: CommandRunner implementations are thread-safe; ProcessRunner keeps no state.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace berth {

struct TimedCommand {
  std::vector<std::string> argv;  // argv[0] is a path, or a name looked up in PATH
  // The complete environment; empty: the caller's own.
  std::map<std::string, std::string> env;
  DurationMs timeout = 60'000;
};

struct CommandOutcome {
  std::optional<int> exit_code;  // none: killed by a signal, timed out, aborted or not started
  int signal = 0;                // the signal that ended it, when one did
  bool timed_out = false;
  bool aborted = false;     // `abort` asked it to stop
  std::string output;       // stdout and stderr, interleaved, at most kMaxOutput bytes
  std::string start_error;  // why it could not start ("" when it did)
  DurationMs duration_ms = 0;
  DurationMs timeout_ms = 0;  // the limit it ran under (what a timeout's reason names)

  static constexpr size_t kMaxOutput = 64 * 1024;

  bool ok() const { return exit_code && *exit_code == 0; }
  // The first non-empty line of the output, trimmed and cut to 200 bytes.
  std::string FirstLine() const;
  // Why it failed, for a reason: "timed out after 5s", "exit code 3: disk full", "killed by
  // signal 9", "cannot run ...: ..." ("" when ok()).
  std::string Failure() const;
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs `command` until it exits, its timeout passes or `abort` (checked every 100 ms) returns
  // true.
  virtual CommandOutcome Run(const TimedCommand& command,
                             const std::function<bool()>& abort = {}) = 0;
};

// Runs real processes.
class ProcessRunner final : public CommandRunner {
 public:
  CommandOutcome Run(const TimedCommand& command, const std::function<bool()>& abort) override;
};

// The path of `name` in PATH (or `name` itself when it holds a '/'); "" when not found or not
// executable.
std::string FindExecutable(const std::string& name);

}  // namespace berth
