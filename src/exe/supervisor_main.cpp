// berth-supervisor: the agent's spawner (`berth-supervisor __spawner`) and the job supervisors it
// forks, one per running job rank (`berth-supervisor __supervise DIR` when started by hand or by
// the agent's fallback). A static image with nothing but supervise/ in it, so that each fork of it
// and each exit is cheap (src/CMakeLists.txt says why that matters). Not a command for users: the
// agent starts it from beside berth-daemon.
#include <cstdio>
#include <cstring>

#include "supervise/spawner.h"
#include "supervise/supervisor.h"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "__supervise") == 0) return berth::SupervisorMain(argv[2]);
  if (argc == 2 && std::strcmp(argv[1], "__spawner") == 0) return berth::SpawnerMain();
  std::fprintf(stderr,
               "berth-supervisor runs berth's jobs for the agent (berth agent); it takes no "
               "commands of its own\nusage: berth-supervisor __spawner | __supervise DIR\n");
  return 2;
}
