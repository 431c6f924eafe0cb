// The daemons' main functions (server, agent, supervisor, spawner), wired from their parts. Each
// returns the process exit status. Not thread-safe (one per process).
#pragma once

#include <string>

#include "cli/commands.h"

namespace berth::exe {

int RunServer(const cli::ServerFlags& flags);
int RunAgent(const cli::AgentFlags& flags, const std::string& self_exe);
int RunSupervisor(const std::string& dir);
int RunSpawner();

}  // namespace berth::exe
