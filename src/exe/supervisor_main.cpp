// berth-supervisor: the node supervisor (`berth-supervisor __node STATE_DIR`, started by the agent
// with its listening socket as fd 3), which runs every job rank of the node, and the per-rank
// supervisor of the agent's fallback (`berth-supervisor __supervise DIR`). A static image with
// nothing but supervise/ in it, so that its start and each job's clone are cheap
// (src/CMakeLists.txt says why that matters). Not a command for users: the agent starts it from
// beside berth-daemon.
#include <cstdio>
#include <cstring>

#include "supervise/node_supervisor.h"
#include "supervise/supervisor.h"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "__supervise") == 0) return berth::SupervisorMain(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "__node") == 0)
    return berth::NodeSupervisorMain(3, argv[2]);
  std::fprintf(stderr,
               "berth-supervisor runs berth's jobs for the agent (berth agent); it takes no "
               "commands of its own\nusage: berth-supervisor __node STATE_DIR | __supervise DIR\n");
  return 2;
}
