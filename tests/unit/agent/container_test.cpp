// Container scripts (agent/container.h): what podman is told, and the pull step's logic run by
// bash against a fake podman (a script that answers like podman and records its calls).
#include "agent/container.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "common/strings.h"
#include "fakes/fake_health.h"
#include "fakes/temp_dir.h"
#include "supervise/cgroup.h"
#include "supervise/supervisor.h"

namespace berth {
namespace {

using berth::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

ContainerHost Host(const std::string& podman, const std::string& store) {
  ContainerHost host;
  host.runtime = "podman";
  host.version = "4.3.1";
  host.podman = podman;
  host.oci_runtime = "/usr/sbin/runc";
  host.store_dir = store;
  host.run_dir = store + "/short";
  host.insecure_registries = {"127.0.0.1:5000"};
  host.pull_retries = 2;
  host.registry_probe_ms = 0;  // nothing listens on 127.0.0.1:5000: see the probe's own test
  return host;
}

ContainerRank Rank() {
  ContainerRank rank;
  rank.spec.image = "127.0.0.1:5000/bb:1";
  rank.name = "berth-7-0-1";
  rank.uid = ::getuid();
  rank.gid = ::getgid();
  rank.workdir = "/w";
  rank.home = "/home/u";
  rank.devices = {{"/tmp/d/nvidia3", "/dev/nvidia3"}, {"/tmp/d/nvidiactl", "/dev/nvidiactl"}};
  rank.shm_bytes = 1 << 30;
  rank.env_names = {"BERTH_JOB_ID", "SECRET"};
  rank.setup_script = "/j/setup.container.sh";
  rank.run_script = "/j/run.container.sh";
  return rank;
}

// An interactive rank's run step hands its terminal on to the container's; its setup does not.
TEST(ContainerTest, AnInteractiveRunStepGivesTheContainerATerminal) {
  ContainerRank rank = Rank();
  EXPECT_THAT(StepScript(Host("/usr/bin/podman", "/s"), rank, /*run=*/true),
              Not(HasSubstr("--tty")));
  rank.tty = true;
  EXPECT_THAT(StepScript(Host("/usr/bin/podman", "/s"), rank, /*run=*/true),
              HasSubstr(" --interactive --tty "));
  EXPECT_THAT(StepScript(Host("/usr/bin/podman", "/s"), rank, /*run=*/false),
              Not(HasSubstr("--tty")));
}

// A rank with a GPU fraction reaches its MPS daemon: the pipe directory, the host's IPC namespace
// (MPS clients share memory with the server) and the CUDA_MPS_ variables.
TEST(ContainerTest, AFractionalRankReachesItsMpsDaemon) {
  ContainerRank rank = Rank();
  EXPECT_THAT(StepScript(Host("/usr/bin/podman", "/s"), rank, /*run=*/true),
              Not(HasSubstr("--ipc=host")));
  rank.mps_pipe = "/state/mps/0/pipe";
  EXPECT_THAT(StepScript(Host("/usr/bin/podman", "/s"), rank, /*run=*/true),
              HasSubstr(" -v /state/mps/0/pipe:/state/mps/0/pipe --ipc=host "));
  EXPECT_EQ(
      ContainerEnvNames({{"CUDA_MPS_PIPE_DIRECTORY", "p"},
                         {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"},
                         {"LD_PRELOAD", "x"}},
                        {}),
      (std::vector<std::string>{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY"}));
}

// podman's warnings (rootless: "/" is not a shared mount) began every container job's output.
TEST(ContainerTest, PodmansWarningsAreNotTheJobsOutput) {
  for (const bool run : {true, false}) {
    EXPECT_THAT(StepScript(Host("/usr/bin/podman", "/s"), Rank(), run),
                HasSubstr(" --log-level=error run "));
  }
}

// exec --into a container rank: podman exec into its run container, as its user with their store.
TEST(ContainerTest, ExecIntoAContainerEntersItsRunContainer) {
  const std::string s = ExecIntoContainerScript(Host("/usr/bin/podman", "/s"), "berth-7-0-1", 1000,
                                                "cat /etc/os-release; echo hi", true);
  EXPECT_THAT(s, HasSubstr("export XDG_RUNTIME_DIR=/s/short/1000/xdg\n"));
  EXPECT_THAT(s, HasSubstr("exec /usr/bin/podman --root /s/1000/storage "));
  EXPECT_THAT(s, HasSubstr("container inspect --format '{{.State.Running}}' berth-7-0-1-run"));
  // Valid shell.
  const std::string check = "bash -n -c " + ShellQuote(s);
  EXPECT_EQ(std::system(check.c_str()), 0) << s;
  EXPECT_THAT(s, HasSubstr(" exec --interactive --tty berth-7-0-1-run /bin/sh -c "
                           "'cat /etc/os-release; echo hi'\n"));
  EXPECT_THAT(
      ExecIntoContainerScript(Host("/usr/bin/podman", "/s"), "berth-7-0-1", 1000, "ls", false),
      HasSubstr(" exec berth-7-0-1-run /bin/sh -c ls\n"));
}

TEST(ContainerTest, StepRunsTheImageAsTheUserWithOnlyItsDevices) {
  ContainerRank rank = Rank();
  rank.uid = 1000;  // not root, whose own jobs run rootful
  const std::string s = StepScript(Host("/usr/bin/podman", "/s"), rank, /*run=*/true);
  const std::string store = "/s/1000";
  const std::string run = "/s/short/1000";
  EXPECT_THAT(s, HasSubstr("export XDG_RUNTIME_DIR=" + run + "/xdg\n"));
  EXPECT_THAT(s,
              HasSubstr("exec /usr/bin/podman --root " + store + "/storage --runroot " + run +
                        "/run --tmpdir " + store +
                        "/tmp --cgroup-manager=cgroupfs "
                        "--events-backend=file --runtime /usr/sbin/runc --log-level=error run --rm "
                        "--replace "
                        "--name berth-7-0-1-run --label berth.job=berth-7-0-1 --pull=never "
                        "--network=host"));
  EXPECT_THAT(s, HasSubstr("--userns=keep-id"));
  EXPECT_THAT(s, HasSubstr("--workdir /w -v /w:/w -v /j/run.container.sh:/.berth-step.sh:ro"));
  EXPECT_THAT(s, HasSubstr("-v /home/u:/home/u"));
  EXPECT_THAT(s, HasSubstr("--shm-size=1073741824b"));
  EXPECT_THAT(s, HasSubstr("--device /tmp/d/nvidia3:/dev/nvidia3 --device "
                           "/tmp/d/nvidiactl:/dev/nvidiactl"));
  // Values come from the step's environment, never the command line.
  EXPECT_THAT(s, HasSubstr("--env BERTH_JOB_ID --env SECRET 127.0.0.1:5000/bb:1 -c"));
  EXPECT_THAT(s, Not(HasSubstr("--cgroups=disabled")));  // v1: rootless podman makes none
  ContainerHost v2 = Host("/usr/bin/podman", "/s");
  v2.cgroup_v2 = true;
  v2.oci_runtime = "";
  ContainerRank root = rank;
  root.spec.remap_root = true;
  const std::string setup = StepScript(v2, root, /*run=*/false);
  EXPECT_THAT(setup, HasSubstr("--cgroups=disabled"));
  EXPECT_THAT(setup, Not(HasSubstr("--userns=keep-id")));
  EXPECT_THAT(setup, Not(HasSubstr("--runtime")));
  EXPECT_THAT(setup, HasSubstr("--name berth-7-0-1-setup"));
  EXPECT_THAT(setup, HasSubstr("/j/setup.container.sh:/.berth-step.sh:ro"));
}

// A rank's GPUs go in as their device files (by minor where it differs from the index) with the
// driver's control files, each only where it is a character device; on a node with NVIDIA's CDI
// spec, by CDI name only, which the step passes as it is.
TEST(ContainerTest, GpusGoInByDeviceFileOrByCdiName) {
  TempDir dir;
  for (const char* name : {"nvidia0", "nvidia5", "nvidiactl", "nvidia-uvm"}) {
    ASSERT_EQ(::symlink("/dev/null", dir.File(name).c_str()), 0);  // a character device
  }
  std::ofstream(dir.File("nvidia1")) << "";  // a plain file: not passed in
  ContainerHost host = Host("/usr/bin/podman", "/s");
  EXPECT_EQ(ContainerGpuDevices(host, {0, 2}, {{2, 5}}, dir.path()),
            (std::vector<std::pair<std::string, std::string>>{
                {dir.File("nvidia0"), "/dev/nvidia0"},
                {dir.File("nvidia5"), "/dev/nvidia5"},
                {dir.File("nvidiactl"), "/dev/nvidiactl"},
                {dir.File("nvidia-uvm"), "/dev/nvidia-uvm"}}));
  EXPECT_EQ(
      ContainerGpuDevices(host, {1}, {}, dir.path()),
      (std::vector<std::pair<std::string, std::string>>{
          {dir.File("nvidiactl"), "/dev/nvidiactl"}, {dir.File("nvidia-uvm"), "/dev/nvidia-uvm"}}));
  EXPECT_TRUE(ContainerGpuDevices(host, {}, {}, dir.path()).empty());

  EXPECT_FALSE(HasNvidiaCdiSpec({dir.path(), dir.File("none")}));
  std::filesystem::create_directories(dir.File("cdi"));
  std::ofstream(dir.File("cdi/nvidia.yaml")) << "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n";
  host.cdi_gpus = HasNvidiaCdiSpec({dir.File("none"), dir.File("cdi")});
  ASSERT_TRUE(host.cdi_gpus);
  ContainerRank rank = Rank();
  rank.uid = 1000;
  rank.devices = ContainerGpuDevices(host, {0, 2}, {{2, 5}}, dir.path());
  EXPECT_EQ(rank.devices, (std::vector<std::pair<std::string, std::string>>{
                              {"nvidia.com/gpu=0", ""}, {"nvidia.com/gpu=2", ""}}));
  const std::string step = StepScript(host, rank, /*run=*/true);
  EXPECT_THAT(step, HasSubstr("--device nvidia.com/gpu=0 --device nvidia.com/gpu=2 "));
  EXPECT_THAT(step, Not(HasSubstr("/dev/nvidia")));
}

TEST(ContainerTest, EnvironmentIsTheTasksAndBerthsNotTheHosts) {
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin"},
                                            {"LANG", "C"},
                                            {"HOME", "/h"},
                                            {"BERTH_JOB_ID", "7"},
                                            {"SKYPILOT_NODE_RANK", "0"},
                                            {"CUDA_VISIBLE_DEVICES", "0"},
                                            {"LR", "0.1"},
                                            {"USER", "u"}};
  EXPECT_EQ(ContainerEnvNames(env, {"LR"}),
            (std::vector<std::string>{"BERTH_JOB_ID", "CUDA_VISIBLE_DEVICES", "HOME", "LR",
                                      "SKYPILOT_NODE_RANK", "USER"}));
}

TEST(ContainerTest, MountsOnlyUnderTheNodesAllowedPaths) {
  ContainerSpec spec;
  spec.mounts = {"/datasets/imagenet:/data:ro"};
  EXPECT_TRUE(CheckContainerMounts(spec, {"/datasets"}, "n1").ok());
  EXPECT_EQ(CheckContainerMounts(spec, {"/data"}, "n1").message(),
            "container.mounts: '/datasets/imagenet:/data:ro': /datasets/imagenet is not among the "
            "paths n1 lets containers mount (/data)");
  EXPECT_THAT(CheckContainerMounts(spec, {}, "n1").message(), HasSubstr("(none)"));
  spec.mounts = {"/datasets2:/d"};
  EXPECT_FALSE(CheckContainerMounts(spec, {"/datasets"}, "n1").ok());
}

TEST(ContainerTest, RunDirsAreShortAndApartPerStateDir) {
  const std::string a = ContainerRunDir("/var/lib/berth-agent", true, 0);
  EXPECT_EQ(a, "/run/" + AgentCgroupName("/var/lib/berth-agent"));
  EXPECT_EQ(a, ContainerRunDir("/var/lib/berth-agent", true, 0));
  EXPECT_NE(a, ContainerRunDir("/var/lib/berth-agent2", true, 0));
  EXPECT_EQ(ContainerRunDir("/x", false, 1000), "/tmp/" + AgentCgroupName("/x") + "-1000");
  EXPECT_EQ(ContainerRunDir("/x", false, 1000, "/run/user/1000"),
            "/run/user/1000/" + AgentCgroupName("/x"));
}

TEST(ContainerTest, APullFailureSaysWhyAndWhatToDo) {
  TempDir dir;
  const std::string log = dir.File("output.log");
  std::ofstream(log) << "berth: pulling r/x:1\nTrying to pull r/x:1...\nError: initializing source "
                        "docker://r/x:1: reading manifest 1 in r/x: manifest unknown\n";
  EXPECT_EQ(PullFailureReason(log, 125),
            "image pull failed: initializing source docker://r/x:1: reading manifest 1 in r/x: "
            "manifest unknown");
  std::ofstream(log) << "Error: reading manifest 1 in r/x: unauthorized: authentication required\n";
  EXPECT_THAT(PullFailureReason(log, 125),
              HasSubstr("authentication required (the registry wants a login: as yourself on the "
                        "node, podman login --authfile ~/.config/containers/auth.json REGISTRY)"));
  std::ofstream(log) << "nothing said\n";
  EXPECT_EQ(PullFailureReason(log, 3), "image pull failed (exit code 3)");
  std::ofstream(log) << "berth: image r/x:1 is sha256:ab\n";
  EXPECT_EQ(PulledImage(log), "r/x:1@sha256:ab");
  std::ofstream(log) << "berth: image r/x@sha256:ab is sha256:ab\n";
  EXPECT_EQ(PulledImage(log), "r/x@sha256:ab");
  // The file mounts, placed before the pull, failed: that is the reason, not the image.
  std::ofstream(log) << "berth: file_mounts: cannot place \"/x\" (as u)\n";
  EXPECT_EQ(PullFailureReason(log, 1), "file_mounts: cannot place \"/x\" (as u)");
}

TEST(ContainerTest, DetectsPodmanAndItsVersion) {
  TempDir dir;
  const std::string podman = dir.File("podman");
  std::ofstream(podman) << "#!/bin/sh\n";
  ::chmod(podman.c_str(), 0755);
  berth::testing::FakeCommandRunner runner;
  runner.On(podman, [](const TimedCommand&) {
    return berth::testing::FakeCommandRunner::Exit(0, "podman version 4.3.1\n");
  });
  ContainerHost host = DetectPodman(runner, podman);
  EXPECT_EQ(host.runtime, "podman");
  EXPECT_EQ(host.version, "4.3.1");
  EXPECT_EQ(DetectPodman(runner, dir.File("none")).runtime, "");
}

// The pull step against a fake podman that logs its calls and answers from files in `dir`.
class PullScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    podman_ = dir_.File("podman");
    std::ofstream(podman_)
        << "#!/bin/bash\n"
           "d=" +
               dir_.path() +
               "\n"
               "while [ \"${1#--}\" != \"$1\" ]; do case $1 in --*=*) shift;; "
               "--cgroup-manager|--events-backend) shift;; *) shift 2;; esac; done\n"
               "echo \"$*\" >> $d/calls\n"
               "case \"$1 $2\" in\n"
               "  'image inspect') [ -e $d/have ] && echo sha256:feed;;\n"
               "  'container prune') ;;\n"
               "  pull*) [ -e $d/warn ] && echo 'time=\"x\" level=warning msg=\"\\\"/\\\" is "
               "not a shared mount, this could cause issues or missing mounts with rootless "
               "containers\"' >&2;\n"
               "    n=$(cat $d/fails 2>/dev/null || echo 0);\n"
               "    if [ \"$n\" -gt 0 ]; then echo $((n-1)) > $d/fails;\n"
               "      echo \"Error: $(cat $d/error)\" >&2; exit 125; fi;\n"
               "    echo 'Copying blob sha256:1'; echo 'Copying blob sha256:2 skipped: already "
               "exists'\n"
               // Slow: a blob comes into TMPDIR in three parts, then goes (podman stores it).
               "    if [ -e $d/slow ]; then mkdir -p $TMPDIR/storage9; for i in 1 2 3; do\n"
               "      head -c 100000 /dev/zero >> $TMPDIR/storage9/1; /bin/sleep 0.4; done\n"
               "      rm -r $TMPDIR/storage9; fi\n"
               "    touch $d/have;;\n"
               "esac\n";
    ::chmod(podman_.c_str(), 0755);
    store_ = dir_.File("store");
  }

  // Runs the pull step; its exit status, with stdout and stderr in `output_`.
  int Pull(const ContainerRank& rank) { return Pull(rank, Host(podman_, store_)); }
  int Pull(const ContainerRank& rank, const ContainerHost& host) {
    const std::string script = dir_.File("pull.sh");
    std::ofstream(script) << PullScript(host, rank);
    // The retry waits (2 s, 4 s) are shortened by a sleep that does nothing.
    std::ofstream(dir_.File("sleep")) << "#!/bin/sh\necho slept $1 >> " + dir_.File("calls") + "\n";
    ::chmod(dir_.File("sleep").c_str(), 0755);
    const std::string cmd = "mkdir -p " + store_ + "/" + std::to_string(::getuid()) +
                            " && PATH=" + dir_.path() + ":$PATH bash " + script + " > " +
                            dir_.File("out") + " 2>&1";
    const int rc = std::system(cmd.c_str());
    output_ = ReadFileOr(dir_.File("out"));
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  std::string Calls() { return ReadFileOr(dir_.File("calls")); }

  TempDir dir_;
  std::string podman_, store_, output_;
};

// The pull is a script of its own (src/agent/pull.sh, compiled in): every form PullScript writes
// (each policy, a pinned digest, an insecure registry, podman 5) is one bash parses.
TEST_F(PullScriptTest, EveryFormIsValidBash) {
  ContainerHost host = Host(podman_, store_);
  host.insecure_registries = {"localhost:5000"};
  host.version = "5.0.2";
  for (const char* image : {"localhost:5000/x:1", "ubuntu", "r.io/y@sha256:0123abcd"}) {
    for (PullPolicy policy : {PullPolicy::kMissing, PullPolicy::kAlways, PullPolicy::kNever}) {
      ContainerRank rank = Rank();
      rank.spec.image = image;
      rank.spec.pull = policy;
      const std::string script = dir_.File("lint.sh");
      std::ofstream(script) << PullScript(host, rank);
      const std::string cmd = "bash -n " + script + " 2>" + dir_.File("lint.err");
      EXPECT_EQ(std::system(cmd.c_str()), 0) << image << ": " << ReadFileOr(dir_.File("lint.err"));
    }
  }
}

TEST_F(PullScriptTest, PullsWhatIsMissingOnceAndSaysItsDigest) {
  ContainerRank rank = Rank();
  ASSERT_EQ(Pull(rank), 0) << output_;
  EXPECT_THAT(output_, HasSubstr("berth: pulling 127.0.0.1:5000/bb:1"));
  EXPECT_THAT(output_, HasSubstr("berth: image 127.0.0.1:5000/bb:1 is sha256:feed"));
  EXPECT_THAT(Calls(), HasSubstr("pull --tls-verify=false 127.0.0.1:5000/bb:1"));
  // Present now: a tag is still asked of its registry (it may have moved)...
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(Pull(rank), 0) << output_;
  EXPECT_THAT(output_, Not(HasSubstr("pulling")));
  EXPECT_THAT(output_, HasSubstr("berth: checking 127.0.0.1:5000/bb:1 at its registry"));
  EXPECT_THAT(Calls(), HasSubstr("pull --tls-verify=false"));
  // ... an image pinned by digest is not.
  rank.spec.image = "127.0.0.1:5000/bb@sha256:" + std::string(64, 'c');
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(Pull(rank), 0) << output_;
  EXPECT_THAT(output_, HasSubstr("is on this node"));
  EXPECT_THAT(Calls(), Not(HasSubstr("pull ")));
  // pull: always pulls anyway; an image of another registry is reached over TLS.
  rank.spec.pull = PullPolicy::kAlways;
  rank.spec.image = "registry.example/x:1";
  ASSERT_EQ(Pull(rank), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("pull registry.example/x:1"));
}

// While podman downloads (silent when its output is no terminal), the step says how far it got:
// the blob files under TMPDIR, each at the largest size seen, and the layers it fetches (not those
// it skips). Each line says more than the one before; the last is what the job's reason shows.
TEST_F(PullScriptTest, SaysHowFarADownloadGot) {
  std::ofstream(dir_.File("slow")) << "";
  ContainerHost host = Host(podman_, store_);
  host.pull_progress_ms = 100;
  ASSERT_EQ(Pull(Rank(), host), 0) << output_;
  int64_t last = 0;
  int lines = 0;
  for (const std::string& line : Split(output_, '\n')) {
    long long layers = 0, bytes = 0;
    if (std::sscanf(line.c_str(), "berth: pull progress: %lld layers, %lld bytes", &layers,
                    &bytes) != 2) {
      continue;
    }
    ++lines;
    EXPECT_EQ(layers, 1) << line;
    EXPECT_GT(bytes, last) << output_;
    last = bytes;
  }
  EXPECT_GE(lines, 2) << output_;
  EXPECT_EQ(last, 300'000) << output_;
  EXPECT_EQ(LastPullProgress(output_), "1 layer, 300 kB downloaded");
  // What a killed pull left in the download dir goes with the next pull (and counts for nothing).
  const std::string left = store_ + "/" + std::to_string(::getuid()) + "/download/storage7";
  std::filesystem::create_directories(left);
  std::ofstream(left + "/1") << std::string(50'000, 'x');
  ASSERT_EQ(Pull(Rank(), host), 0) << output_;
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_EQ(LastPullProgress(output_), "1 layer, 300 kB downloaded");
  // Nothing of the reporter is left running.
  // (a pattern that does not match the shell running pgrep itself)
  EXPECT_NE(std::system(("pgrep -f '" + dir_.File("pull[.]sh") + "' >/dev/null").c_str()), 0);
}

// The reason's form of a progress line: only a whole line counts, the last one wins.
TEST(ContainerTest, ReadsTheLastWholeProgressLine) {
  EXPECT_EQ(LastPullProgress("x\nberth: pull progress: 3 layers, 182400000 bytes\nmore\n"),
            "3 layers, 182.4 MB downloaded");
  EXPECT_EQ(LastPullProgress("berth: pull progress: 1 layers, 10 bytes\n"
                             "berth: pull progress: 2 layers, 2310000000 bytes\n"),
            "2 layers, 2.31 GB downloaded");
  EXPECT_EQ(LastPullProgress("berth: pull progress: 2 layers, 999 bytes\n"
                             "berth: pull progress: 2 layers, 5000000 by"),
            "2 layers, 999 B downloaded");
  EXPECT_EQ(LastPullProgress("berth: pull progress: lots\n"), std::nullopt);
  EXPECT_EQ(LastPullProgress("no progress here\n"), std::nullopt);
  EXPECT_EQ(LastPullProgress(""), std::nullopt);
  EXPECT_EQ(FormatDownloaded(400), "400 B");
  EXPECT_EQ(FormatDownloaded(12'345), "12 kB");
}

// The pull step leaves the user's podman in their store ($BERTH_PODMAN): a script that runs podman
// with that store, rewritten only when its text changes.
TEST_F(PullScriptTest, LeavesTheUsersPodmanInTheirStore) {
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  const std::string wrapper = store_ + "/" + std::to_string(::getuid()) + "/podman";
  const ContainerHost host = Host(podman_, store_);
  EXPECT_EQ(ReadFileOr(wrapper), PodmanWrapper(host, ::getuid()) + "\n");
  struct stat first {};
  ASSERT_EQ(::stat(wrapper.c_str(), &first), 0);
  EXPECT_EQ(first.st_mode & 0777, 0700u);
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  struct stat second {};
  ASSERT_EQ(::stat(wrapper.c_str(), &second), 0);
  EXPECT_EQ(second.st_ino, first.st_ino);  // not rewritten
  // It runs the node's podman with the store's flags.
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(std::system((wrapper + " images --format x >/dev/null").c_str()), 0);
  EXPECT_EQ(Calls(), "images --format x\n");
  EXPECT_THAT(PodmanWrapper(host, ::getuid()),
              HasSubstr("--root " + store_ + "/" + std::to_string(::getuid()) + "/storage"));
  // Another text (a new agent): rewritten.
  std::ofstream(wrapper) << "#!/bin/bash\nold\n";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_EQ(ReadFileOr(wrapper), PodmanWrapper(host, ::getuid()) + "\n");
}

TEST_F(PullScriptTest, PrunesOnlyWhenTheStoreListsAJobsContainer) {
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(Calls(), Not(HasSubstr("container prune")));
  const std::string listed =
      store_ + "/" + std::to_string(::getuid()) + "/storage/overlay-containers";
  std::filesystem::create_directories(listed);
  std::ofstream(listed + "/containers.json") << R"([{"names":["berth-3-0-0-run"]}])";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("container prune -f --filter label=berth.job --filter until=5m"));
}

TEST_F(PullScriptTest, AWarmImageStartsWithoutAskingPodman) {
  ContainerRank rank = Rank();
  ASSERT_EQ(Pull(rank), 0) << output_;  // pulled: the tag's answer is remembered
  const std::string images = store_ + "/" + std::to_string(::getuid()) + "/storage/overlay-images";
  std::filesystem::create_directories(images);
  std::ofstream(images + "/images.json") << R"([{"digest":"sha256:feed"}])";
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(Pull(rank), 0) << output_;
  EXPECT_EQ(Calls(), "");
  EXPECT_THAT(output_, HasSubstr("berth: image 127.0.0.1:5000/bb:1 is sha256:feed"));
  // Pinned by a digest the store lists: nothing asked either.
  rank.spec.image = "127.0.0.1:5000/bb@sha256:feed";
  ASSERT_EQ(Pull(rank), 0) << output_;
  EXPECT_EQ(Calls(), "");
  // With the tag's answer not trusted (tag_ttl_s 0), or pull: always, the registry is asked.
  rank.spec.image = "127.0.0.1:5000/bb:1";
  ContainerHost host = Host(podman_, store_);
  host.tag_ttl_s = 0;
  ASSERT_EQ(Pull(rank, host), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("pull --tls-verify=false"));
}

TEST_F(PullScriptTest, TagAnswersAreKeptPerReference) {
  const std::string images = store_ + "/" + std::to_string(::getuid()) + "/storage/overlay-images";
  std::filesystem::create_directories(images);
  std::ofstream(images + "/images.json") << R"([{"digest":"sha256:feed"}])";
  ContainerRank a = Rank();
  a.spec.image = "127.0.0.1:5000/foo/bar_baz:1";
  ASSERT_EQ(Pull(a), 0) << output_;
  ContainerRank b = Rank();
  b.spec.image = "127.0.0.1:5000/foo_bar/baz:1";  // the same once '/' and ':' are flattened
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(Pull(b), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("pull --tls-verify=false 127.0.0.1:5000/foo_bar/baz:1"));
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(Pull(a), 0) << output_;
  EXPECT_EQ(Calls(), "");  // its own answer, still fresh
}

TEST_F(PullScriptTest, AFullDiskIsPrunedOnceEvenWithoutRetries) {
  std::ofstream(dir_.File("error")) << "write /x: no space left on device";
  std::ofstream(dir_.File("fails")) << "1";
  ContainerHost host = Host(podman_, store_);
  host.pull_retries = 0;
  ASSERT_EQ(Pull(Rank(), host), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("image prune -a -f"));
}

TEST_F(PullScriptTest, NeverPullsWithPolicyNever) {
  ContainerRank rank = Rank();
  rank.spec.pull = PullPolicy::kNever;
  EXPECT_EQ(Pull(rank), 125);
  EXPECT_THAT(output_, HasSubstr("berth: image pull failed: 127.0.0.1:5000/bb:1 is not on this "
                                 "node (container.pull: never)"));
  EXPECT_THAT(Calls(), Not(HasSubstr("pull ")));
}

TEST_F(PullScriptTest, RetriesAnUnreachableRegistryNotAMissingImage) {
  std::ofstream(dir_.File("error")) << "pinging container registry 127.0.0.1:5000: Get "
                                       "\"http://127.0.0.1:5000/v2/\": dial tcp: connect: "
                                       "connection refused";
  std::ofstream(dir_.File("fails")) << "2";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("slept 2\n"));
  EXPECT_THAT(Calls(), HasSubstr("slept 4\n"));
  // Past the retries: fails with podman's last error.
  std::ofstream(dir_.File("fails")) << "5";
  ::unlink(dir_.File("have").c_str());
  EXPECT_EQ(Pull(Rank()), 125);
  EXPECT_THAT(output_, HasSubstr("connection refused"));
  // With the image on the node already, an unreachable registry means its copy is used (but
  // not with pull: always).
  std::ofstream(dir_.File("have")) << "";
  std::ofstream(dir_.File("fails")) << "5";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(output_, HasSubstr("using this node's copy of 127.0.0.1:5000/bb:1"));
  ContainerRank always = Rank();
  always.spec.pull = PullPolicy::kAlways;
  std::ofstream(dir_.File("fails")) << "5";
  EXPECT_EQ(Pull(always), 125);
  ::unlink(dir_.File("have").c_str());
  // A full disk: unused images are pruned once and the pull tried again; then it fails with sizes.
  std::ofstream(dir_.File("error"))
      << "writing blob: storing blob to file: write /x: no space left "
         "on device";
  std::ofstream(dir_.File("fails")) << "1";
  ::unlink(dir_.File("calls").c_str());
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("image prune -a -f"));
  EXPECT_THAT(output_, HasSubstr("berth: the disk is full; removing your images"));
  ::unlink(dir_.File("have").c_str());
  std::ofstream(dir_.File("fails")) << "5";
  EXPECT_EQ(Pull(Rank()), 125);
  EXPECT_THAT(output_, HasSubstr("berth: image pull failed: no space left on device for "
                                 "127.0.0.1:5000/bb:1: your images on this node take"));
  EXPECT_THAT(Calls(), Not(HasSubstr("slept")));
  // A missing image is final at once.
  std::ofstream(dir_.File("error")) << "reading manifest 1 in 127.0.0.1:5000/bb: manifest "
                                       "unknown: manifest unknown";
  std::ofstream(dir_.File("fails")) << "1";
  ::unlink(dir_.File("calls").c_str());
  EXPECT_EQ(Pull(Rank()), 125);
  EXPECT_THAT(Calls(), Not(HasSubstr("slept")));
}

// The image of a tag is on the node and its registry does not answer: its copy is used after one
// pull (podman retried within it), not after berth's retries on top of podman's (35 s).
TEST_F(PullScriptTest, AnImageOnTheNodeIsUsedAfterOneFailedPull) {
  std::ofstream(dir_.File("have")) << "";
  std::ofstream(dir_.File("error")) << "pinging container registry 127.0.0.1:5000: Get "
                                       "\"http://127.0.0.1:5000/v2/\": dial tcp: connect: "
                                       "connection refused";
  std::ofstream(dir_.File("fails")) << "5";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(output_, HasSubstr("using this node's copy of 127.0.0.1:5000/bb:1"));
  EXPECT_THAT(Calls(), Not(HasSubstr("slept")));
  EXPECT_EQ(ReadFileOr(dir_.File("fails")), "4\n");  // one pull
}

// "no such host" is DNS's answer that the name does not exist: final at once, not retried like a
// timeout; with the image here, its copy is used.
TEST_F(PullScriptTest, ANameThatDoesNotResolveIsNotRetried) {
  std::ofstream(dir_.File("error")) << "initializing source docker://reg.invalid/bb:1: pinging "
                                       "container registry reg.invalid: Get "
                                       "\"https://reg.invalid/v2/\": dial tcp: lookup reg.invalid "
                                       "on 127.0.0.53:53: no such host";
  std::ofstream(dir_.File("fails")) << "5";
  EXPECT_EQ(Pull(Rank()), 125);
  EXPECT_THAT(output_, HasSubstr("no such host"));
  EXPECT_THAT(Calls(), Not(HasSubstr("slept")));
  std::ofstream(dir_.File("have")) << "";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(output_, HasSubstr("using this node's copy of 127.0.0.1:5000/bb:1"));
  EXPECT_THAT(Calls(), Not(HasSubstr("slept")));
}

// With the image here, a registry that takes no connection is not asked at all (podman would spend
// its own retries on it); one that does is asked, as a tag may have moved.
TEST_F(PullScriptTest, AnImageHereSkipsARegistryThatTakesNoConnection) {
  const int listening = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listening, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listening, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listening, reinterpret_cast<sockaddr*>(&addr), &len);
  const int open_port = ntohs(addr.sin_port);
  const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(closed, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);  // bound, not listening
  ::getsockname(closed, reinterpret_cast<sockaddr*>(&addr), &len);
  const int closed_port = ntohs(addr.sin_port);

  ContainerHost host = Host(podman_, store_);
  host.registry_probe_ms = 2000;
  std::ofstream(dir_.File("have")) << "";
  ContainerRank rank = Rank();
  rank.spec.image = fmt::format("127.0.0.1:{}/bb:1", closed_port);
  ASSERT_EQ(Pull(rank, host), 0) << output_;
  EXPECT_THAT(output_, HasSubstr(fmt::format("berth: the registry 127.0.0.1:{} could not be "
                                             "reached; using this node's copy of {}",
                                             closed_port, rank.spec.image)));
  EXPECT_THAT(Calls(), Not(HasSubstr("pull")));
  EXPECT_THAT(output_, Not(HasSubstr("is on this node")));
  EXPECT_THAT(output_, HasSubstr("is sha256:feed"));
  rank.spec.image = fmt::format("127.0.0.1:{}/bb:1", open_port);
  ASSERT_EQ(Pull(rank, host), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("pull " + rank.spec.image));
  // Not without the image (podman says why it cannot pull), nor behind a proxy.
  ::unlink(dir_.File("have").c_str());
  ::unlink(dir_.File("calls").c_str());
  rank.spec.image = fmt::format("127.0.0.1:{}/bb:1", closed_port);
  ASSERT_EQ(Pull(rank, host), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("pull " + rank.spec.image));
  ::close(listening);
  ::close(closed);
}

// podman 5 retries within a pull unless told --retry=0; berth's loop is then the only one.
TEST_F(PullScriptTest, Podman5IsToldNotToRetryItself) {
  ContainerHost host = Host(podman_, store_);
  ASSERT_EQ(Pull(Rank(), host), 0) << output_;
  EXPECT_THAT(Calls(), Not(HasSubstr("--retry")));
  host.version = "5.2.2";
  ASSERT_EQ(Pull(Rank(), host), 0) << output_;
  EXPECT_THAT(Calls(), HasSubstr("pull --tls-verify=false --retry=0 127.0.0.1:5000/bb:1"));
}

TEST_F(PullScriptTest, TheSharedMountWarningIsNotInTheJobsOutput) {
  std::ofstream(dir_.File("warn")) << "";
  ASSERT_EQ(Pull(Rank()), 0) << output_;
  EXPECT_THAT(output_, Not(HasSubstr("shared mount")));
  EXPECT_THAT(output_, HasSubstr("Copying blob sha256:1"));
}

}  // namespace
}  // namespace berth
