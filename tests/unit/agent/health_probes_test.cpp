// The health probes: how nvidia-smi's answers, the kernel log's XID lines and the admin's scripts
// become findings (against fakes of commands, the kernel log and the file systems).
#include "agent/health_probes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "fakes/fake_health.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using testing::FakeCommandRunner;
using testing::FakeKernelLog;
using testing::FakeNodeSystem;
using testing::TempDir;

TEST(HealthParsers, XidLinesFromTheKernelLog) {
  auto x = ParseXidLine(
      "[ 4412.331] NVRM: Xid (PCI:0000:3b:00): 79, pid=2113, name=python, GPU has fallen off the "
      "bus.");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->bus_id, "0000:3b:00");
  EXPECT_EQ(x->code, 79);
  EXPECT_EQ(x->text, "pid=2113, name=python, GPU has fallen off the bus.");
  // /dev/kmsg records, and the older form without "PCI:".
  auto k =
      ParseXidLine("4,1234,5678,-;NVRM: Xid (0000:5E:00): 48, An uncorrectable double bit error");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->bus_id, "0000:5e:00");
  EXPECT_EQ(k->code, 48);
  EXPECT_FALSE(ParseXidLine("NVRM: loading NVIDIA UNIX x86_64 Kernel Module"));
  EXPECT_FALSE(ParseXidLine("NVRM: Xid (PCI:0000:3b:00): , nothing"));
}

TEST(HealthParsers, BusIdsOfNvidiaSmiAndTheKernelAgree) {
  EXPECT_EQ(NormalizeBusId("00000000:3B:00.0"), "0000:3b:00");
  EXPECT_EQ(NormalizeBusId("0000:3b:00"), "0000:3b:00");
  EXPECT_EQ(NormalizeBusId("3b:00.0"), "0000:3b:00");
}

TEST(HealthParsers, GpuRowsReadNotAvailableAsUnknown) {
  auto rows = ParseGpuHealthRows(
      "0, 00000000:1A:00.0, 0, No, No\n"
      "1, 00000000:1B:00.0, [N/A], [N/A], Yes\n"
      "garbage\n");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].ecc_uncorrected, 0);
  EXPECT_FALSE(rows[1].ecc_uncorrected);
  EXPECT_FALSE(rows[1].retired_pending);
  EXPECT_TRUE(rows[1].remapped_pending);
  EXPECT_EQ(rows[1].bus_id, "0000:1b:00");
}

TEST(HealthParsers, XidLists) {
  EXPECT_EQ(*ParseXidList("13, 31,43"), (std::set<int>{13, 31, 43}));
  EXPECT_TRUE(ParseXidList("")->empty());
  EXPECT_EQ(ParseXidList("13,x").status().message(), "bad XID 'x' (expected 13,31,...)");
}

class ProberTest : public ::testing::Test {
 protected:
  ProberTest() {
    smi_ = dir_.File("nvidia-smi");
    std::ofstream(smi_) << "#!/bin/sh\n";
    ::chmod(smi_.c_str(), 0755);
    settings_.nvidia_smi = smi_;
    settings_.scripts_dir = "/health.d";
    settings_.idle_dir = "/idle.d";
    targets_.gpus = {0, 1, 2, 3};
    targets_.disk_paths = {"/state"};
    targets_.cgroup_dirs = {"/sys/fs/cgroup/memory/berth"};
    SetSmi(
        "0, 00000000:1A:00.0, 0, No, No\n1, 00000000:1B:00.0, 0, No, No\n"
        "2, 00000000:3B:00.0, 0, No, No\n3, 00000000:5E:00.0, 0, No, No\n");
  }

  void SetSmi(const std::string& csv) {
    runner_.On(smi_, [csv](const TimedCommand&) { return FakeCommandRunner::Exit(0, csv); });
  }
  HealthProber Prober() { return HealthProber(settings_, targets_, runner_, &log_, system_); }
  static const ProbeRun* Find(const std::vector<ProbeRun>& runs, const std::string& name) {
    for (const auto& r : runs) {
      if (r.name == name) return &r;
    }
    return nullptr;
  }

  TempDir dir_;
  std::string smi_;
  HealthSettings settings_;
  ProbeTargets targets_;
  FakeCommandRunner runner_;
  FakeKernelLog log_;
  FakeNodeSystem system_;
};

TEST_F(ProberTest, AHealthyNodeFindsNothing) {
  auto prober = Prober();
  auto runs = prober.RunLight(250);
  for (const auto& run : runs) EXPECT_TRUE(run.findings.empty()) << run.name;
  for (const char* name : {"disk", "cgroups", "clock", "gpus", "ecc", "xid"}) {
    EXPECT_TRUE(Find(runs, name)) << name;
  }
  ASSERT_FALSE(runner_.calls().empty());
  EXPECT_EQ(runner_.calls()[0].argv[1], std::string("--query-gpu=") + kGpuHealthQuery);
  EXPECT_EQ(runner_.calls()[0].timeout, settings_.timeout_ms);
}

