// The node supervisor (supervise/node_supervisor.h) through the agent's SupervisorLauncher, with
// the real binary (BERTH_BIN, `__node STATE_DIR`) and real processes: what it records for a rank,
// how it tells whose the processes a rank leaves behind are (and stops only those), how a restarted
// agent reaches the ranks it runs, the lease, a stop signal, and that it leaves when it has nothing
// to do.
#include "supervise/node_supervisor.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "agent/launcher.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "supervise/supervisor.h"
#include "supervise/terminal.h"
#include "support/processes.h"

namespace berth {
namespace {

constexpr char kTag[] = "BERTH_NODE_SUPERVISOR_TEST";

using testing::ProcessesWithEnv;

// Polls `done` until it holds or `ms` passed, reaping the node supervisors this process started.
bool WaitReaping(const std::function<bool()>& done, int64_t ms) {
  const int64_t deadline = MonotonicMs() + ms;
  while (!done()) {
    if (MonotonicMs() >= deadline) return false;
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // node supervisors this process started
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A terminal leg: a connection to the node supervisor's socket that sent `attach DIR OFFSET`.
class Leg {
 public:
  Leg(const std::string& state_dir, const std::string& dir, int64_t offset)
      : Leg(state_dir, "attach " + dir + " " + std::to_string(offset) + "\n") {}
  // One that sent `line` (an `exec`).
  Leg(const std::string& state_dir, const std::string& line) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = state_dir + "/" + kNodeSupervisorSocket;
    std::memcpy(addr.sun_path, path.data(), path.size());
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    // The hello line, then the attach.
    char c;
    while (::read(fd_, &c, 1) == 1 && c != '\n') {
    }
    connected_ = ::write(fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  }
  ~Leg() { Close(); }
  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void Send(TermChannel channel, const std::string& payload) {
    std::string frame;
    AppendTermFrame(&frame, channel, payload);
    ASSERT_EQ(::write(fd_, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  }
  // Reads frames until `done` says so, the leg closes or 10 s pass: output (channel 1) gathers in
  // output(), control frames (channel 3) in controls().
  bool ReadUntil(const std::function<bool()>& done) {
    const int64_t deadline = MonotonicMs() + 10'000;
    while (!done()) {
      size_t used = 0;
      auto frame = TakeTermFrame(in_, &used);
      if (!frame.ok()) return false;
      if (*frame) {
        in_.erase(0, used);
        ((*frame)->channel == TermChannel::kOutput ? output_ : controls_) +=
            (*frame)->channel == TermChannel::kOutput ? (*frame)->payload
                                                      : (*frame)->payload + "\n";
        continue;
      }
      pollfd p{fd_, POLLIN, 0};
      const int64_t left = deadline - MonotonicMs();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n <= 0) {
        closed_ = true;
        return done();
      }
      in_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  const std::string& output() const { return output_; }
  const std::string& controls() const { return controls_; }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string in_, output_, controls_;
};

class NodeSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "berth-node-sup-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    ::setenv(kTag, root_.c_str(), 1);  // inherited by the node supervisor and every job
  }

  void TearDown() override {
    for (pid_t pid : Tagged()) ::kill(pid, SIGKILL);
    ::unsetenv(kTag);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  std::vector<pid_t> Tagged() { return ProcessesWithEnv({std::string(kTag) + "=" + root_}); }
  // The processes of job `job` (rank 0, attempt 1) of this test.
  std::vector<pid_t> JobProcesses(int job) {
    return ProcessesWithEnv(
        {std::string(kTag) + "=" + root_, "BERTH_JOB_ID=" + std::to_string(job)});
  }

  // A rank of job `job` whose run step is `run`.
  std::string NewJob(int job, const std::string& run, const std::string& setup = "",
                     const std::string& pull = "") {
    std::string dir = root_ + "/jobs/" + std::to_string(job) + "-1-0";
    std::filesystem::create_directories(dir);
    RunPlan plan;
    plan.workdir = dir;
    plan.pull = pull;
    plan.setup = setup;
    plan.run = run;
    plan.run_env = {{"PATH", "/usr/bin:/bin"},
                    {kTag, root_},
                    {"BERTH_JOB_ID", std::to_string(job)},
                    {"BERTH_ATTEMPT", "1"},
                    {"BERTH_NODE_RANK", "0"}};
    plan.setup_env = plan.run_env;
    plan.kill_grace_ms = 1000;
    plan.lease_file = lease_file_;
    EXPECT_TRUE(WriteRunPlan(dir, plan).ok());
    return dir;
  }

  static std::vector<SupervisorEvent> Events(const std::string& dir) {
    return ParseEvents(ReadFileOr(dir + "/events"));
  }
  static bool Ended(const std::string& dir) {
    auto events = Events(dir);
    return !events.empty() && events.back().kind == "exited";
  }
  static bool Running(const std::string& dir) {
    auto events = Events(dir);
    return !events.empty() && events.back().kind == "running";
  }

  std::string root_;
  std::string lease_file_;
};

TEST_F(NodeSupervisorTest, RunsEachRankAndRecordsItsEnd) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string a = NewJob(1, "echo out; echo err >&2; exit 3");
  std::string b = NewJob(2, "echo set up", "echo setting");
  auto pa = launcher.Start(a);
  auto pb = launcher.Start(b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(*pa, *pb) << "one supervisor runs every rank of the node";
  ASSERT_TRUE(WaitReaping([&] { return Ended(a) && Ended(b); }, 10'000));

  auto ea = Events(a);
  ASSERT_EQ(ea.size(), 3u);
  EXPECT_EQ(ea[0].kind, "running");
  EXPECT_EQ(ea[1].kind, "usage");  // what the rank used, written with its end
  EXPECT_GE(ea[1].cpu_ms, 0);
  EXPECT_GT(ea[1].peak_memory_bytes, 0);
  EXPECT_EQ(ea[2].kind, "exited");
  EXPECT_EQ(ea[2].exit_code, 3);
  EXPECT_EQ(ea[2].phase, "run");
  EXPECT_EQ(ReadFileOr(a + "/output.log"), "out\nerr\n");
  auto eb = Events(b);
  ASSERT_EQ(eb.size(), 4u);
  EXPECT_EQ(eb[0].kind, "setting_up");
  EXPECT_EQ(eb[1].kind, "running");
  EXPECT_EQ(eb[2].kind, "usage");
  EXPECT_EQ(eb[3].exit_code, 0);
  EXPECT_EQ(ReadFileOr(b + "/output.log"), "setting\nset up\n");
  // Where a restarted agent and `berth local down` find it.
  EXPECT_EQ(ReadFileOr(a + "/supervisor.pid"), std::to_string(*pa) + "\n");
  EXPECT_EQ(ReadFileOr(root_ + "/" + kNodeSupervisorPidFile), std::to_string(*pa) + "\n");
}

// A container rank's pull step (agent/container.h) runs first, as a phase of its own: its image is
// recorded; a failed pull ends the rank in phase "pull" with podman's error, and setup never runs.
TEST_F(NodeSupervisorTest, APullStepComesFirstAndItsFailureEndsTheRank) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string ok = NewJob(1, "echo ran", "echo set", "echo 'berth: image r/x:1 is sha256:ab'");
  std::string bad =
      NewJob(2, "echo ran", "echo set",
             "echo 'Error: reading manifest 1 in r/x: manifest unknown' >&2; exit 125");
  auto pa = launcher.StartWithPull(ok);
  auto pb = launcher.StartWithPull(bad);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(*pa, *pb) << "this node supervisor runs pull steps itself";
  ASSERT_TRUE(WaitReaping([&] { return Ended(ok) && Ended(bad); }, 10'000));
  auto ea = Events(ok);
  ASSERT_EQ(ea.size(), 6u);
  EXPECT_EQ(ea[0].kind, "pulling");
  EXPECT_EQ(ea[0].reason, "");
  EXPECT_EQ(ea[1].kind, "pulling");
  EXPECT_EQ(ea[1].reason, "r/x:1@sha256:ab");
  EXPECT_EQ(ea[2].kind, "setting_up");
  EXPECT_EQ(ea[3].kind, "running");
  EXPECT_EQ(ea[5].exit_code, 0);
  auto eb = Events(bad);
  ASSERT_EQ(eb.size(), 3u);
  EXPECT_EQ(eb[0].kind, "pulling");
  EXPECT_EQ(eb[2].exit_code, 125);
  EXPECT_EQ(eb[2].phase, "pull");
  EXPECT_EQ(eb[2].reason, "image pull failed: reading manifest 1 in r/x: manifest unknown");
  EXPECT_EQ(ReadFileOr(bad + "/output.log").find("set"), std::string::npos) << "setup ran";
}

// A rank's bash exits, leaving a process in a session of its own (with the job's environment) and
// one that shed its environment too. Its end is recorded only once both are gone; a rank running
// beside it is not touched.
TEST_F(NodeSupervisorTest, WhatAnEndedRankLeftIsStoppedAndOnlyThat) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string other = NewJob(2, "sleep 300");
  auto pid = launcher.Start(other);
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitReaping([&] { return Running(other) && !JobProcesses(2).empty(); }, 10'000));
  std::string left = NewJob(1, "setsid sleep 300 & env -i " + std::string(kTag) + "=" + root_ +
                                   " setsid sleep 301 & echo started");
  ASSERT_TRUE(launcher.Start(left).ok());
  ASSERT_TRUE(WaitReaping([&] { return Ended(left); }, 10'000)) << "the strays were never stopped";
  EXPECT_EQ(Events(left).back().exit_code, 0);
  EXPECT_EQ(JobProcesses(1), std::vector<pid_t>{}) << "a stray outlived its rank's end";
  // Only the node supervisor and job 2's sleep are left.
  for (pid_t p : Tagged()) {
    std::string cmdline = ReadFileOr("/proc/" + std::to_string(p) + "/cmdline");
    EXPECT_EQ(cmdline.find("301"), std::string::npos) << "the stray without an environment lives";
  }
  EXPECT_FALSE(JobProcesses(2).empty()) << "the rank beside it was stopped";
  EXPECT_TRUE(Running(other));

  launcher.Stop(*pid, other);
  ASSERT_TRUE(WaitReaping([&] { return Ended(other); }, 10'000));
  EXPECT_EQ(Events(other).back().reason, "stopped");
  EXPECT_EQ(Events(other).back().exit_code, 128 + SIGTERM);
}

// An interactive rank (RunPlan::tty) runs on a terminal of the size asked for, as the leader of a
// session of its own, with stdin, stdout and stderr on it; what it prints reaches output.log
// through the terminal (so with its line ends as "\r\n"), and its exit code is its rank's.
TEST_F(NodeSupervisorTest, AnInteractiveRankRunsOnATerminalOfItsOwn) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1,
                           "test -t 0 && test -t 1 && test -t 2 && echo on-a-terminal; "
                           "stty size; read -r _ _ _ _ _ sid _ < /proc/$$/stat; "
                           "[ \"$sid\" = \"$$\" ] && echo session-leader; exit 7",
                           "echo setup-not-on-a-terminal; test -t 1 || echo plain");
  auto plan = ReadRunPlan(dir);
  ASSERT_TRUE(plan.ok());
  plan->tty = RunPlan::Tty{33, 101};
  ASSERT_TRUE(WriteRunPlan(dir, *plan).ok());
  auto read_back = ReadRunPlan(dir);
  ASSERT_TRUE(read_back.ok() && read_back->tty);
  EXPECT_EQ(read_back->tty->rows, 33);
  EXPECT_EQ(read_back->tty->cols, 101);
  ASSERT_TRUE(launcher.Start(dir).ok());
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(Events(dir).back().exit_code, 7);
  EXPECT_EQ(Events(dir).back().phase, "run");
  EXPECT_EQ(ReadFileOr(dir + "/output.log"),
            "setup-not-on-a-terminal\nplain\non-a-terminal\r\n33 101\r\nsession-leader\r\n");
}

// As root, an interactive rank of another user gets a terminal that user owns (mode 0620), as
// a login would give, for the programs that open it again by name.
TEST_F(NodeSupervisorTest, AnotherUsersInteractiveRankOwnsItsTerminal) {
  if (::geteuid() != 0) GTEST_SKIP() << "running a rank as another user needs root";
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "id -u; stat -c '%u %a' \"$(tty)\"");
  auto plan = ReadRunPlan(dir);
  ASSERT_TRUE(plan.ok());
  plan->tty = RunPlan::Tty{};
  plan->run_as = RunPlan::RunAs{"nobody", 65534, 65534, {65534}};
  plan->workdir = "/";
  ASSERT_TRUE(WriteRunPlan(dir, *plan).ok());
  ASSERT_TRUE(launcher.Start(dir).ok());
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(Events(dir).back().exit_code, 0) << ReadFileOr(dir + "/output.log");
  EXPECT_EQ(ReadFileOr(dir + "/output.log"), "65534\r\n65534 620\r\n");
}

// An attached leg gets where its output starts and what the job prints, types to the job, resizes
// its terminal, and gets the rank's exit, after which the leg closes.
TEST_F(NodeSupervisorTest, AnAttachedLegTypesResizesAndSeesTheExit) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1,
                           "stty -echo; echo ready; read -r line; echo \"got:$line\"; "
                           "read -r _; stty size; exit 5");
  auto plan = ReadRunPlan(dir);
  ASSERT_TRUE(plan.ok());
  plan->tty = RunPlan::Tty{};
  ASSERT_TRUE(WriteRunPlan(dir, *plan).ok());
  ASSERT_TRUE(launcher.Start(dir).ok());
  ASSERT_TRUE(WaitReaping([&] { return ReadFileOr(dir + "/output.log") == "ready\r\n"; }, 10'000));
  Leg leg(root_, dir, 0);
  ASSERT_TRUE(leg.connected());
  ASSERT_TRUE(leg.ReadUntil([&] { return leg.output() == "ready\r\n"; })) << leg.output();
  EXPECT_EQ(leg.controls(), "{\"from\":0}\n");
  leg.Send(TermChannel::kStdin, "hello\n");
  ASSERT_TRUE(leg.ReadUntil([&] { return leg.output() == "ready\r\ngot:hello\r\n"; }))
      << leg.output();
  leg.Send(TermChannel::kControl, R"({"resize":[40,120]})");
  leg.Send(TermChannel::kStdin, "\n");
  ASSERT_TRUE(leg.ReadUntil([&] { return leg.closed(); }));
  EXPECT_EQ(leg.output(), "ready\r\ngot:hello\r\n40 120\r\n");
  EXPECT_EQ(leg.controls(), "{\"from\":0}\n{\"exit\":5,\"reason\":\"\"}\n");
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(Events(dir).back().exit_code, 5);
}

// A leg that goes away leaves the job running; one attached later gets the scrollback from the
// offset it asks for, and a signal it sends reaches the job's foreground process group.
TEST_F(NodeSupervisorTest, ALegThatLeavesLeavesTheJobAndAnotherReplaysFromItsOffset) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "echo line1; echo line2; sleep 300");
  auto plan = ReadRunPlan(dir);
  ASSERT_TRUE(plan.ok());
  plan->tty = RunPlan::Tty{};
  ASSERT_TRUE(WriteRunPlan(dir, *plan).ok());
  ASSERT_TRUE(launcher.Start(dir).ok());
  {
    Leg first(root_, dir, 0);
    ASSERT_TRUE(first.ReadUntil([&] { return first.output() == "line1\r\nline2\r\n"; }))
        << first.output();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(Running(dir)) << "the job ended with its leg";
  Leg second(root_, dir, 7);  // "line1\r\n" seen already
  ASSERT_TRUE(second.ReadUntil([&] { return second.output() == "line2\r\n"; })) << second.output();
  EXPECT_EQ(second.controls(), "{\"from\":7}\n");
  second.Send(TermChannel::kControl, R"({"signal":2})");
  ASSERT_TRUE(second.ReadUntil([&] { return second.closed(); }));
  EXPECT_NE(second.controls().find("\"exit\":130"), std::string::npos) << second.controls();
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(Events(dir).back().exit_code, 130);
  // A rank without a terminal (or no rank at all) refuses a leg, saying so.
  Leg refused(root_, root_ + "/jobs/9-1-0", 0);
  ASSERT_TRUE(refused.ReadUntil([&] { return refused.closed(); }));
  EXPECT_NE(refused.controls().find("no interactive rank runs in"), std::string::npos)
      << refused.controls();
}

std::string ExecLine(const std::string& dir, const std::string& command, bool tty, int rows = 24,
                     int cols = 80) {
  return "exec " +
         SerializeJson(json::object{
             {"dir", dir}, {"command", command}, {"tty", tty}, {"rows", rows}, {"cols", cols}}) +
         "\n";
}

// A command run into a running (batch) rank: in its work dir and environment, in the same cgroups
// as the rank's own processes, its output and exit on its leg, and the rank goes on.
TEST_F(NodeSupervisorTest, ACommandRunIntoARankIsOneOfItsOwn) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "echo $$ > main.pid; sleep 300");
  ASSERT_TRUE(launcher.Start(dir).ok());
  ASSERT_TRUE(WaitReaping([&] { return !ReadFileOr(dir + "/main.pid").empty(); }, 10'000));
  const std::string main_pid = Trim(ReadFileOr(dir + "/main.pid"));
  Leg exec(root_, ExecLine(dir,
                           "echo job=$BERTH_JOB_ID; pwd; test -t 1 || echo no-terminal; "
                           "cmp -s /proc/self/cgroup /proc/" +
                               main_pid + "/cgroup && echo same-cgroup; echo to-stderr >&2; exit 3",
                           false));
  ASSERT_TRUE(exec.connected());
  ASSERT_TRUE(exec.ReadUntil([&] { return exec.closed(); })) << exec.output() << exec.controls();
  EXPECT_EQ(exec.output(), "job=1\n" + dir + "\nno-terminal\nsame-cgroup\nto-stderr\n");
  EXPECT_EQ(exec.controls(), "{\"from\":0}\n{\"exit\":3,\"reason\":\"\"}\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(Running(dir)) << "the rank ended with the command";
  // With a terminal: its size, and typing reaches the command.
  Leg tty(root_, ExecLine(dir,
                          "stty size; stty -echo; echo ready; read -r line; echo \"got:$line\"; "
                          "exit 4",
                          true, 30, 90));
  ASSERT_TRUE(tty.ReadUntil([&] { return tty.output() == "30 90\r\nready\r\n"; })) << tty.output();
  tty.Send(TermChannel::kStdin, "typed\n");
  ASSERT_TRUE(tty.ReadUntil([&] { return tty.closed(); })) << tty.output();
  EXPECT_EQ(tty.output(), "30 90\r\nready\r\ngot:typed\r\n");
  EXPECT_NE(tty.controls().find("\"exit\":4"), std::string::npos) << tty.controls();
  // A rank that does not run here refuses, saying why.
  Leg refused(root_, ExecLine(root_ + "/jobs/9-1-0", "true", false));
  ASSERT_TRUE(refused.ReadUntil([&] { return refused.closed(); }));
  EXPECT_NE(refused.controls().find("is not running here"), std::string::npos)
      << refused.controls();
}

// As root, a command run into another user's rank runs as that user.
TEST_F(NodeSupervisorTest, ACommandRunIntoAnotherUsersRankRunsAsThatUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "running a rank as another user needs root";
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "sleep 300");
  auto plan = ReadRunPlan(dir);
  ASSERT_TRUE(plan.ok());
  plan->run_as = RunPlan::RunAs{"nobody", 65534, 65534, {65534}};
  plan->workdir = "/";
  ASSERT_TRUE(WriteRunPlan(dir, *plan).ok());
  auto pid = launcher.Start(dir);
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitReaping([&] { return Running(dir); }, 10'000));
  Leg exec(root_, ExecLine(dir, "id -u; id -g; pwd", false));
  ASSERT_TRUE(exec.ReadUntil([&] { return exec.closed(); })) << exec.output();
  EXPECT_EQ(exec.output(), "65534\n65534\n/\n");
  launcher.Stop(*pid, dir);
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
}

// A command whose leg goes away is hung up; one still running when its rank stops goes with it.
TEST_F(NodeSupervisorTest, ACommandRunIntoARankEndsWithItsLegOrItsRank) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "echo started > main.txt; sleep 300");
  auto pid = launcher.Start(dir);
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitReaping([&] { return !ReadFileOr(dir + "/main.txt").empty(); }, 10'000));
  pid_t hung_up = 0;
  {
    Leg exec(root_, ExecLine(dir, "echo $$; exec sleep 301", false));
    ASSERT_TRUE(exec.ReadUntil([&] { return exec.output().find('\n') != std::string::npos; }));
    hung_up = std::stoi(exec.output());
  }
  ASSERT_TRUE(WaitReaping([&] { return ::kill(hung_up, 0) != 0; }, 10'000)) << "not hung up";
  EXPECT_TRUE(Running(dir));
  Leg lingering(root_, ExecLine(dir, "echo ready; exec sleep 302", false));
  ASSERT_TRUE(lingering.ReadUntil([&] { return lingering.output() == "ready\n"; }));
  launcher.Stop(*pid, dir);
  ASSERT_TRUE(lingering.ReadUntil([&] { return lingering.closed(); }));
  EXPECT_NE(lingering.controls().find("\"exit\":143"), std::string::npos) << lingering.controls();
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(JobProcesses(1), std::vector<pid_t>{});
}

// A stop reaches an interactive rank's processes like any other's.
TEST_F(NodeSupervisorTest, AnInteractiveRankStops) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "echo ready; sleep 300");
  auto plan = ReadRunPlan(dir);
  ASSERT_TRUE(plan.ok());
  plan->tty = RunPlan::Tty{};
  ASSERT_TRUE(WriteRunPlan(dir, *plan).ok());
  auto pid = launcher.Start(dir);
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitReaping([&] { return ReadFileOr(dir + "/output.log") == "ready\r\n"; }, 10'000));
  launcher.Stop(*pid, dir);
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(Events(dir).back().reason, "stopped");
  EXPECT_EQ(JobProcesses(1), std::vector<pid_t>{});
}

// A container's monitor (podman's conmon) leaves its rank's process group and environment; its
// command line names the container (berth-JOB-ATTEMPT-RANK-STEP). Another rank's end leaves it
// alone; its own rank's stop takes it.
TEST_F(NodeSupervisorTest, AContainerMonitorIsItsRanksNotAnyEndingRanks) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string container = NewJob(
      2, "(env -i " + std::string(kTag) + "=" + root_ +
             " setsid bash -c \"exec -a conmon bash -c 'sleep 302; :' x -n berth-2-1-0-run\" "
             "&); sleep 300");
  auto pid = launcher.Start(container);
  ASSERT_TRUE(pid.ok());
  // The monitor itself, once it bears its name: until bash has run `exec -a conmon`, it is a
  // bash that no supervisor could tell for a monitor (and one that ends with any rank, as a stray
  // of nobody's). Waiting for any process with "302" in its command line let the quick rank end in
  // that window on a busy machine.
  auto monitor = [&] {
    for (pid_t p : Tagged()) {
      const std::string cmdline = ReadFileOr("/proc/" + std::to_string(p) + "/cmdline");
      if (cmdline.rfind("conmon", 0) == 0 && cmdline.find("302") != std::string::npos) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitReaping([&] { return Running(container) && monitor(); }, 10'000));
  std::string quick = NewJob(1, "echo done");
  ASSERT_TRUE(launcher.Start(quick).ok());
  ASSERT_TRUE(WaitReaping([&] { return Ended(quick); }, 10'000));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // (what an end stops goes at once)
  EXPECT_TRUE(monitor()) << "another rank's end stopped the container's monitor";
  EXPECT_TRUE(Running(container));
  launcher.Stop(*pid, container);
  ASSERT_TRUE(WaitReaping([&] { return Ended(container); }, 10'000));
  EXPECT_FALSE(monitor()) << "the monitor outlived its rank";
}

// The agent restarts: a new launcher reaches the node supervisor the old one started, and stops a
// rank it runs. With nothing left to run and no agent, the node supervisor leaves.
TEST_F(NodeSupervisorTest, ARestartedAgentReachesItsRanksAndAnIdleSupervisorLeaves) {
  std::string dir = NewJob(1, "sleep 300");
  pid_t first = 0;
  {
    SupervisorLauncher launcher(BERTH_BIN, root_);
    auto pid = launcher.Start(dir);
    ASSERT_TRUE(pid.ok());
    first = *pid;
    ASSERT_TRUE(WaitReaping([&] { return Running(dir); }, 10'000));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(Running(dir)) << "the rank ended with the agent";
  {
    SupervisorLauncher launcher(BERTH_BIN, root_);
    EXPECT_TRUE(launcher.Alive(first));
    launcher.Stop(first, dir);
    ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
    EXPECT_EQ(Events(dir).back().reason, "stopped");
    EXPECT_TRUE(launcher.Alive(first)) << "it left while an agent was connected";
  }
  EXPECT_TRUE(WaitReaping([&] { return Tagged().empty(); }, 5000)) << "it stayed, idle";
  EXPECT_FALSE(std::filesystem::exists(root_ + "/" + kNodeSupervisorSocket));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/" + kNodeSupervisorPidFile));
}

// Without lease renewals (the agent is cut off) the node supervisor stops every rank by itself.
TEST_F(NodeSupervisorTest, AnExpiredLeaseStopsEveryRank) {
  lease_file_ = root_ + "/lease";
  int64_t now = MonotonicMs();
  ASSERT_TRUE(WriteLeaseFile(lease_file_, now, 600'000).ok());
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string a = NewJob(1, "sleep 300");
  std::string b = NewJob(2, "sleep 300");
  ASSERT_TRUE(launcher.Start(a).ok());
  ASSERT_TRUE(launcher.Start(b).ok());
  ASSERT_TRUE(WaitReaping([&] { return Running(a) && Running(b); }, 10'000));
  // Renewed last 10 minutes ago: past both deadlines.
  ASSERT_TRUE(WriteLeaseFile(lease_file_, now - 600'000, 600'000).ok());
  ASSERT_TRUE(WaitReaping([&] { return Ended(a) && Ended(b); }, 10'000));
  EXPECT_EQ(Events(a).back().reason, "stopped");
  EXPECT_EQ(Events(b).back().reason, "stopped");
  EXPECT_EQ(JobProcesses(1), std::vector<pid_t>{});
  EXPECT_EQ(JobProcesses(2), std::vector<pid_t>{});
}

// The task's `signal` goes to the run step once, warn_after_ms after it starts, and the step runs
// on.
TEST_F(NodeSupervisorTest, TheWarningSignalComesOnceAndOnTime) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string dir = NewJob(1, "trap 'echo warned' USR1; for i in $(seq 40); do sleep 0.02; done");
  RunPlan plan = ReadRunPlan(dir).value();
  plan.warn_signal = SIGUSR1;
  plan.warn_after_ms = 300;
  ASSERT_TRUE(WriteRunPlan(dir, plan).ok());
  int64_t started = MonotonicMs();
  ASSERT_TRUE(launcher.Start(dir).ok());
  // The group gets the signal: bash may also say that a `sleep` died of it.
  auto warnings = [&] {
    std::string log = ReadFileOr(dir + "/output.log");
    int n = 0;
    for (size_t at = 0; (at = log.find("warned\n", at)) != std::string::npos; at += 7) ++n;
    return n;
  };
  ASSERT_TRUE(WaitReaping([&] { return warnings() == 1; }, 10'000))
      << ReadFileOr(dir + "/output.log") << ReadFileOr(dir + "/events");
  EXPECT_GE(MonotonicMs() - started, 300);
  ASSERT_TRUE(WaitReaping([&] { return Ended(dir); }, 10'000));
  EXPECT_EQ(Events(dir).back().exit_code, 0);
  EXPECT_EQ(warnings(), 1) << "the warning came more than once";
}

// A node runs more ranks at once than a process may hold files open by default (1024): the node
// supervisor holds no file per running rank. Here it may open 48 and runs 100.
TEST_F(NodeSupervisorTest, RunsMoreRanksAtOnceThanItMayOpenFiles) {
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit few = old;
  few.rlim_cur = 48;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &few), 0);  // inherited by the node supervisor
  std::vector<std::string> dirs;
  pid_t pid = 0;
  {
    SupervisorLauncher launcher(BERTH_BIN, root_);
    for (int job = 1; job <= 100; ++job) {
      dirs.push_back(NewJob(job, "sleep 300"));
      auto started = launcher.Start(dirs.back());
      ASSERT_TRUE(started.ok());
      pid = *started;
    }
    ::setrlimit(RLIMIT_NOFILE, &old);
    EXPECT_TRUE(WaitReaping(
        [&] {
          return std::all_of(dirs.begin(), dirs.end(), [](const auto& d) { return Running(d); });
        },
        20'000));
    for (const auto& dir : dirs) {
      EXPECT_TRUE(Running(dir)) << dir << ": " << ReadFileOr(dir + "/events");
    }
  }
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_TRUE(WaitReaping(
      [&] { return std::all_of(dirs.begin(), dirs.end(), [](const auto& d) { return Ended(d); }); },
      20'000));
  EXPECT_TRUE(WaitReaping([&] { return Tagged().empty(); }, 10'000));
}

// `berth local down` sends SIGTERM to the node supervisor: every rank is stopped, its end recorded,
// and the node supervisor exits.
TEST_F(NodeSupervisorTest, AStopSignalStopsEveryRankAndEndsIt) {
  SupervisorLauncher launcher(BERTH_BIN, root_);
  std::string a = NewJob(1, "sleep 300");
  std::string b = NewJob(2, "trap '' TERM; sleep 300", "true");
  auto pid = launcher.Start(a);
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(launcher.Start(b).ok());
  ASSERT_TRUE(WaitReaping([&] { return Running(a) && Running(b); }, 10'000));
  ASSERT_EQ(::kill(*pid, SIGTERM), 0);
  // b ignores SIGTERM in its bash: SIGKILL after its 1 s grace.
  ASSERT_TRUE(WaitReaping([&] { return Ended(a) && Ended(b); }, 10'000));
  EXPECT_EQ(Events(a).back().reason, "stopped");
  EXPECT_EQ(Events(b).back().reason, "stopped");
  EXPECT_TRUE(WaitReaping([&] { return !launcher.Alive(*pid); }, 5000));
  EXPECT_TRUE(WaitReaping([&] { return Tagged().empty(); }, 5000));
}

// Exit code 127 said only "exit code 127": the shell's complaint names what was not found.
TEST(ExitReasonTest, NamesTheCommandThatWasNotFound) {
  TempDir dir;
  const std::string log = dir.File("output.log");
  std::ofstream(log) << "starting\nbash: line 3: python: command not found\n";
  EXPECT_EQ(ExitReason(log, 127), "command not found: python");
  std::ofstream(log) << "sh: 1: trian.py: not found\n";
  EXPECT_EQ(ExitReason(log, 127), "command not found: trian.py");
  std::ofstream(log) << "bash: line 1: ./train.sh: Permission denied\n";
  EXPECT_EQ(ExitReason(log, 126), "not executable: ./train.sh");
  EXPECT_EQ(ExitReason(log, 1), "");  // other codes: the job's own
  std::ofstream(log) << "nothing about it\n";
  EXPECT_EQ(ExitReason(log, 127), "");
  EXPECT_EQ(ExitReason(dir.File("missing.log"), 127), "");
}

}  // namespace
}  // namespace berth
