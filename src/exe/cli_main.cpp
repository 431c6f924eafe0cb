// berth, the command users type: the user commands in a small image that starts fast (no
// database, scheduler or agent code, its libraries linked in statically where Debian ships them
// so). The long-running processes live in berth-daemon, installed beside it: `berth server`,
// `berth agent` and the agent's helpers check their flags here, then exec berth-daemon with the
// same arguments (same pid: whoever started `berth server` holds the server's pid).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/main.h"

namespace {

char** g_argv = nullptr;

int ExecDaemon() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = ".";
  if (n > 0) {
    self[n] = '\0';
    dir = self;
    dir = dir.substr(0, dir.rfind('/'));
  }
  const std::string daemon = dir + "/berth-daemon";
  ::execv(daemon.c_str(), g_argv);
  std::fprintf(stderr,
               "berth: cannot start %s (%s): the server and the agent run from berth-daemon, "
               "which belongs beside berth\n",
               daemon.c_str(), std::strerror(errno));
  return 127;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace berth;
  g_argv = argv;
  cli::Daemons daemons{
      [](const cli::ServerFlags&) { return ExecDaemon(); },
      [](const cli::AgentFlags&, const std::string&) { return ExecDaemon(); },
      [](const std::string&) { return ExecDaemon(); },
      [](const std::string&) { return ExecDaemon(); },
      [](const std::string&) { return ExecDaemon(); },
  };
  return cli::Main(argc, argv, daemons);
}
