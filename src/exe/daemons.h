// The daemons' main functions (server, agent, supervisor, node supervisor), wired from their parts.
// Each returns the process exit status. Not thread-safe (one per process).
#pragma once

#include <string>

#include "cli/commands.h"

namespace berth::exe {

int RunServer(const cli::ServerFlags& flags);
int RunAgent(const cli::AgentFlags& flags, const std::string& self_exe);
int RunSupervisor(const std::string& dir);
int RunNodeSupervisor(const std::string& state_dir);

}  // namespace berth::exe
