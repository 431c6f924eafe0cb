// Containers on a node: how a job with `resources.image_id: docker:REF` runs its steps in that
// image (docs/operators.md "Containers"). The runtime is rootless podman, started by the rank's
// supervisor as the job's user inside the rank's cgroup, so berth's limits, accounting and kill
// apply to everything the container runs (podman is told to make no cgroup of its own).
//
// The agent finds the runtime once at start (DetectPodman) and turns each container rank into
// three scripts the supervisor runs like any other step (supervise/supervisor.h): a pull step, then
// setup and run, each one `podman run --rm` of the image with the job's workdir and HOME mounted at
// the same paths, host networking, the user's uid and gid inside, only the rank's GPU device
// files, /dev/shm sized to the job's memory, and an environment of the image's ENV < the task's
// envs < berth's BERTH_* / SKYPILOT_* / CUDA_VISIBLE_DEVICES. Each user's images live in a store
// of their own on the node (<state>/containers/UID), keyed by digest, pulled once per node however
// many of their jobs use them.
//
// Another runtime (enroot, Apptainer) would be a second ContainerHost kind whose scripts these
// functions choose by `runtime`; nothing outside this file knows podman.
//
// Pure (string building) except DetectPodman, which runs podman through a CommandRunner, and
// HasNvidiaCdiSpec and ContainerGpuDevices, which look at files.
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "spec/job_spec.h"
#include "supervise/timed_command.h"

