// Container scripts for rootless podman (agent/container.h).
#include "agent/container.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

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
                      StartsWith(name, "SKYPILOT_") || name == "CUDA_VISIBLE_DEVICES" ||
                      name == "HOME" || name == "USER" || name == "LOGNAME";
    const bool task = std::find(task_envs.begin(), task_envs.end(), name) != task_envs.end();
    if (ours || task) out.push_back(name);
  }
  return out;
}

namespace {

// berth_progress: while podman pulls (with $log its output), every `every_ms` a line
// "berth: pull progress: L layers, B bytes" when B grew. podman prints nothing while a layer
// downloads when its output is not a terminal; it downloads each blob into a file under TMPDIR
// (set here to the user's download dir: one pull of theirs at a time, under the lock), so the
// largest size each file reached, summed, is what came so far. L counts the blobs it fetches
// ("Copying blob" lines, not those "skipped: already exists").
std::string ProgressFunction(const std::string& store, int every_ms) {
  return fmt::format(
      "export TMPDIR={download}\n"
      "berth_progress() {{\n"
      "  local -A most; local last=0 total size name v layers\n"
      // A wait that nothing outlives when the reporter is killed (no sleep left running): a read,
      // by bash itself, of a pipe that nobody writes, for as long as the timeout.
      "  while :; do\n"
      "    read -rt {every} <> <(:)\n"
      "    while read -r size name; do\n"
      "      [ \"${{most[$name]:-0}}\" -lt \"$size\" ] && most[$name]=$size\n"
      "    done < <(find \"$TMPDIR\" -type f -printf '%s %p\\n' 2>/dev/null)\n"
      "    total=0; for v in \"${{most[@]}}\"; do total=$((total + v)); done\n"
      "    [ $total -gt $last ] || continue\n"
      "    last=$total\n"
      "    layers=$(grep '^Copying blob' \"$log\" | grep -vc 'skipped')\n"
      "    echo \"berth: pull progress: $layers layers, $total bytes\"\n"
      "  done\n"
      "}}\n",
      fmt::arg("download", ShellQuote(store + "/download")),
      fmt::arg("every", fmt::format("{:.3f}", every_ms / 1000.0)));
}

}  // namespace

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
  const std::string run_dir = UserRunDir(host, rank.uid);
  const std::string& image = rank.spec.image;
  const std::string registry = RegistryOf(image);
  const bool insecure = !registry.empty() &&
                        std::find(host.insecure_registries.begin(), host.insecure_registries.end(),
                                  registry) != host.insecure_registries.end();
  const std::string podman = PodmanCommand(host, rank.uid);
  const PullPolicy pull = rank.spec.pull;
  const bool pinned = image.find('@') != std::string::npos;
  // What a tag resolved to: "DIGEST REF" (the reference checked, as names are hashes).
  const std::string cache = store + "/tags/" + upload::Sha256Hex(image);
  std::string s = fmt::format(
      // The user's own directories below the two the agent made theirs.
      "umask 077\n"
      "mkdir -p {store}/storage {store}/tmp {store}/tags {store}/download {run}/run {run}/xdg || "
      "exit 125\n"
      "export XDG_RUNTIME_DIR={run}/xdg\n"
      // The user's podman on this node, with this store ($BERTH_PODMAN in every job): rewritten
      // when it says something else (another agent version), else left alone (read by bash
      // itself: a warm start spawns nothing for it).
      "wrapper={wrapper_text}\n"
      "current=; IFS= read -rd '' current 2>/dev/null < {store}/podman\n"
      "if [ \"$current\" != \"$wrapper\"$'\\n' ]; then\n"
      "  printf '%s\\n' \"$wrapper\" > {store}/podman.new.$$ && chmod 700 {store}/podman.new.$$ && "
      "mv -f {store}/podman.new.$$ {store}/podman\n"
      "fi\n"
      "image={image}\n"
      "cache={cache}\n"
      // Containers of this user's jobs killed past their grace leave a record (no process):
      // removed once five minutes old (a younger one may be a job's on its way to start), and
      // only when the store lists any (a podman call costs tens of milliseconds).
      "if grep -qs '\"berth-' {store}/storage/*-containers/containers.json; then\n"
      "  {podman} container prune -f --filter label=berth.job --filter until=5m >/dev/null 2>&1\n"
      "fi\n"
      // Whether digest $1 is an image here, without asking podman: the store's image list.
      "known() {{ grep -qs \"\\\"$1\\\"\" {store}/storage/*-images/images.json; }}\n",
      fmt::arg("store", ShellQuote(store)), fmt::arg("run", ShellQuote(run_dir)),
      fmt::arg("image", ShellQuote(image)), fmt::arg("cache", ShellQuote(cache)),
      fmt::arg("podman", podman),
      fmt::arg("wrapper_text", ShellQuote(PodmanWrapper(host, rank.uid))));
  // A warm image needs no lock and no podman.
  if (pinned && pull != PullPolicy::kAlways) {
    s += fmt::format("if known {0}; then echo \"berth: image $image is {0}\"; exit 0; fi\n",
                     ShellQuote(image.substr(image.find('@') + 1)));
  } else if (!pinned && pull == PullPolicy::kMissing && host.tag_ttl_s > 0) {
    // A tag asked of its registry less than tag_ttl_s ago is taken as it resolved then.
    s += fmt::format(
        "if [ -f \"$cache\" ] && [ $(( $(date +%s) - $(stat -c %Y \"$cache\") )) -lt {ttl} ]; "
        "then\n"
        "  read -r d r < \"$cache\"\n"
        "  if [ \"$r\" = \"$image\" ] && known \"$d\"; then echo \"berth: image $image is $d\"; "
        "exit 0; fi\n"
        "fi\n",
        fmt::arg("ttl", host.tag_ttl_s));
  }
  // One pull at a time of this user's on this node (released while waiting to try again): a
  // second job of an image waits for the first pull, then finds its layers here.
  s += "exec 9>>" + ShellQuote(store + "/pull.lock") + " && flock 9\n";
  // What a killed pull left of its downloads (only one pull of the user's runs: the lock).
  s += "rm -rf " + ShellQuote(store + "/download") + "/* 2>/dev/null\n";
  s += ProgressFunction(store, host.pull_progress_ms);
  s += "digest=$(" + podman +
       " image inspect --format '{{.Digest}}' \"$image\" 2>/dev/null) && have=1 || have=0\n";
  if (pull == PullPolicy::kNever) {
    s += "if [ $have = 0 ]; then\n"
         "  echo \"berth: image pull failed: $image is not on this node (container.pull: never)\" "
         ">&2\n"
         "  exit 125\n"
         "fi\n";
    return s + "echo \"berth: image $image is $digest\"\n";
  }
  // missing: an image pinned by digest that is here is used as it is; a tag is asked of its
  // registry (a moved tag brings its new layers; the others are not downloaded), and where the
  // registry cannot be reached the node's copy is used. always: asked each time, and a failure
  // is final.
  const bool may_skip = pull == PullPolicy::kMissing && pinned;
  const bool may_fall_back = pull == PullPolicy::kMissing && !pinned;
  s += "unreached=0\n";
  if (may_fall_back && !registry.empty() && host.registry_probe_ms > 0) {
    // The node's copy without podman's retries when the registry does not even take a connection.
    const auto [probe_host, probe_port] = RegistryAddress(registry, insecure);
    s += fmt::format(
        "if [ $have = 1 ] && [ -z \"$HTTPS_PROXY$https_proxy$HTTP_PROXY$http_proxy$ALL_PROXY"
        "$all_proxy\" ] && ! timeout {secs} bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' {host} {port} "
        "2>/dev/null; then\n"
        "  unreached=1\n"
        "  echo \"berth: the registry {registry} could not be reached; using this node's copy of "
        "$image\"\n"
        "fi\n",
        fmt::arg("secs", fmt::format("{:.3f}", host.registry_probe_ms / 1000.0)),
        fmt::arg("host", ShellQuote(probe_host)), fmt::arg("port", probe_port),
        fmt::arg("registry", registry));
  }
  // podman 5 and later retry within a pull unless told not to: berth's loop does it, knowing when
  // the node's copy will do.
  const bool podman_retries = !host.version.empty() && std::atoi(host.version.c_str()) >= 5;
  s += fmt::format(
      "if [ $have = 0 ] || {{ [ {may_skip} = 0 ] && [ $unreached = 0 ]; }}; then\n"
      "  if [ $have = 0 ]; then echo \"berth: pulling $image\"; else echo \"berth: checking "
      "$image at its registry\"; fi\n"
      // On the run dir (tmpfs where it can be), not on the disk that may be full.
      "  log=$XDG_RUNTIME_DIR/pull-{name}.log\n"
      "  delay=2 tries=0 pruned=0 unreachable=0\n"
      "  while :; do\n"
      "    : > \"$log\"; berth_progress & reporter=$!\n"
      // podman's warning that / is not a shared mount (rootless, on most hosts) says nothing
      // about the job: not in its output.
      "    {podman} pull{tls}{retry} \"$image\" 2>&1 | grep --line-buffered -v "
      "'is not a shared mount, this could cause issues' | tee \"$log\"\n"
      "    rc=${{PIPESTATUS[0]}}\n"
      "    kill $reporter 2>/dev/null; wait $reporter 2>/dev/null\n"
      "    [ $rc = 0 ] && break\n"
      "    unreachable=0\n"
      // A full disk: this user's images that no container uses go (once), then it is tried
      // again; still full, the job fails naming the sizes.
      "    if grep -qi 'no space left on device' \"$log\"; then\n"
      "      if [ $pruned = 0 ]; then\n"
      "        pruned=1\n"
      "        echo \"berth: the disk is full; removing your images that no container uses\"\n"
      "        {podman} image prune -a -f >/dev/null 2>&1\n"
      "        continue\n"
      "      fi\n"
      "      echo \"berth: image pull failed: no space left on device for $image: your images on "
      "this node take $(du -sh {store}/storage 2>/dev/null | cut -f1), the disk has $(df -h "
      "--output=avail {store} 2>/dev/null | tail -1 | tr -d ' ') free\" >&2\n"
      "      break\n"
      "    fi\n"
      // A registry's name that does not resolve is not tried again (DNS answered: there is no
      // such host), nor is a wrong name or a refused login; only a registry that could not be
      // reached is, and not when the node's copy will do (podman has retried already).
      "    if grep -qi 'no such host' \"$log\"; then unreachable=1; break; fi\n"
      "    grep -qiE 'connection refused|i/o timeout|network is unreachable|"
      "no route to host|TLS handshake timeout|connection reset|: 50[234] ' \"$log\" || break\n"
      "    unreachable=1\n"
      "    [ $have = 1 ] && [ {may_fall_back} = 1 ] && break\n"
      "    [ $tries -ge {retries} ] && break\n"
      "    tries=$((tries + 1))\n"
      "    echo \"berth: the registry could not be reached; trying again in ${{delay}}s\"\n"
      "    flock -u 9; sleep $delay; flock 9\n"
      "    delay=$((delay * 2))\n"
      "  done\n"
      "  rm -f \"$log\"\n"
      "  if [ $rc != 0 ] && [ $unreachable = 1 ] && [ $have = 1 ] && [ {may_fall_back} = 1 ]; "
      "then\n"
      "    echo \"berth: the registry could not be reached; using this node's copy of $image\"\n"
      "  elif [ $rc != 0 ]; then\n"
      "    exit $rc\n"
      "  fi\n"
      "  digest=$({podman} image inspect --format '{{{{.Digest}}}}' \"$image\") || exit 125\n"
      "  if [ $rc = 0 ] && [ {pinned} = 0 ]; then printf '%s %s\\n' \"$digest\" \"$image\" > "
      "\"$cache\"; fi\n"
      "elif [ $unreached = 0 ]; then\n"
      "  echo \"berth: image $image is on this node\"\n"
      "fi\n",
      fmt::arg("may_skip", may_skip ? 1 : 0), fmt::arg("may_fall_back", may_fall_back ? 1 : 0),
      fmt::arg("pinned", pinned ? 1 : 0), fmt::arg("store", ShellQuote(store)),
      fmt::arg("name", rank.name), fmt::arg("retries", std::max(0, host.pull_retries)),
      fmt::arg("podman", podman), fmt::arg("tls", insecure ? " --tls-verify=false" : ""),
      fmt::arg("retry", podman_retries ? " --retry=0" : ""));
  return s + "echo \"berth: image $image is $digest\"\n";
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
