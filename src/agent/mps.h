// MpsDaemons: the NVIDIA MPS control daemons that enforce fractional GPU shares on this node
// (`--gpus T4:0.5`; docs/gpus.md "Fractions"). One daemon per device (a whole GPU or a MIG slice)
// that runs ranks with a fraction: started by the first such rank's launch, as the agent's user
// (root on a real node), from `nvidia-cuda-mps-control` found on the agent's PATH, in the
// foreground (`-f`) in a session of its own, with its pipe and log directories under
// <dir>/<device>/; quit (`echo quit | nvidia-cuda-mps-control`, then SIGTERM) when the last rank on
// it has ended. Each rank's environment names its daemon and its share: CUDA_MPS_PIPE_DIRECTORY,
// CUDA_MPS_LOG_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its share of the device's SMs) and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its share of the device's memory, where that is known).
//
// A daemon outlives an agent restart as its ranks do (re-parented to init; its pid and start time
// in <dir>/<device>/daemon); Adopt() takes it back with the ranks found running. A daemon that dies
// is found by Check(), which answers the ranks that were on it, for the agent to end with that
// reason; the next fractional launch on the device starts a new one.
//
// Thread-safe: its own lock, held while a daemon starts or quits (rare, and bounded by timeouts),
// so that a start and a quit on one device never overlap.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/quantity.h"
#include "common/status.h"

namespace berth {

// The name of the MPS control program, looked for on the agent's PATH.
inline constexpr char kMpsControl[] = "nvidia-cuda-mps-control";

// What a fractional rank asks of MpsDaemons::Acquire: its device, how CUDA names that device to a
// daemon (a GPU's index, or a slice's MIG UUID), its share, and the device's memory (MiB; none:
// not known, no memory limit).
struct MpsShare {
  int device = 0;
  std::string cuda_id;
  MilliGpu milli = 0;
  std::optional<Mib> device_memory;
};

// The environment a rank with `share` gets from the daemon whose pipe and log directories are
// `pipe_dir`, `log_dir`. Plain function.
std::map<std::string, std::string> MpsClientEnvironment(const MpsShare& share,
                                                        const std::string& pipe_dir,
                                                        const std::string& log_dir);

class MpsDaemons {
 public:
  // `control`: the path of nvidia-cuda-mps-control ("" where the node has none: no sharing is
  // enforced); `dir`: where the daemons' directories go (<state>/mps).
  MpsDaemons(std::string control, std::string dir);
  MpsDaemons() = default;
  MpsDaemons(MpsDaemons&&) = delete;

  // Re-points an empty instance (the agent learns its PATH and state dir in Run()).
  void Configure(std::string control, std::string dir) EXCLUDES(mu_);
  // Whether this node enforces fractions ("mps") or not ("none"): RegisterRequest::sharing.
  std::string Sharing() const EXCLUDES(mu_);

  // Rank `key` runs with `share`: starts the device's daemon when none runs (waiting up to
  // `start_timeout_ms` for its control pipe) and answers the rank's environment. Errors: no MPS
  // here, or the daemon would not start (its log's last line says why).
  Result<std::map<std::string, std::string>> Acquire(const std::string& key, const MpsShare& share,
                                                     DurationMs start_timeout_ms = 10'000)
      EXCLUDES(mu_);
  // Rank `key` has ended (no-op for a rank without a share): the last rank of a daemon quits it.
  void Release(const std::string& key) EXCLUDES(mu_);
  // A rank found running when the agent starts, with its run environment: a rank on a daemon
  // (CUDA_MPS_PIPE_DIRECTORY under `dir`) is counted on it again. Returns false when that daemon is
  // gone (the rank lost its GPU share: the agent ends it).
  bool Adopt(const std::string& key, const std::map<std::string, std::string>& run_env)
      EXCLUDES(mu_);
  // The daemons that died since the last call: the ranks that were on them, each with the reason
  // to end it with. Their records are dropped (the next launch starts a new daemon).
  std::vector<std::pair<std::string, std::string>> Check() EXCLUDES(mu_);
  // The pid of the device's daemon (0: none runs). For tests and `berth nodes`.
  pid_t DaemonOf(int device) const EXCLUDES(mu_);

 private:
  struct Daemon {
    pid_t pid = 0;
    uint64_t start_ticks = 0;  // /proc/PID/stat's start time, against a reused pid
    std::set<std::string> ranks;
  };
  std::string DeviceDir(int device) const REQUIRES(mu_) {
    return dir_ + "/" + std::to_string(device);
  }
  Result<Daemon> Start(const MpsShare& share, DurationMs timeout_ms) REQUIRES(mu_);
  void Quit(int device, const Daemon& daemon) REQUIRES(mu_);
  static bool Alive(const Daemon& daemon);

  mutable Mutex mu_;
  std::string control_ GUARDED_BY(mu_);
  std::string dir_ GUARDED_BY(mu_);
  std::map<int, Daemon> daemons_ GUARDED_BY(mu_);           // device -> its daemon
  std::map<std::string, int> rank_device_ GUARDED_BY(mu_);  // rank key -> its device
};

}  // namespace berth
