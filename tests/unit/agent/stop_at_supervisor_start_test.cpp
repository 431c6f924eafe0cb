// Regression test for "an attached gang exec that failed setup never returns".
//
// The story: a 3-node gang's setup fails on rank 1, so the server stops ranks 0 and 2 — on fresh
// nodes, often a few microseconds after their agents started the supervisors. The agent stops a
// supervisor with SIGTERM. A supervisor used to block SIGTERM only once SupervisorMain was running,
// so a SIGTERM that landed between the fork and that point killed it by the default action: no
// supervisor.pid, no events, only run.json. The agent never saw an "exited" event, never reported
// the rank gone, and the server held the job's resources for good.
//
// Here the real node supervisor (and the fallback SpawnSupervisor) start jobs whose setup sleeps,
// and each is told to stop the moment it is started. Every job must then end with an
// "exited" event of its own (the stop honoured: setup never completes, "running" never comes), and
// no supervisor or job process may be left.
//
// The supervisors are started through the real `berth` binary (`berth __node STATE_DIR`, `berth
// __supervise DIR`), whose path the build passes in as BERTH_BIN.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "agent/launcher.h"
#include "common/clock.h"
#include "common/files.h"
#include "supervise/supervisor.h"
#include "support/processes.h"

namespace berth {
namespace {

std::string BerthBin() { return BERTH_BIN; }

constexpr char kStopTestTag[] = "BERTH_STOP_AT_START_TEST";

// Live processes other than this one whose environment holds kStopTestTag=tag: the supervisors
// (which inherit this process's environment) and the jobs' processes.
std::vector<pid_t> TaggedProcesses(const std::string& tag) {
  return testing::ProcessesWithEnv({std::string(kStopTestTag) + "=" + tag});
}

class StopAtSupervisorStart : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "berth-stop-at-start-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    ::setenv(kStopTestTag, root_.c_str(), 1);  // inherited by every supervisor
  }

  void TearDown() override {
    for (pid_t pid : TaggedProcesses(root_)) ::kill(pid, SIGKILL);
    ::unsetenv(kStopTestTag);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  // A job directory with a run plan whose setup sleeps 120 s: only an honoured stop ends it
  // sooner, and an ignored one would let it reach "running". (5 s was too short on a slow VM under
  // ASan: a stop that reached a node supervisor busy starting 200 ranks more than 5 s after their
  // setups began found one already ended, with exit 0.)
  std::string NewJob(int i) {
    std::string dir = root_ + "/job-" + std::to_string(i);
    std::filesystem::create_directories(dir);
    RunPlan plan;
    plan.workdir = dir;
    plan.setup = "sleep 120";
    plan.run = "true";
    plan.setup_env = {{"PATH", "/usr/bin:/bin"}, {kStopTestTag, root_}};
    plan.run_env = plan.setup_env;
    plan.kill_grace_ms = 1000;
    EXPECT_TRUE(WriteRunPlan(dir, plan).ok());
    return dir;
  }

  // Waits up to 60 s for every job to record its end; returns the directories that did not, each
  // with what it holds. A passing run ends in a few seconds; the bound is for slow machines: under
  // ASan on a VM where creating a process cost ~5 ms, this test and the next one run side by side
  // (ctest -j2) took more than the 10 s allowed before for their 250 supervisors and 500 job
  // processes to start and be stopped, while each alone passed in 5 s.
  std::vector<std::string> JobsWithoutAnEnd(const std::vector<std::string>& dirs) {
    std::vector<std::string> missing;
    int64_t deadline = MonotonicMs() + 60'000;
    for (const auto& dir : dirs) {
      while (true) {
        auto events = ParseEvents(ReadFileOr(dir + "/events"));
        bool ended = !events.empty() && events.back().kind == "exited";
        if (ended) {
          for (const auto& e : events) {
            // The stop was honoured: the job never got past its setup.
            EXPECT_NE(e.kind, "running") << dir;
          }
          EXPECT_NE(events.back().exit_code, 0) << dir << ":\n" << ReadFileOr(dir + "/events");
          break;
        }
        if (MonotonicMs() >= deadline) {
          std::string files;
          for (const auto& f : std::filesystem::directory_iterator(dir))
            files += " " + f.path().filename().string();
          missing.push_back(dir + " (holds:" + files + ")");
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    return missing;
  }

  // Waits up to 30 s for every supervisor and job process to be gone (see above for why so long).
  std::vector<pid_t> Leftovers() {
    int64_t deadline = MonotonicMs() + 30'000;
    std::vector<pid_t> left;
    while (!(left = TaggedProcesses(root_)).empty() && MonotonicMs() < deadline) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // supervisors started by SpawnSupervisor
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return left;
  }

  std::string root_;
};

TEST_F(StopAtSupervisorStart, NodeSupervisorRanksStoppedAtOnceStillRecordAnExit) {
  constexpr int kJobs = 200;
  std::vector<std::string> dirs;
  {
    SupervisorLauncher launcher(BerthBin(), root_);
    for (int i = 0; i < kJobs; ++i) {
      dirs.push_back(NewJob(i));
      auto pid = launcher.Start(dirs.back());
      ASSERT_TRUE(pid.ok()) << pid.status().message();
      launcher.Stop(*pid, dirs.back());  // as Agent::StopJob does when the server's stop arrives
    }
  }  // the agent is gone; the node supervisor finishes its ranks, then exits
  auto missing = JobsWithoutAnEnd(dirs);
  EXPECT_TRUE(missing.empty()) << missing.size() << " of " << kJobs
                               << " ranks ended without an exit event, e.g. " << missing[0];
  EXPECT_EQ(Leftovers(), std::vector<pid_t>{});
}

TEST_F(StopAtSupervisorStart, ExecedSupervisorsStoppedAtOnceStillRecordAnExit) {
  // The agent's fallback: fork + exec from a multi-threaded process whose threads block SIGTERM.
  constexpr int kJobs = 50;
  std::vector<std::string> dirs;
  std::thread launcher([&] {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    for (int i = 0; i < kJobs; ++i) {
      dirs.push_back(NewJob(i));
      auto pid = SpawnSupervisor(BerthBin(), dirs.back());
      ASSERT_TRUE(pid.ok()) << pid.status().message();
      ::kill(*pid, SIGTERM);
    }
  });
  launcher.join();
  auto missing = JobsWithoutAnEnd(dirs);
  EXPECT_TRUE(missing.empty()) << missing.size() << " of " << kJobs
                               << " supervisors died without an exit event, e.g. " << missing[0];
  EXPECT_EQ(Leftovers(), std::vector<pid_t>{});
}

}  // namespace
}  // namespace berth