namespace berth {

// What a node offers for containers, found at the agent's start.
struct ContainerHost {
  std::string runtime;  // "podman"; "" = this node runs no containers
  std::string version;  // "4.3.1"
  std::string podman;   // its path
  // "runc" where crun cannot run (a cgroup v1 or hybrid host: crun refuses hybrid hierarchies);
  // "" = podman's default.
  std::string oci_runtime;
  // On cgroup v2, rootless podman would make cgroups of its own: told --cgroups=disabled, the
  // container stays in the rank's. On v1 it makes none anyway (rootless).
  bool cgroup_v2 = false;
  std::string store_dir;  // <state>/containers: each user's image store below, by uid
  // Each user's run root and runtime dir below, by uid: short (podman refuses a run root over 50
  // characters) and on tmpfs where it can be: /run/berth-HASH (ContainerRunDir).
  std::string run_dir;
  // Registries reached over plain HTTP ("127.0.0.1:5000"): --insecure-registry.
  std::vector<std::string> insecure_registries;
  // Host paths (and their subtrees) a job's container.mounts may name: --container-mount.
  std::vector<std::string> allowed_mounts;
  // How often a pull that could not reach its registry is tried again (2 s, 4 s, 8 s, ... apart).
  // podman before 5 also retries within each pull (3 times, over ~14 s) and cannot be told not to;
  // from 5 on it is told --retry=0, so that berth's are the only retries.
  int pull_retries = 3;
  // With the image of a tag on the node already (pull: missing), its registry is first probed with
  // a TCP connect of at most this long (0: never): one that does not answer, or a name that does
  // not resolve, means the node's copy is used at once, not after podman's retries. Not done behind
  // a proxy (HTTPS_PROXY and the like) nor for a short name ("ubuntu"), which registries.conf
  // resolves.
  int registry_probe_ms = 3000;
  // A tag asked of its registry less than this long ago is taken as it resolved then (0: asked
  // every time): a job of a warm image then starts without a registry round trip.
  int tag_ttl_s = 60;
  // How often a pull says how far it got (a line in the job's log, and the job's reason).
  int pull_progress_ms = 2000;
  // The node has NVIDIA's CDI spec (/etc/cdi or /var/run/cdi): GPUs go in as nvidia.com/gpu=N,
  // which also brings the driver's libraries; else as device files.
  bool cdi_gpus = false;
};

// Finds podman (`podman_path`: a path or a name on PATH; "" = "podman") and its version. An
// absent podman is not an error: the host's `runtime` is then "".
ContainerHost DetectPodman(CommandRunner& runner, const std::string& podman_path);

// Whether NVIDIA's CDI spec (nvidia.yaml or nvidia.json, as nvidia-ctk writes it) is in one of
// `dirs`.
bool HasNvidiaCdiSpec(const std::vector<std::string>& dirs);

// The device entries for a rank given GPUs `gpus` (indices): with CDI, "nvidia.com/gpu=INDEX" each
// (the spec brings the device files and the driver's libraries); else each GPU's device file
// (`minors`: index -> its /dev/nvidiaN number, where they differ) and the driver's control files,
// from `device_dir`, each only where it is a character device.
std::vector<std::pair<std::string, std::string>> ContainerGpuDevices(
    const ContainerHost& host, const std::vector<int>& gpus, const std::map<int, int>& minors,
    const std::string& device_dir);

// One rank of a container job, as the agent plans it.
struct ContainerRank {
  ContainerSpec spec;
  std::string name;  // unique on the node: "berth-JOB-ATTEMPT-RANK"
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;     // mounted at the same path when it is a directory
  std::string workdir;  // mounted at the same path; the steps start there
  // Device files passed in, host path -> path inside ("/dev/nvidia3" -> "/dev/nvidia3"), or a CDI
  // name ("nvidia.com/gpu=3") with no path inside.
  std::vector<std::pair<std::string, std::string>> devices;
  int64_t shm_bytes = 0;  // 0: podman's default
  // A rank with a GPU fraction: its MPS daemon's pipe directory (agent/mps.h), mounted at the same
  // path, and the host's IPC namespace, which MPS clients share memory with their server in.
  std::string mps_pipe;
  // Variables passed from the step's environment to the container (by name: their values never
  // appear on a command line).
  std::vector<std::string> env_names;
  // Where the steps' scripts are (readable by the job's user): mounted read-only into the
  // container and run there by bash (sh where the image has no bash).
  std::string setup_script;
  std::string run_script;
  // An interactive job's (`interactive: true`): the run step's podman passes its terminal (the
  // rank's, supervise/terminal.h) on to the container's (--interactive --tty): keys, window size
  // and Ctrl-C reach the container's processes.
  bool tty = false;
};

// The user's image store: <store_dir>/<uid>; and their run dir: <run_dir>/<uid>, with podman's
// run root at run/ and XDG_RUNTIME_DIR at xdg/.
std::string UserStoreDir(const ContainerHost& host, uid_t uid);
std::string UserRunDir(const ContainerHost& host, uid_t uid);
// "/run/berth-HASH" (root), else "RUNTIME_DIR/berth-HASH" (the agent's XDG_RUNTIME_DIR), else
// "/tmp/berth-HASH-UID": berth-HASH is the agent's cgroup name (supervise/cgroup.h
// AgentCgroupName), which keeps two agents of one machine apart.
std::string ContainerRunDir(const std::string& state_dir, bool root, uid_t uid,
                            const std::string& runtime_dir = "");

// The variables a container gets from the job's environment `env`: the task's own `envs` (names
// in `task_envs`), and every BERTH_*, SKYPILOT_*, CUDA_VISIBLE_DEVICES, HOME, USER and LOGNAME.
// Not the host's PATH or the like: the image's own stay.
std::vector<std::string> ContainerEnvNames(const std::map<std::string, std::string>& env,
                                           const std::vector<std::string>& task_envs);

// The variable that tells every job on a node that runs containers where the user's podman is:
// UserStoreDir/podman, a script the pull step writes (PodmanWrapper) that runs podman with the
// user's store, so that a host job can list, remove, load or build images there (`berth image`).
inline constexpr char kPodmanEnv[] = "BERTH_PODMAN";
// Its text (no trailing newline).
std::string PodmanWrapper(const ContainerHost& host, uid_t uid);

// The pull step's script: honours container.pull, retries a registry it cannot reach, prints
// "berth: pull progress: L layers, B bytes" every pull_progress_ms while bytes come, and
// "berth: image REF is sha256:..." when done.
std::string PullScript(const ContainerHost& host, const ContainerRank& rank);
// The last complete progress line in `output` (a stretch of a rank's log), as the job's reason
// shows it: "3 layers, 182.4 MB downloaded". None when there is none.
std::optional<std::string> LastPullProgress(std::string_view output);
// 400 B, 12 kB, 182.4 MB, 2.31 GB.
std::string FormatDownloaded(int64_t bytes);
// A step's script: `podman run` of the image running `script_in_container` (a mounted script).
std::string StepScript(const ContainerHost& host, const ContainerRank& rank, bool run);
// What `berth exec --into` runs for a rank in a container (`name`: ContainerRank::name, its user
// `uid`): `podman exec` of `command` with sh in the rank's running container (its run step's),
// on a terminal of its own with `tty`, once that container runs (the rank is RUNNING from its run
// step's start, which may be before podman has made the container).
std::string ExecIntoContainerScript(const ContainerHost& host, const std::string& name, uid_t uid,
                                    const std::string& command, bool tty);

}  // namespace berth
