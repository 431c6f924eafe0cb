// Re-slicing one GPU on the node (the agent's side of sched/reslice.h; docs/gpus.md
// "Re-slicing"): the nvidia-smi commands that replace a GPU's MIG instances with a new layout, run
// through a CommandRunner. A real node runs them (supervise/timed_command.h ProcessRunner); a node
// whose layout is declared (`--mig`) has no driver to ask, so the agent simulates the change with a
// RecordingCommandRunner, which writes each command to a log and succeeds: the same code path, and
// the exact commands a real node would run, for tests to read.
//
// Plain functions; RecordingCommandRunner is thread-safe (one append per command).
#pragma once

#include <string>
#include <vector>

#include "agent/mig.h"
#include "common/status.h"
#include "supervise/timed_command.h"

namespace berth {

// GPU `gpu`, now laid out as `old`, given `to` (profiles, nvidia-smi's names): each old slice's
// compute instance destroyed, then its GPU instance, then the new GPU instances created with
// their default compute instances, in one command.
std::vector<std::vector<std::string>> MigLayoutCommands(int gpu, const std::vector<MigSlice>& old,
                                                        const std::vector<std::string>& to);

// Runs MigLayoutCommands through `runner`, each with `timeout_ms`, stopping at the first that
// fails. When a creation fails after the old instances went, the old layout is created again (as
// far as the driver lets it): the GPU is left as it was, or with fewer slices, never half of a new
// layout. The error names the command and its output.
Status ApplyMigLayout(CommandRunner& runner, int gpu, const std::vector<MigSlice>& old,
                      const std::vector<std::string>& to, DurationMs timeout_ms = 60'000);

class RecordingCommandRunner final : public CommandRunner {
 public:
  explicit RecordingCommandRunner(std::string log_path) : log_path_(std::move(log_path)) {}
  // Appends `command`'s argv, joined by spaces, as a line of the log; exit code 0.
  CommandOutcome Run(const TimedCommand& command, const std::function<bool()>& abort) override;

 private:
  std::string log_path_;
};

}  // namespace berth
