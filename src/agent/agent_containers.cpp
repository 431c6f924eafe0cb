// The agent's container jobs (agent/container.h): finding the runtime at start, and planning a
// container rank's steps.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agent/agent.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace berth {
namespace {

// A directory owned by `uid`:`gid` with `mode` (made if missing, given if not theirs). Only for
// paths whose parent the user cannot write (root's, or the agent's own): the directory is changed
// through a descriptor opened without following a symlink, so a link put in its place is refused,
// never followed.
Status OwnedDir(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Status::Internal("cannot create " + path + ": " + strerror(errno));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::Internal(path + " is not a directory: " + strerror(errno));
  struct stat st {};
  Status result;
  if (::fstat(fd, &st) != 0) {
    result = Status::Internal("cannot stat " + path + ": " + strerror(errno));
  } else if ((st.st_uid != uid || st.st_gid != gid) && ::fchown(fd, uid, gid) != 0) {
    result = Status::Internal("cannot give " + path + " to uid " + std::to_string(uid) + ": " +
                              strerror(errno));
  } else if ((st.st_mode & 07777) != mode && ::fchmod(fd, mode) != 0) {
    result = Status::Internal("cannot chmod " + path + ": " + strerror(errno));
  }
  ::close(fd);
  return result;
}

}  // namespace

void Agent::SetUpContainers() {
  if (!options_.containers) {
    LogInfo("containers: turned off (--containers off)");
    return;
  }
  ProcessRunner runner;
  containers_ =
      DetectPodman(options_.command_runner ? *options_.command_runner : runner, options_.podman);
  if (containers_.runtime.empty()) {
    LogInfo("containers: none (podman not found); jobs that name an image go to other nodes");
    return;
  }
  // A pure cgroup v2 host has cgroup.controllers at the root. Elsewhere (v1, or hybrid with a
  // unified hierarchy beside) crun refuses to start containers: runc, where installed.
  containers_.cgroup_v2 = ::access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
  if (!containers_.cgroup_v2) containers_.oci_runtime = FindExecutable("runc");
  containers_.store_dir = options_.state_dir + "/containers";
  containers_.insecure_registries = options_.insecure_registries;
  containers_.allowed_mounts = options_.container_mounts;
  containers_.pull_retries = options_.pull_retries;
  containers_.tag_ttl_s = options_.image_tag_ttl_s;
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  containers_.run_dir = ContainerRunDir(options_.state_dir, ::geteuid() == 0, ::geteuid(),
                                        runtime_dir ? runtime_dir : "");
  // Said in the state dir, for what cleans up after the agent (`berth local down` unmounts
  // what podman left mounted below it).
  WriteFileAtomic(options_.state_dir + "/container-run-dir", containers_.run_dir + "\n", false);
  containers_.cdi_gpus = HasNvidiaCdiSpec({"/etc/cdi", "/var/run/cdi"});
  LogInfo("containers: podman {} ({}{}{})", containers_.version,
          containers_.oci_runtime.empty() ? "its default OCI runtime" : containers_.oci_runtime,
          containers_.cgroup_v2 ? ", cgroup v2" : ", cgroup v1",
          containers_.cdi_gpus ? ", GPUs by CDI" : "");
}

Status Agent::MakeContainerDirs(uid_t uid, gid_t gid) const {
  // Users' stores and run dirs are below these, each their own: they reach theirs, never list the
  // others'. Made by the first container job (a node that runs none has none).
  const bool root = ::geteuid() == 0;
  BERTH_RETURN_IF_ERROR(OwnedDir(containers_.store_dir, ::geteuid(), ::getegid(), 0711));
  if (!root && StartsWith(containers_.run_dir, "/tmp/")) {
    // No runtime dir of its own: a name in /tmp, which must be this user's and nobody else's.
    struct stat st {};
    if (::lstat(containers_.run_dir.c_str(), &st) == 0 &&
        (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())) {
      return Status::Unavailable(containers_.run_dir +
                                 " is not this agent's (set XDG_RUNTIME_DIR)");
    }
  }
  BERTH_RETURN_IF_ERROR(
      OwnedDir(containers_.run_dir, ::geteuid(), ::getegid(), root ? 0711 : 0700));
  // What is below the user's own two directories, the pull step makes as the user.
  BERTH_RETURN_IF_ERROR(OwnedDir(UserStoreDir(containers_, uid), uid, gid, 0700));
  return OwnedDir(UserRunDir(containers_, uid), uid, gid, 0700);
}

