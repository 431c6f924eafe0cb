// The `berth` command line: daemons (server, agent, local) and user commands (exec, queue, logs,
// cancel, nodes, show, drain, undrain). User commands are thin HTTP clients of the server's API.
#pragma once

#include <functional>
#include <string>

namespace berth::cli {

struct ServerFlags;
struct AgentFlags;

// The long-running processes, wired in src/exe (the CLI does not link the server or the agent):
// `berth server`, `berth agent`, and the hidden `berth __supervise DIR` and `berth __node
// STATE_DIR`.
struct Daemons {
  std::function<int(const ServerFlags&)> server;
  std::function<int(const AgentFlags&, const std::string& self_exe)> agent;
  std::function<int(const std::string& dir)> supervise;
  std::function<int(const std::string&)> node_supervisor;
  // `berth openapi`: prints (or writes to `out`) the HTTP API's OpenAPI description.
  std::function<int(const std::string& out)> openapi;
};

// Parses argv and runs the command; returns the process exit status.
int Main(int argc, char** argv, const Daemons& daemons);

}  // namespace berth::cli
