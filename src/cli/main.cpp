#include "cli/main.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli/arguments.h"
#include "cli/command_context.h"

namespace berth::cli {

namespace {

std::string SelfExe(const char* argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

struct Command {
  std::string_view name;
  void (*add)(CommandContext&);
};
// Every command, in the order `berth --help` lists them.
constexpr std::array kCommands = {
    Command{"server", AddServerCommand},       Command{"agent", AddAgentCommand},
    Command{"local", AddLocalCommand},         Command{"exec", AddExecCommand},
    Command{"shell", AddShellCommand},         Command{"workdir", AddWorkdirCommand},
    Command{"image", AddImageCommand},         Command{"update", AddUpdateCommand},
    Command{"queue", AddQueueCommand},         Command{"top", AddTopCommand},
    Command{"wait", AddWaitCommand},           Command{"logs", AddLogsCommand},
    Command{"attach", AddAttachCommand},       Command{"port-forward", AddPortForwardCommand},
    Command{"cancel", AddCancelCommand},       Command{"requeue", AddRequeueCommand},
    Command{"show", AddShowCommand},           Command{"nodes", AddNodesCommand},
    Command{"drain", AddDrainCommand},         Command{"undrain", AddUndrainCommand},
    Command{"status", AddStatusCommand},       Command{"whoami", AddWhoamiCommand},
    Command{"dashboard", AddDashboardCommand}, Command{"login", AddLoginCommand},
    Command{"usage", AddUsageCommand},         Command{"admin", AddAdminCommand},
    Command{"notify", AddNotifyCommand},       Command{"openapi", AddOpenApiCommand},
    Command{"reserve", AddReserveCommand},
};

}  // namespace

void CommandContext::AddGlobal(CLI::App* cmd) {
  cmd->add_option("--server", g.server,
                  "Server URL, or several servers sharing one store, comma-separated (default: "
                  "BERTH_SERVER, `berth login`'s, the local cluster)");
  cmd->add_option("--token", g.token,
                  "Your token (default: BERTH_TOKEN, BERTH_TOKEN_FILE, `berth login`'s); not "
                  "needed on the server's machine, whose unix socket identifies you");
}

int Main(int argc, char** argv, const Daemons& daemons) {
  // The job supervisor starts for every job: keep its path free of argument parsing.
  if (argc == 3 && std::strcmp(argv[1], "__supervise") == 0) return daemons.supervise(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "__node") == 0) return daemons.node_supervisor(argv[2]);

  CLI::App app{
      "berth: a job queue and batch scheduler for GPU clusters.\n"
      "User commands find the server in --server, then BERTH_SERVER, then the one saved by\n"
      "`berth login`, then the local cluster of BERTH_HOME (default ~/.berth), which they start\n"
      "if it is not running. Server URLs: http://HOST:PORT, https://HOST:PORT, unix:/PATH."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "berth " BERTH_VERSION);
  GlobalFlags g;
  g.self_exe = SelfExe(argv[0]);
  CommandContext context(app, g, daemons, argc, argv);
  // Only the table of the command argv names is built: building all of them is most of what a
  // command like `exec -d` spends before it sends its request. Anything else (--help, a typo,
  // --version) gets every command.
  const std::string_view named = argc > 1 ? argv[1] : "";
  const bool one = std::any_of(kCommands.begin(), kCommands.end(),
                               [&](const Command& cmd) { return cmd.name == named; });
  for (const Command& cmd : kCommands) {
    if (!one || cmd.name == named) cmd.add(context);
  }
  // --server and --token also before the command (`berth --server URL queue`).
  context.AddGlobal(&app);
  std::vector<std::string> args(argv + 1, argv + argc);
  const size_t at = SubcommandIndex(app, args);
  if (at < args.size() && args[at] == "exec") {
    std::vector<std::string> rest(args.begin() + static_cast<std::ptrdiff_t>(at) + 1, args.end());
    rest = MarkExecCommand(*app.get_subcommand("exec"), std::move(rest));
    args.resize(at + 1);
    args.insert(args.end(), rest.begin(), rest.end());
  }
  try {
    // CLI11 takes a vector of arguments last first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, args, e);
  }
  return context.rc;
}

}  // namespace berth::cli
