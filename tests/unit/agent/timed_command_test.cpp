// ProcessRunner against real processes: exit codes and output, a hard timeout that kills the whole
// process group, abort, and an exit status that a concurrent waitpid(-1) cannot steal.
#include "supervise/timed_command.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "common/files.h"
#include "common/strings.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using testing::TempDir;

TEST(TimedCommand, ExitCodeAndOutput) {
  ProcessRunner runner;
  auto ok = runner.Run({{"sh", "-c", "echo out; echo err >&2"}, {}, 10'000}, {});
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.output, "out\nerr\n");
  auto bad = runner.Run({{"/bin/sh", "-c", "echo '  disk full  '; exit 3"}, {}, 10'000}, {});
  EXPECT_EQ(bad.exit_code, 3);
  EXPECT_EQ(bad.Failure(), "exit code 3: disk full");
  auto env = runner.Run({{"/bin/sh", "-c", "echo $ONLY-$HOME"}, {{"ONLY", "this"}}, 10'000}, {});
  EXPECT_EQ(env.output, "this-\n") << "the environment given is the whole environment";
  auto missing = runner.Run({{"no-such-command-here"}, {}, 10'000}, {});
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.Failure(), "cannot run no-such-command-here: not found or not executable");
}

TEST(TimedCommand, ATimeoutKillsTheWholeGroup) {
  TempDir dir;
  const std::string pid_file = dir.File("child.pid");
  ProcessRunner runner;
  auto got = runner.Run(
      {{"/bin/sh", "-c", "sleep 1000 & echo $! > " + pid_file + "; echo started; wait"}, {}, 300},
      {});
  EXPECT_TRUE(got.timed_out);
  EXPECT_FALSE(got.exit_code);
  EXPECT_EQ(got.output, "started\n");
  EXPECT_EQ(got.Failure(), "timed out after 300ms") << "the limit, not how long the kill took";
  EXPECT_LT(got.duration_ms, 5000);
  const pid_t child = std::atoi(Trim(ReadFileOr(pid_file)).c_str());
  ASSERT_GT(child, 0);
  // The background sleep was in the group: gone (or a zombie of init's, about to be).
  for (int i = 0; i < 100 && ::kill(child, 0) == 0; ++i) ::usleep(10'000);
  std::string stat = ReadFileOr("/proc/" + std::to_string(child) + "/stat");
  EXPECT_TRUE(stat.empty() || stat.find(") Z ") != std::string::npos) << stat;
}

// Scripts such as LBNL NHC re-run themselves in a new session unless they lead their process
// group, and would then escape the kill at the timeout.
TEST(TimedCommand, TheCommandLeadsItsOwnProcessGroup) {
  ProcessRunner runner;
  auto got =
      runner.Run({{"/bin/sh", "-c", "echo $$; cut -d' ' -f5 /proc/$$/stat"}, {}, 10'000}, {});
  ASSERT_TRUE(got.ok()) << got.Failure();
  auto lines = Split(Trim(got.output), '\n');
  ASSERT_EQ(lines.size(), 2u) << got.output;
  EXPECT_EQ(lines[0], lines[1]) << "pid and process group";
  EXPECT_NE(lines[1], std::to_string(::getpgrp()));
}

TEST(TimedCommand, AbortStopsIt) {
  ProcessRunner runner;
  std::atomic<int> asked{0};
  auto got = runner.Run({{"sleep", "1000"}, {}, 60'000}, [&] { return ++asked > 2; });
  EXPECT_TRUE(got.aborted);
  EXPECT_FALSE(got.ok());
  EXPECT_LT(got.duration_ms, 10'000);
}

TEST(TimedCommand, OutputIsCapped) {
  ProcessRunner runner;
  auto got = runner.Run({{"sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"}, {}, 10'000}, {});
  EXPECT_TRUE(got.ok());
  EXPECT_EQ(got.output.size(), CommandOutcome::kMaxOutput);
}

TEST(TimedCommand, AConcurrentReaperDoesNotTakeTheExitStatus) {
  // The agent reaps its supervisors with waitpid(-1): it may reap the runner's watcher, never
  // the command's status.
  std::atomic<bool> done{false};
  std::thread reaper([&] {
    while (!done) {
      ::waitpid(-1, nullptr, WNOHANG);
      ::usleep(100);
    }
  });
  ProcessRunner runner;
  for (int i = 0; i < 20; ++i) {
    auto got = runner.Run({{"/bin/sh", "-c", "exit 5"}, {}, 10'000}, {});
    EXPECT_EQ(got.exit_code, 5) << got.Failure();
  }
  done = true;
  reaper.join();
}

}  // namespace
}  // namespace berth
