// berth: one binary for the server, the agent and the user commands.
#include "cli/main.h"

#include "exe/daemons.h"

int main(int argc, char** argv) {
  using namespace berth;
  cli::Daemons daemons{exe::RunServer, exe::RunAgent, exe::RunSupervisor, exe::RunNodeSupervisor,
                       exe::RunOpenApi};
  return cli::Main(argc, argv, daemons);
}