TEST_F(ProberTest, EccAndMissingGpusAreFoundOnTheirGpu) {
  SetSmi(
      "0, 00000000:1A:00.0, 0, No, No\n1, 00000000:1B:00.0, 7, No, No\n"
      "2, 00000000:3B:00.0, 0, Yes, No\n");
  auto prober = Prober();
  auto runs = prober.RunLight(std::nullopt);
  const ProbeRun* ecc = Find(runs, "ecc");
  ASSERT_TRUE(ecc);
  ASSERT_EQ(ecc->findings.size(), 2u);
  EXPECT_EQ(ecc->findings[0].gpu, 1);
  EXPECT_EQ(ecc->findings[0].reason, "ecc: 7 uncorrected ECC errors on GPU 1");
  EXPECT_EQ(ecc->findings[1].reason, "ecc: page retirement pending on GPU 2 (needs a GPU reset)");
  const ProbeRun* gpus = Find(runs, "gpus");
  ASSERT_EQ(gpus->findings.size(), 1u);
  EXPECT_EQ(gpus->findings[0].gpu, 3);
  EXPECT_EQ(gpus->findings[0].reason, "gpus: GPU 3 is missing from nvidia-smi (3 of 4 listed)");
  EXPECT_FALSE(Find(runs, "clock")) << "not measured yet";
}

