// Container scripts for rootless podman (agent/container.h).
#include "agent/container.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "agent/pull_script.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "supervise/cgroup.h"
#include "upload/digest.h"

namespace berth {
namespace {

// Where a step's script is mounted inside the container.
constexpr char kStepInside[] = "/.berth-step.sh";

// podman's global flags: the user's own store on this node, no systemd (cgroupfs, events to a
// file), and the OCI runtime that works on this host.
std::string PodmanCommand(const ContainerHost& host, uid_t uid) {
  const std::string store = UserStoreDir(host, uid);
  std::string out = ShellQuote(host.podman) + " --root " + ShellQuote(store + "/storage") +
                    " --runroot " + ShellQuote(UserRunDir(host, uid) + "/run") + " --tmpdir " +
                    ShellQuote(store + "/tmp") + " --cgroup-manager=cgroupfs --events-backend=file";
  if (!host.oci_runtime.empty()) out += " --runtime " + ShellQuote(host.oci_runtime);
  return out;
}

// The registry of an image reference ("localhost:5000/x:1" -> "localhost:5000"; "ubuntu" -> "").
std::string RegistryOf(const std::string& image) {
  const size_t slash = image.find('/');
  if (slash == std::string::npos) return "";
  std::string first = image.substr(0, slash);
  const bool host = first.find('.') != std::string::npos || first.find(':') != std::string::npos ||
                    first == "localhost";
  return host ? first : "";
}

// Where a registry takes connections: its host and port ("127.0.0.1:5000" -> 127.0.0.1, 5000;
// "ghcr.io" -> ghcr.io, 443, or 80 when it is reached over plain HTTP; "[::1]:5000" -> ::1, 5000).
std::pair<std::string, int> RegistryAddress(const std::string& registry, bool insecure) {
  const int default_port = insecure ? 80 : 443;
  std::string host = registry;
  std::string port;
  if (StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close != std::string::npos) {
      if (close + 1 < host.size() && host[close + 1] == ':') port = host.substr(close + 2);
      host = host.substr(1, close - 1);
    }
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  const int n = port.empty() ? default_port : std::atoi(port.c_str());
  return {host, n > 0 && n < 65536 ? n : default_port};
}

}  // namespace

ContainerHost DetectPodman(CommandRunner& runner, const std::string& podman_path) {
  ContainerHost host;
  const std::string found = FindExecutable(podman_path.empty() ? "podman" : podman_path);
  if (found.empty()) return host;
  CommandOutcome out = runner.Run({.argv = {found, "--version"}, .env = {}, .timeout = 10'000});
  // "podman version 4.3.1"
  const std::string line = out.FirstLine();
  const size_t at = line.rfind(' ');
  if (!out.ok() || !StartsWith(line, "podman version ") || at == std::string::npos) return host;
  host.runtime = "podman";
  host.podman = found;
  host.version = line.substr(at + 1);
  return host;
}

std::string UserStoreDir(const ContainerHost& host, uid_t uid) {
  return host.store_dir + "/" + std::to_string(uid);
}

std::string UserRunDir(const ContainerHost& host, uid_t uid) {
  return host.run_dir + "/" + std::to_string(uid);
}

std::string ContainerRunDir(const std::string& state_dir, bool root, uid_t uid,
                            const std::string& runtime_dir) {
  // Named as the agent's cgroups are: one per state dir.
  const std::string name = AgentCgroupName(state_dir);
  if (root) return "/run/" + name;
  if (!runtime_dir.empty() && runtime_dir.size() <= 24) return runtime_dir + "/" + name;
  return fmt::format("/tmp/{}-{}", name, uid);
}

std::vector<std::string> ContainerEnvNames(const std::map<std::string, std::string>& env,
                                           const std::vector<std::string>& task_envs) {
  std::vector<std::string> out;
  for (const auto& [name, value] : env) {
    // (BERTH_PODMAN is a path on the host: nothing inside the image)
    const bool ours = (StartsWith(name, "BERTH_") && name != kPodmanEnv) ||
                      StartsWith(name, "SKYPILOT_") || StartsWith(name, "CUDA_MPS_") ||
                      name == "CUDA_VISIBLE_DEVICES" || name == "HOME" || name == "USER" ||
                      name == "LOGNAME";
    const bool task = std::find(task_envs.begin(), task_envs.end(), name) != task_envs.end();
    if (ours || task) out.push_back(name);
  }
  return out;
}

namespace {}  // namespace

bool HasNvidiaCdiSpec(const std::vector<std::string>& dirs) {
  return std::any_of(dirs.begin(), dirs.end(), [](const std::string& dir) {
    return ::access((dir + "/nvidia.yaml").c_str(), R_OK) == 0 ||
           ::access((dir + "/nvidia.json").c_str(), R_OK) == 0;
  });
}

std::vector<std::pair<std::string, std::string>> ContainerGpuDevices(
    const ContainerHost& host, const std::vector<int>& gpus, const std::map<int, int>& minors,
    const std::string& device_dir) {
  auto is_char_device = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (int index : gpus) {
    if (host.cdi_gpus) {
      out.emplace_back("nvidia.com/gpu=" + std::to_string(index), "");
      continue;
    }
    auto minor = minors.find(index);
    const int file = minor == minors.end() ? index : minor->second;
    const std::string path = device_dir + "/nvidia" + std::to_string(file);
    if (is_char_device(path)) out.emplace_back(path, "/dev/nvidia" + std::to_string(file));
  }
  if (!gpus.empty() && !host.cdi_gpus) {
    for (const char* control : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}) {
      const std::string path = device_dir + "/" + control;
      if (is_char_device(path)) out.emplace_back(path, std::string("/dev/") + control);
    }
  }
  return out;
}

std::string PodmanWrapper(const ContainerHost& host, uid_t uid) {
  return "#!/bin/bash\n"
         "# berth: podman with your image store on this node (written by your container jobs)\n"
         "export XDG_RUNTIME_DIR=" +
         ShellQuote(UserRunDir(host, uid) + "/xdg") + "\nexec " + PodmanCommand(host, uid) +
         " \"$@\"";
}

std::optional<std::string> LastPullProgress(std::string_view output) {
  static constexpr std::string_view kMarker = "berth: pull progress: ";
  // The last complete line that says it.
  for (size_t end = output.rfind('\n'); end != std::string_view::npos && end > 0;) {
    const size_t begin = output.rfind('\n', end - 1);
    std::string_view line = output.substr(begin == std::string_view::npos ? 0 : begin + 1,
                                          end - (begin == std::string_view::npos ? 0 : begin + 1));
    if (StartsWith(line, kMarker)) {
      long long layers = -1, bytes = -1;
      char tail[8] = {};
      const std::string rest(line.substr(kMarker.size()));
      if (std::sscanf(rest.c_str(), "%lld layers, %lld %7s", &layers, &bytes, tail) != 3 ||
          layers < 0 || bytes < 0 || std::string_view(tail) != "bytes") {
        return std::nullopt;
      }
      return fmt::format("{} {}, {} downloaded", layers, layers == 1 ? "layer" : "layers",
                         FormatDownloaded(bytes));
    }
    if (begin == std::string_view::npos) break;
    end = begin;
  }
  return std::nullopt;
}

std::string FormatDownloaded(int64_t bytes) {
  // Decimal units, as registries and podman show sizes.
  if (bytes < 1000) return fmt::format("{} B", bytes);
  if (bytes < 1'000'000) return fmt::format("{} kB", (bytes + 500) / 1000);
  if (bytes < 1'000'000'000) return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6);
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

std::string PullScript(const ContainerHost& host, const ContainerRank& rank) {
  const std::string store = UserStoreDir(host, rank.uid);
  const std::string& image = rank.spec.image;
  const std::string registry = RegistryOf(image);
  const bool insecure = !registry.empty() &&
                        std::find(host.insecure_registries.begin(), host.insecure_registries.end(),
                                  registry) != host.insecure_registries.end();
  const PullPolicy pull = rank.spec.pull;
  const size_t at = image.find('@');
  // podman 5 and later retry within a pull unless told not to: berth's loop does it, knowing when
  // the node's copy will do.
  const bool podman_retries = !host.version.empty() && std::atoi(host.version.c_str()) >= 5;
  std::string pull_flags = insecure ? "--tls-verify=false" : "";
  if (podman_retries) pull_flags += pull_flags.empty() ? "--retry=0" : " --retry=0";
  std::string probe_host, probe_port, probe_secs;
  if (!registry.empty() && host.registry_probe_ms > 0) {
    const auto [address, port] = RegistryAddress(registry, insecure);
    probe_host = address;
    probe_port = std::to_string(port);
    probe_secs = fmt::format("{:.3f}", host.registry_probe_ms / 1000.0);
  }
  // What agent/pull.sh reads (its head says what each one is), then the script itself.
  const std::pair<const char*, std::string> vars[] = {
      {"store", store},
      {"run", UserRunDir(host, rank.uid)},
      {"image", image},
      // What a tag resolved to: "DIGEST REF" (the reference checked, as names are hashes).
      {"cache", store + "/tags/" + Sha256Hex(image)},
      {"wrapper", PodmanWrapper(host, rank.uid)},
      {"policy", pull == PullPolicy::kAlways  ? "always"
                 : pull == PullPolicy::kNever ? "never"
                                              : "missing"},
      {"pinned", at != std::string::npos ? "1" : "0"},
      {"digest", at != std::string::npos ? image.substr(at + 1) : ""},
      {"tag_ttl", std::to_string(std::max<int64_t>(0, host.tag_ttl_s))},
      {"probe_host", probe_host},
      {"probe_port", probe_port},
      {"probe_secs", probe_secs},
      {"registry", registry},
      {"name", rank.name},
      {"retries", std::to_string(std::max(0, host.pull_retries))},
      {"pull_flags", pull_flags},
      {"progress_every", fmt::format("{:.3f}", host.pull_progress_ms / 1000.0)},
  };
  std::string s;
  for (const auto& [name, value] : vars) s += fmt::format("{}={}\n", name, ShellQuote(value));
  s += "pd() { " + PodmanCommand(host, rank.uid) + " \"$@\"; }\n";
  s += kPullScript;
  return s;
}

std::string ExecIntoContainerScript(const ContainerHost& host, const std::string& name, uid_t uid,
                                    const std::string& command, bool tty) {
  const std::string podman = PodmanCommand(host, uid);
  const std::string container = ShellQuote(name + "-run");
  // The job is RUNNING once its run step started, which may be before podman has made the
  // container: wait for it (up to a minute; podman exec then says what is wrong).
  return "export XDG_RUNTIME_DIR=" + ShellQuote(UserRunDir(host, uid) + "/xdg") +
         "\nfor _ in $(seq 600); do\n  [ \"$(" + podman + " container inspect --format " +
         "'{{.State.Running}}' " + container + " 2>/dev/null)\" = true ] && break\n  sleep 0.1\n" +
         "done\nexec " + podman + " exec" + (tty ? " --interactive --tty" : "") + " " + container +
         " /bin/sh -c " + ShellQuote(command) + "\n";
}

std::string StepScript(const ContainerHost& host, const ContainerRank& rank, bool run) {
  const std::string name = rank.name + (run ? "-run" : "-setup");
  std::vector<std::string> args = {
      "run", "--rm", "--replace", "--name", name, "--label", "berth.job=" + rank.name,
      // Pulled by the pull step; a run never reaches a registry.
      "--pull=never", "--network=host", "--entrypoint", "/bin/sh", "--workdir", rank.workdir, "-v",
      rank.workdir + ":" + rank.workdir, "-v",
      (run ? rank.run_script : rank.setup_script) + ":" + kStepInside + ":ro"};
  // (root's own jobs run rootful: uid 0 inside is root, and keep-id is for rootless podman only)
  if (!rank.spec.remap_root && rank.uid != 0) args.push_back("--userns=keep-id");
  if (host.cgroup_v2) args.push_back("--cgroups=disabled");
  if (!rank.home.empty() && rank.home != rank.workdir) {
    args.insert(args.end(), {"-v", rank.home + ":" + rank.home});
  }
  if (rank.shm_bytes > 0) args.push_back("--shm-size=" + std::to_string(rank.shm_bytes) + "b");
  for (const auto& [from, to] : rank.devices) {
    args.insert(args.end(), {"--device", to.empty() ? from : from + ":" + to});
  }
  if (!rank.mps_pipe.empty()) {
    args.insert(args.end(), {"-v", rank.mps_pipe + ":" + rank.mps_pipe, "--ipc=host"});
  }
  for (const std::string& mount : rank.spec.mounts) args.insert(args.end(), {"-v", mount});
  for (const std::string& env : rank.env_names) args.insert(args.end(), {"--env", env});
  if (run && rank.tty) args.insert(args.end(), {"--interactive", "--tty"});
  args.push_back(rank.spec.image);
  args.insert(args.end(), {"-c", fmt::format("if command -v bash >/dev/null 2>&1; then exec bash "
                                             "{0}; fi; exec sh {0}",
                                             kStepInside)});
  // Appended rather than `"literal" + std::string`, which gcc 12 warns about (-Wrestrict, a false
  // positive) in this file's unity batch.
  std::string s = "export XDG_RUNTIME_DIR=";
  s += ShellQuote(UserRunDir(host, rank.uid) + "/xdg");
  s += "\nexec ";
  s += PodmanCommand(host, rank.uid);
  // podman's own warnings ("/" is not a shared mount, on most hosts) are not the job's output;
  // its errors are.
  s += " --log-level=error";
  for (const std::string& a : args) s += " " + ShellQuote(a);
  return s + "\n";
}

}  // namespace berth
