#include "protocol/job_env.h"

#include "common/strings.h"

namespace berth::proto {

JobEnvironment BuildJobEnvironment(const LaunchMessage& launch, const EnvList& spec_envs,
                                   const Environment& base) {
  Environment env = base;
  for (const auto& [k, v] : spec_envs) env[k] = v;

  std::vector<std::string> devices;
  for (int g : launch.gpus) devices.push_back(std::to_string(g));
  std::string rank = std::to_string(launch.rank);
  std::string num_nodes = std::to_string(launch.num_nodes);
  std::string node_ips = Join(launch.node_ips, "\n");
  std::string gpus_per_node = std::to_string(launch.gpus_per_node);
  std::string job_rank = launch.group ? std::to_string(launch.group_rank) : "0";
  std::string num_jobs = launch.group ? std::to_string(launch.num_jobs) : "1";
  const Environment berth = {
      {"BERTH_JOB_ID", std::to_string(launch.job)},
      {"BERTH_JOB_NAME", launch.name},
      {"BERTH_ATTEMPT", std::to_string(launch.attempt)},
      {"BERTH_NODE_RANK", rank},
      {"BERTH_NUM_NODES", num_nodes},
      {"BERTH_NODE_IPS", node_ips},
      {"BERTH_NUM_GPUS_PER_NODE", gpus_per_node},
      {"BERTH_JOB_RANK", job_rank},
      {"BERTH_NUM_JOBS", num_jobs},
      {"SKYPILOT_NODE_RANK", rank},
      {"SKYPILOT_NUM_NODES", num_nodes},
      {"SKYPILOT_NODE_IPS", node_ips},
      {"SKYPILOT_NUM_GPUS_PER_NODE", gpus_per_node},
      {"SKYPILOT_JOB_RANK", job_rank},
      {"SKYPILOT_NUM_JOBS", num_jobs},
      {"SKYPILOT_TASK_ID",
       "berth-" + std::to_string(launch.job) + "-" + std::to_string(launch.attempt)},
  };
  for (const auto& [k, v] : berth) env[k] = v;

  JobEnvironment out;
  out.setup_env = env;
  out.setup_env["BERTH_SETUP_NODE_RANK"] = rank;
  out.setup_env["SKYPILOT_SETUP_NODE_RANK"] = rank;
  // Setup prepares the node (installs, downloads); it is given no devices.
  out.setup_env.erase("CUDA_VISIBLE_DEVICES");
  out.run_env = std::move(env);
  out.run_env["CUDA_VISIBLE_DEVICES"] = Join(devices, ",");
  return out;
}

Environment FilterBaseEnvironment(const Environment& from_environ) {
  Environment env;
  for (const auto& [key, value] : from_environ) {
    if (StartsWith(key, "BERTH_") || StartsWith(key, "SKYPILOT_") || key == "CUDA_VISIBLE_DEVICES")
      continue;
    env.emplace(key, value);
  }
  return env;
}

Environment EnvironmentFromArray(const char* const* envp) {
  Environment env;
  if (!envp) return env;
  for (const char* const* e = envp; *e; ++e) {
    std::string_view kv = *e;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  return env;
}

}  // namespace berth::proto