TEST_F(ProberTest, AFailingOrHungNvidiaSmiIsANodeFault) {
  runner_.On(smi_, [](const TimedCommand&) { return FakeCommandRunner::TimedOut(30'000); });
  auto prober = Prober();
  auto runs = prober.RunLight(std::nullopt);
  const ProbeRun* gpus = Find(runs, "gpus");
  ASSERT_EQ(gpus->findings.size(), 1u);
  EXPECT_EQ(gpus->findings[0].gpu, -1);
  EXPECT_EQ(gpus->findings[0].reason, "gpus: nvidia-smi failed: timed out after 30s");
  EXPECT_TRUE(gpus->timed_out);
  EXPECT_FALSE(Find(runs, "ecc")) << "no answer: the ECC probe did not run";
}

TEST_F(ProberTest, XidsAreMappedToTheirGpuOrTheNodeAndApplicationOnesIgnored) {
  auto prober = Prober();
  prober.RunLight(std::nullopt);  // learns the bus ids
  log_.Append("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
  log_.Append("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
  log_.Append("NVRM: Xid (PCI:0000:1a:00): 13, Graphics SM Warp Exception");
  log_.Append("NVRM: Xid (PCI:0000:1b:00): 74, NVLink: fatal error");
  log_.Append("NVRM: Xid (PCI:0000:99:00): 48, somewhere else");
  auto runs = prober.RunLight(std::nullopt);
  const ProbeRun* xid = Find(runs, "xid");
  ASSERT_EQ(xid->findings.size(), 3u);
  EXPECT_EQ(xid->findings[0].gpu, 2);
  EXPECT_EQ(xid->findings[0].reason, "xid 79 on GPU 2 (fell off the bus)");
  EXPECT_EQ(xid->findings[1].gpu, -1) << "74 is a node XID";
  EXPECT_EQ(xid->findings[1].reason, "xid 74 on GPU 1 (NVLink error)");
  EXPECT_EQ(xid->findings[2].gpu, -1) << "a bus id no GPU has";
  EXPECT_EQ(xid->findings[2].reason, "xid 48 on PCI 0000:99:00 (double-bit ECC error)");
  // The next run reads only what is new: clean.
  EXPECT_TRUE(Find(prober.RunLight(std::nullopt), "xid")->findings.empty());
  // A GPU that fell off the bus leaves nvidia-smi's list; its XIDs still name it, not the node.
  SetSmi(
      "0, 00000000:1A:00.0, 0, No, No\n1, 00000000:1B:00.0, 0, No, No\n"
      "3, 00000000:5E:00.0, 0, No, No\n");
  log_.Append("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
  auto after = prober.RunLight(std::nullopt);
  EXPECT_EQ(Find(after, "xid")->findings.at(0).gpu, 2);
  EXPECT_EQ(Find(after, "gpus")->findings.at(0).gpu, 2);
}

TEST_F(ProberTest, DiskCgroupsAndClock) {
  system_.SetFreeMib("/state", 100);
  system_.SetWritable("/sys/fs/cgroup/memory/berth", false);
  auto runs = Prober().RunLight(-15'000);
  EXPECT_EQ(Find(runs, "disk")->findings.at(0).reason,
            "disk: /state has 100 MiB free (below 512 MiB)");
  EXPECT_EQ(Find(runs, "cgroups")->findings.at(0).reason,
            "cgroups: /sys/fs/cgroup/memory/berth is gone or not writable");
  EXPECT_EQ(Find(runs, "clock")->findings.at(0).reason,
            "clock: 15000 ms behind the server's (more than 10000 ms)");
}

TEST_F(ProberTest, ScriptsSayWhyAndMayNameAGpu) {
  system_.SetExecutables("/health.d", {"/health.d/10-fans", "/health.d/20-nhc", "/health.d/30-ok",
                                       "/health.d/40-hang"});
  runner_.On("/health.d/10-fans", [](const TimedCommand&) {
    return FakeCommandRunner::Exit(1, "\n gpu 2: fan stuck \n");
  });
  runner_.On("/health.d/20-nhc", [](const TimedCommand&) {
    return FakeCommandRunner::Exit(1, "ERROR:  nhc:  Health check failed:  /scratch full\nmore");
  });
  runner_.On("/health.d/30-ok", [](const TimedCommand&) { return FakeCommandRunner::Exit(0); });
  runner_.On("/health.d/40-hang",
             [](const TimedCommand&) { return FakeCommandRunner::TimedOut(30'000); });
  auto runs = Prober().RunLight(std::nullopt);
  EXPECT_EQ(Find(runs, "health.d/10-fans")->findings.at(0).gpu, 2);
  EXPECT_EQ(Find(runs, "health.d/10-fans")->findings.at(0).reason,
            "health.d/10-fans: gpu 2: fan stuck");
  EXPECT_EQ(Find(runs, "health.d/20-nhc")->findings.at(0).gpu, -1);
  EXPECT_EQ(Find(runs, "health.d/20-nhc")->findings.at(0).reason,
            "health.d/20-nhc: ERROR:  nhc:  Health check failed:  /scratch full");
  EXPECT_TRUE(Find(runs, "health.d/30-ok")->findings.empty());
  EXPECT_EQ(Find(runs, "health.d/40-hang")->findings.at(0).reason,
            "health.d/40-hang: timed out after 30s");
  EXPECT_TRUE(Find(runs, "health.d/40-hang")->timed_out);
}

TEST_F(ProberTest, IdleProbesStopWhenAJobArrives) {
  system_.SetExecutables("/idle.d", {"/idle.d/dcgm-diag"});
  runner_.On("/idle.d/dcgm-diag", [](const TimedCommand&) { return FakeCommandRunner::Exit(0); });
  auto prober = Prober();
  bool aborted = true;
  EXPECT_EQ(prober.RunIdle([] { return false; }, &aborted).size(), 1u);
  EXPECT_FALSE(aborted);
  EXPECT_TRUE(prober.RunIdle([] { return true; }, &aborted).empty())
      << "an aborted run is not counted";
  EXPECT_TRUE(aborted);
  EXPECT_EQ(runner_.calls().back().timeout, settings_.idle_timeout_ms);
}

TEST_F(ProberTest, HooksRunInOrderUntilOneFails) {
  system_.SetExecutables("/prolog.d", {"/prolog.d/10-a", "/prolog.d/20-b", "/prolog.d/30-c"});
  runner_.On("/prolog.d/10-a", [](const TimedCommand&) { return FakeCommandRunner::Exit(0); });
  runner_.On("/prolog.d/20-b",
             [](const TimedCommand&) { return FakeCommandRunner::Exit(3, "no scratch space\n"); });
  auto failed = Prober().RunHooks("/prolog.d", "prolog", {{"BERTH_JOB_ID", "7"}});
  EXPECT_EQ(failed, "prolog/20-b: exit code 3: no scratch space");
  auto calls = runner_.calls();
  ASSERT_EQ(calls.size(), 2u) << "30-c does not run after 20-b failed";
  EXPECT_EQ(calls[1].env.at("BERTH_JOB_ID"), "7");
  EXPECT_EQ(calls[1].timeout, settings_.hook_timeout_ms);
  EXPECT_EQ(Prober().RunHooks("/none.d", "prolog", {}), "");
}

TEST(FileKernelLogTest, ReadsOnlyLinesWrittenSinceItOpened) {
  TempDir dir;
  const std::string path = dir.File("kern.log");
  std::ofstream(path) << "old line\n";
  FileKernelLog log(path);
  EXPECT_TRUE(log.ReadNew().empty());
  std::ofstream(path, std::ios::app) << "first\nsecond, not ended";
  EXPECT_EQ(log.ReadNew(), std::vector<std::string>{"first"});
  std::ofstream(path, std::ios::app) << " yet\n";
  EXPECT_EQ(log.ReadNew(), std::vector<std::string>{"second, not ended yet"});
  std::ofstream(path, std::ios::trunc) << "after truncation\n";
  EXPECT_EQ(log.ReadNew(), std::vector<std::string>{"after truncation"});
  // Rotated by rename (logrotate): the old file's last lines, then the new one's.
  std::ofstream(path, std::ios::app) << "last of the old\n";
  ASSERT_EQ(::rename(path.c_str(), dir.File("kern.log.1").c_str()), 0);
  std::ofstream(path) << "first of the new\n";
  EXPECT_EQ(log.ReadNew(), (std::vector<std::string>{"last of the old", "first of the new"}));
}

}  // namespace
}  // namespace berth
