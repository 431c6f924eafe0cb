// The environment a job's processes see. These are the variables users' scripts read (BERTH_* and
// their SkyPilot names), so each story below spells out the whole environment.
#include "protocol/job_env.h"

#include <gtest/gtest.h>

namespace berth::proto {
namespace {

// Job 42 "train", attempt 2, is a 2-node gang with 2 H100s per node; this is rank 1, on
// 10.0.0.2, given devices 2 and 3.
LaunchMessage GangRank1() {
  LaunchMessage m;
  m.job = 42;
  m.attempt = 2;
  m.rank = 1;
  m.num_nodes = 2;
  m.spec_id = 9;
  m.name = "train";
  m.user = "ada";
  m.node_ips = {"10.0.0.1", "10.0.0.2"};
  m.gpus = {2, 3};
  m.gpus_per_node = 2;
  return m;
}

TEST(JobEnv, GangRankOneSeesItsRankItsPeersAndItsDevices) {
  // The spec sets LR; the agent hands down PATH and HOME.
  JobEnvironment env = BuildJobEnvironment(GangRank1(), {{"LR", "0.01"}},
                                           {{"PATH", "/usr/bin:/bin"}, {"HOME", "/home/ada"}});
  const Environment common = {
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/home/ada"},
      {"LR", "0.01"},
      {"BERTH_JOB_ID", "42"},
      {"BERTH_JOB_NAME", "train"},
      {"BERTH_ATTEMPT", "2"},
      {"BERTH_NODE_RANK", "1"},
      {"BERTH_NUM_NODES", "2"},
      {"BERTH_NODE_IPS", "10.0.0.1\n10.0.0.2"},
      {"BERTH_NUM_GPUS_PER_NODE", "2"},
      {"BERTH_JOB_RANK", "0"},  // not part of a bulk group
      {"BERTH_NUM_JOBS", "1"},
      {"SKYPILOT_NODE_RANK", "1"},
      {"SKYPILOT_NUM_NODES", "2"},
      {"SKYPILOT_NODE_IPS", "10.0.0.1\n10.0.0.2"},
      {"SKYPILOT_NUM_GPUS_PER_NODE", "2"},
      {"SKYPILOT_JOB_RANK", "0"},
      {"SKYPILOT_NUM_JOBS", "1"},
      {"SKYPILOT_TASK_ID", "berth-42-2"},
  };
  // Run gets the devices, by index, and nothing about setup.
  Environment run = common;
  run["CUDA_VISIBLE_DEVICES"] = "2,3";
  EXPECT_EQ(env.run_env, run);
  // Setup learns which node of the gang it prepares, and gets no devices.
  Environment setup = common;
  setup["BERTH_SETUP_NODE_RANK"] = "1";
  setup["SKYPILOT_SETUP_NODE_RANK"] = "1";
  EXPECT_EQ(env.setup_env, setup);
}

TEST(JobEnv, ABulkJobKnowsItsPlaceInTheGroup) {
  // `berth exec --num-jobs 8`: job 51 is rank 3 of group 5.
  LaunchMessage m = GangRank1();
  m.group = 5;
  m.group_rank = 3;
  m.num_jobs = 8;
  JobEnvironment env = BuildJobEnvironment(m, {}, {});
  EXPECT_EQ(env.run_env.at("BERTH_JOB_RANK"), "3");
  EXPECT_EQ(env.run_env.at("BERTH_NUM_JOBS"), "8");
  EXPECT_EQ(env.run_env.at("SKYPILOT_JOB_RANK"), "3");
  EXPECT_EQ(env.run_env.at("SKYPILOT_NUM_JOBS"), "8");
  EXPECT_EQ(env.setup_env.at("BERTH_JOB_RANK"), "3");
  EXPECT_EQ(env.setup_env.at("BERTH_NUM_JOBS"), "8");
}

TEST(JobEnv, BerthsNamesWinOverTheSpecAndTheSpecOverTheBase) {
  // The spec tries to pose as another job and to pick its own devices; the base has an old LR and
  // a stale rank. Berth's values win over the spec's, and the spec's over the base's.
  JobEnvironment env = BuildJobEnvironment(
      GangRank1(),
      {{"BERTH_JOB_ID", "1"},
       {"CUDA_VISIBLE_DEVICES", "0"},
       {"LR", "0.1"},
       {"BERTH_HOLLOW_SECONDS", "5"}},
      {{"LR", "0.5"}, {"SKYPILOT_NODE_RANK", "7"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}});
  EXPECT_EQ(env.run_env.at("BERTH_JOB_ID"), "42");
  EXPECT_EQ(env.setup_env.at("BERTH_JOB_ID"), "42");
  EXPECT_EQ(env.run_env.at("CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(env.run_env.at("SKYPILOT_NODE_RANK"), "1");
  EXPECT_EQ(env.run_env.at("LR"), "0.1");
  EXPECT_EQ(env.run_env.at("BERTH_HOLLOW_SECONDS"), "5");  // a BERTH_ name berth does not set
  // Setup never sees devices, whoever tried to give it some.
  EXPECT_EQ(env.setup_env.count("CUDA_VISIBLE_DEVICES"), 0u);
}

TEST(JobEnv, ACpuJobSeesNoDevices) {
  // A CPU-only job on a GPU node: CUDA_VISIBLE_DEVICES is set, and empty, so that CUDA finds no
  // device rather than all of them.
  LaunchMessage m = GangRank1();
  m.gpus.clear();
  m.gpus_per_node = 0;
  JobEnvironment env = BuildJobEnvironment(m, {}, {});
  EXPECT_EQ(env.run_env.at("CUDA_VISIBLE_DEVICES"), "");
  EXPECT_EQ(env.run_env.at("BERTH_NUM_GPUS_PER_NODE"), "0");
  EXPECT_EQ(env.setup_env.count("CUDA_VISIBLE_DEVICES"), 0u);
}

TEST(JobEnv, ASingleNodeJobHasOneAddress) {
  LaunchMessage m = GangRank1();
  m.rank = 0;
  m.num_nodes = 1;
  m.node_ips = {"10.0.0.1"};
  JobEnvironment env = BuildJobEnvironment(m, {}, {});
  EXPECT_EQ(env.run_env.at("BERTH_NODE_IPS"), "10.0.0.1");
  EXPECT_EQ(env.run_env.at("BERTH_NODE_RANK"), "0");
  EXPECT_EQ(env.setup_env.at("SKYPILOT_SETUP_NODE_RANK"), "0");
}

TEST(JobEnv, TheAgentsOwnBerthAndSkypilotVariablesStayBehind) {
  // The agent runs inside a job of an outer berth (or SkyPilot) cluster: its own rank and devices
  // must not leak into the jobs it starts.
  const char* environ_like[] = {"PATH=/usr/bin",
                                "BERTH_TOKEN=secret",
                                "BERTH_NODE_RANK=4",
                                "SKYPILOT_TASK_ID=outer",
                                "CUDA_VISIBLE_DEVICES=0,1",
                                "EMPTY=",
                                "NO_EQUALS_SIGN",
                                "LANG=C",
                                "LANG=C.UTF-8",  // a repeated name keeps its last value
                                nullptr};
  Environment all = EnvironmentFromArray(environ_like);
  EXPECT_EQ(all.size(), 7u);
  EXPECT_EQ(FilterBaseEnvironment(all),
            (Environment{{"PATH", "/usr/bin"}, {"EMPTY", ""}, {"LANG", "C.UTF-8"}}));
  EXPECT_TRUE(EnvironmentFromArray(nullptr).empty());
}

}  // namespace
}  // namespace berth::proto
