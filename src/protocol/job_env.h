// The environment of a job's processes, as a pure function of its launch message, the spec's envs
// and the environment the agent hands down. The agent writes the result into the job's run plan;
// the supervisor runs setup with setup_env and run with run_env, each as the complete environment.
//
// Precedence, lowest first: the base environment (the agent's own, through
// FilterBaseEnvironment), then the spec's envs, then the variables berth sets, which nothing
// overrides:
//   BERTH_JOB_ID, BERTH_JOB_NAME, BERTH_ATTEMPT    the job's id, name and attempt (1, 2, ...)
//   BERTH_NODE_RANK, BERTH_NUM_NODES               this node's rank in the job, and the job's size
//   BERTH_NODE_IPS                                 every rank's address, by rank, one per line
//   BERTH_NUM_GPUS_PER_NODE                        whole GPUs per node
//   BERTH_JOB_RANK, BERTH_NUM_JOBS                 rank in the bulk group and its size (0 and 1
//                                                  for a job that is not part of a group)
//   SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES, SKYPILOT_NODE_IPS, SKYPILOT_NUM_GPUS_PER_NODE,
//   SKYPILOT_JOB_RANK, SKYPILOT_NUM_JOBS           the same values under SkyPilot's names
//   SKYPILOT_TASK_ID                               "berth-<job>-<attempt>"
// setup_env also has BERTH_SETUP_NODE_RANK and SKYPILOT_SETUP_NODE_RANK (the node rank).
// run_env also has CUDA_VISIBLE_DEVICES: the rank's device indices joined by ",", which is "" for
// a rank without GPUs (so a CPU job sees no device). setup_env never has CUDA_VISIBLE_DEVICES, not
// even one from the spec or the base.
//
// Thread-safety: pure functions; safe to call from any thread.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "protocol/agent_protocol.h"

namespace berth::proto {

using Environment = std::map<std::string, std::string>;

// A spec's envs as JobSpec keeps them: in the order given, with unique keys.
using EnvList = std::vector<std::pair<std::string, std::string>>;

struct JobEnvironment {
  Environment setup_env;
  Environment run_env;

  bool operator==(const JobEnvironment&) const = default;
};

// The environments of the rank `launch` starts (see the top of this file). Should `spec_envs`
// repeat a key, the last value wins.
JobEnvironment BuildJobEnvironment(const LaunchMessage& launch, const EnvList& spec_envs,
                                   const Environment& base);

// What a job inherits of the agent's own environment: all of it but the BERTH_* and SKYPILOT_*
// variables and CUDA_VISIBLE_DEVICES, which describe the agent, not the job.
Environment FilterBaseEnvironment(const Environment& from_environ);

// Reads a NULL-terminated array of "NAME=value" strings (like `environ`) into a map; entries
// without
// '=' are skipped, and a repeated name keeps its last value.
Environment EnvironmentFromArray(const char* const* envp);

}  // namespace berth::proto
