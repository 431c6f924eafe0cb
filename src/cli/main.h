// The `berth` command line: daemons (server, agent, local) and user commands (exec, queue, logs,
// cancel, nodes, show, drain, undrain). User commands are thin HTTP clients of the server's API.
#pragma once

namespace berth::cli {

// Parses argv and runs the command; returns the process exit status.
int Main(int argc, char** argv);

}  // namespace berth::cli