Status Agent::PlanContainer(const proto::LaunchMessage& m, const JobSpec& spec,
                            const std::string& key, const std::string& job_dir,
                            const std::optional<JobAccount>& account,
                            const std::string& mount_script, RunPlan& plan) const {
  if (containers_.runtime.empty()) {
    return Status::Unavailable("node " + options_.name +
                               " runs no containers (no podman, or --containers off)");
  }
  BERTH_RETURN_IF_ERROR(
      CheckContainerMounts(*spec.container, containers_.allowed_mounts, options_.name));
  ContainerRank rank;
  rank.spec = *spec.container;
  rank.name = "berth-" + key;
  rank.uid = account ? account->uid : ::geteuid();
  rank.gid = account ? account->gid : ::getegid();
  rank.workdir = plan.workdir;
  rank.tty = spec.interactive;
  // The user's real home, from their account (or the agent's own, when it runs jobs as itself):
  // never the job's HOME variable, which its task sets at will (`envs: {HOME: /etc}` would mount
  // any directory past the node's --container-mount policy).
  std::string home;
  if (account) {
    home = account->home;
  } else if (auto own = options_.base_environment.find("HOME");
             own != options_.base_environment.end()) {
    home = own->second;
  }
  struct stat st {};
  if (!home.empty() && ::stat(home.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
      st.st_uid == rank.uid) {
    rank.home = home;
  }
  BERTH_RETURN_IF_ERROR(MakeContainerDirs(rank.uid, rank.gid));
  const std::shared_ptr<const NodeGpus> gpus = Gpus();
  rank.devices = ContainerGpuDevices(containers_, gpus->GpusOpened(m.gpus), gpus->minors(),
                                     options_.gpu_device_dir);
  for (const std::string& cap : gpus->CapFiles(m.gpus)) {
    rank.devices.emplace_back(cap, "/dev/nvidia-caps/" + cap.substr(cap.rfind('/') + 1));
  }
  if (spec.resources.memory > 0) rank.shm_bytes = spec.resources.memory * 1024 * 1024;
  if (auto pipe = plan.run_env.find("CUDA_MPS_PIPE_DIRECTORY"); pipe != plan.run_env.end()) {
    rank.mps_pipe = pipe->second;
  }
  std::vector<std::string> task_envs;
  for (const auto& [name, value] : spec.envs) task_envs.push_back(name);
  rank.env_names = ContainerEnvNames(plan.run_env, task_envs);
  // The steps' scripts, the user's to read, mounted into the container.
  for (auto [script, file] :
       {std::pair{&plan.setup, &rank.setup_script}, std::pair{&plan.run, &rank.run_script}}) {
    *file = job_dir + (script == &plan.setup ? "/setup.container.sh" : "/run.container.sh");
    if (!WriteFileInPlace(*file, *script, 0600)) {
      return Status::Internal("cannot write " + *file + ": " + strerror(errno));
    }
    if (::chown(file->c_str(), rank.uid, rank.gid) != 0) {
      return Status::Internal("cannot give " + *file + " to uid " + std::to_string(rank.uid) +
                              ": " + strerror(errno));
    }
  }
  plan.pull = mount_script + PullScript(containers_, rank);
  if (!plan.setup.empty()) plan.setup = StepScript(containers_, rank, /*run=*/false);
  if (!plan.run.empty()) plan.run = StepScript(containers_, rank, /*run=*/true);
  return Status::Ok();
}

}  // namespace berth
