// CommandContext: what registering a `berth` command needs. cli/main.cpp makes one per run and
// calls the registration of each command it may run (one function per command, beside the
// command's implementation: AddExecCommand in job_cmds.cpp, ...); a registration adds its
// subcommand, options and callback to `app`. Flags are kept in the context (Keep), so that they
// outlive their registration until the command has run; a callback sets `rc`, the exit status.
//
// Thread-safety: none; a command line is parsed and run on one thread.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/main.h"

namespace berth::cli {

struct CommandContext {
  CommandContext(CLI::App& app, GlobalFlags& g, const Daemons& daemons, int argc, char** argv)
      : app(app), g(g), daemons(daemons), argc(argc), argv(argv) {}

  CLI::App& app;
  GlobalFlags& g;
  const Daemons& daemons;
  int argc = 0;
  char** argv = nullptr;
  int rc = 0;

  // --server and --token, which every user command takes.
  void AddGlobal(CLI::App* cmd);
  // A value that lives as long as the context (a command's flags).
  template <typename T, typename... Args>
  T& Keep(Args&&... args) {
    auto kept = std::make_shared<T>(std::forward<Args>(args)...);
    kept_.push_back(kept);
    return *kept;
  }

 private:
  std::vector<std::shared_ptr<void>> kept_;
};

// One per command, in the order `berth --help` lists them.
void AddServerCommand(CommandContext& c);       // daemon_cmds.cpp
void AddAgentCommand(CommandContext& c);        // daemon_cmds.cpp
void AddOpenApiCommand(CommandContext& c);      // daemon_cmds.cpp
void AddLocalCommand(CommandContext& c);        // node_cmds.cpp
void AddExecCommand(CommandContext& c);         // job_cmds.cpp
void AddWorkdirCommand(CommandContext& c);      // workdir_cmds.cpp
void AddImageCommand(CommandContext& c);        // image_cmds.cpp
void AddUpdateCommand(CommandContext& c);       // job_cmds.cpp
void AddQueueCommand(CommandContext& c);        // job_cmds.cpp
void AddTopCommand(CommandContext& c);          // top_cmds.cpp
void AddWaitCommand(CommandContext& c);         // wait_cmds.cpp
void AddLogsCommand(CommandContext& c);         // logs_cmd.cpp
void AddAttachCommand(CommandContext& c);       // attach_cmds.cpp
void AddShellCommand(CommandContext& c);        // attach_cmds.cpp
void AddPortForwardCommand(CommandContext& c);  // forward_cmds.cpp
void AddCancelCommand(CommandContext& c);       // job_cmds.cpp
void AddRequeueCommand(CommandContext& c);      // job_cmds.cpp
void AddShowCommand(CommandContext& c);         // show_cmd.cpp
void AddNodesCommand(CommandContext& c);        // node_cmds.cpp
void AddDrainCommand(CommandContext& c);        // node_cmds.cpp
void AddUndrainCommand(CommandContext& c);      // node_cmds.cpp
void AddStatusCommand(CommandContext& c);       // status_cmds.cpp
void AddWhoamiCommand(CommandContext& c);       // admin_cmds.cpp
void AddDashboardCommand(CommandContext& c);    // admin_cmds.cpp
void AddLoginCommand(CommandContext& c);        // admin_cmds.cpp
void AddUsageCommand(CommandContext& c);        // share_cmds.cpp
void AddAdminCommand(CommandContext& c);        // admin_cmds.cpp
void AddNotifyCommand(CommandContext& c);       // notify_cmds.cpp
void AddReserveCommand(CommandContext& c);      // reserve_cmds.cpp

}  // namespace berth::cli
