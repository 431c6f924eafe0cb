#include "agent/mig_layout.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace berth {

namespace {

std::vector<std::string> Nvsmi(int gpu, std::vector<std::string> args) {
  std::vector<std::string> argv = {"nvidia-smi", "mig", "-i", std::to_string(gpu)};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<std::string> Create(int gpu, const std::vector<std::string>& profiles) {
  return Nvsmi(gpu, {"-cgi", Join(profiles, ","), "-C"});
}

}  // namespace

std::vector<std::vector<std::string>> MigLayoutCommands(int gpu, const std::vector<MigSlice>& old,
                                                        const std::vector<std::string>& to) {
  std::vector<std::vector<std::string>> out;
  for (const MigSlice& s : old) {
    out.push_back(Nvsmi(gpu, {"-gi", std::to_string(s.gi), "-ci", std::to_string(s.ci), "-dci"}));
    out.push_back(Nvsmi(gpu, {"-gi", std::to_string(s.gi), "-dgi"}));
  }
  if (!to.empty()) out.push_back(Create(gpu, to));
  return out;
}

Status ApplyMigLayout(CommandRunner& runner, int gpu, const std::vector<MigSlice>& old,
                      const std::vector<std::string>& to, DurationMs timeout_ms) {
  const auto commands = MigLayoutCommands(gpu, old, to);
  for (size_t i = 0; i < commands.size(); ++i) {
    const CommandOutcome got =
        runner.Run({.argv = commands[i], .env = {}, .timeout = timeout_ms}, {});
    if (got.ok()) continue;
    const std::string why = "`" + Join(commands[i], " ") + "` failed: " + got.Failure();
    const bool destroyed_some = i > 0;
    if (destroyed_some && !old.empty()) {
      // Put back what it had: the GPU was idle, so nothing ran on what went.
      std::vector<std::string> profiles;
      for (const MigSlice& s : old) profiles.push_back(s.profile);
      const CommandOutcome back =
          runner.Run({.argv = Create(gpu, profiles), .env = {}, .timeout = timeout_ms}, {});
      if (!back.ok()) return Status::Internal(why + "; putting the old layout back failed too");
    }
    return Status::Internal(why);
  }
  return Status::Ok();
}

CommandOutcome RecordingCommandRunner::Run(const TimedCommand& command,
                                           const std::function<bool()>& /*abort*/) {
  CommandOutcome out;
  const std::string line = Join(command.argv, " ") + "\n";
  const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    out.start_error = "cannot record in " + log_path_ + ": " + strerror(errno);
    if (fd >= 0) ::close(fd);
    return out;
  }
  ::close(fd);
  out.exit_code = 0;
  return out;
}

}  // namespace berth
