// The daemons' main functions (server, agent, supervisor, node supervisor), wired from their parts.
// Each returns the process exit status. Not thread-safe (one per process).
#pragma once

#include <string>

#include "cli/commands.h"

namespace berth::exe {

int RunServer(const cli::ServerFlags& flags);
// `berth openapi`: the OpenAPI description of the server's HTTP API (GET /v1/openapi.json),
// indented, on stdout or into `out` (left untouched when it says the same already).
int RunOpenApi(const std::string& out);
int RunAgent(const cli::AgentFlags& flags, const std::string& self_exe);
int RunSupervisor(const std::string& dir);
int RunNodeSupervisor(const std::string& state_dir);

}  // namespace berth::exe
