// The node's health probes (docs/operators.md "Node health"): what each checks and how its output
// is read. HealthProber runs one round of them through seams a test can fake: commands (nvidia-smi,
// the admin's health.d scripts) through a CommandRunner with a hard timeout each, the kernel log
// through a KernelLog, and disk space and directories through a NodeSystem.
//
// Probes: "disk" (free space where the agent writes), "cgroups" (the agent's cgroup directories
// still writable), "clock" (skew against the server's clock), "gpus" (nvidia-smi lists every GPU
// of the node), "ecc" (uncorrected ECC errors, retired or remapped pages pending), "xid" (NVIDIA
// XID errors in the kernel log, mapped to the GPU by PCI bus id), "health.d/NAME" (an admin's
// script: exit 0 = healthy, else its first line of output is the reason; "gpu N: ..." names a
// GPU). The GPU probes run only where nvidia-smi is found.
//
// Thread-safety: the parsers are pure; a HealthProber is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/health_book.h"
#include "common/status.h"
#include "supervise/timed_command.h"

namespace berth {

struct HealthSettings {
  bool enabled = true;
  int64_t interval_ms = 30'000;  // light probes
  int64_t timeout_ms = 30'000;   // each probe's hard limit
  int clean_runs = 2;            // clean runs of a failed probe before its fault is forgotten
  std::string nvidia_smi = "nvidia-smi";  // "": no GPU probes
  std::string kernel_log;                 // a file or /dev/kmsg; "": no XID probe
  std::string scripts_dir = "/etc/berth/health.d";
  // Heavy probes (a DCGM-style diagnostic): run every idle_interval_ms while no rank runs on the
  // node, and killed (not counted) when one is launched.
  std::string idle_dir = "/etc/berth/health-idle.d";
  int64_t idle_interval_ms = 3'600'000;
  int64_t idle_timeout_ms = 600'000;  // a diagnostic runs for minutes
  int64_t min_free_mib = 512;
  int64_t max_clock_skew_ms = 10'000;
  // XIDs that are the application's errors, never the GPU's (NVIDIA's XID catalogue).
  std::set<int> xid_ignore = {13, 31, 43, 45, 68, 69, 94};
  // XIDs that make the whole node unhealthy rather than one GPU.
  std::set<int> xid_node = {74};
  // Admin scripts run as root around each rank (Slurm's prolog and epilog).
  std::string prolog_dir = "/etc/berth/prolog.d";
  std::string epilog_dir = "/etc/berth/epilog.d";
  int64_t hook_timeout_ms = 60'000;
};

// "13,31,43" -> {13, 31, 43}; "" -> {}.
Result<std::set<int>> ParseXidList(const std::string& text);

struct XidEvent {
  std::string bus_id;  // NormalizeBusId'd
  int code = 0;
  std::string text;  // the rest of the line
};
// A kernel log line "... NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
std::optional<XidEvent> ParseXidLine(std::string_view line);
// "00000000:3B:00.0" (nvidia-smi) and "0000:3b:00" (the kernel log) -> "0000:3b:00".
std::string NormalizeBusId(std::string_view bus_id);
// A few words on an XID ("fell off the bus"), or "" for one without a known meaning.
std::string XidMeaning(int code);

// One row of `nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,
// retired_pages.pending,remapped_rows.pending --format=csv,noheader,nounits`.
struct GpuHealthRow {
  int index = 0;
  std::string bus_id;                      // normalized
  std::optional<int64_t> ecc_uncorrected;  // none: "[N/A]"
  bool retired_pending = false;
  bool remapped_pending = false;
};
inline constexpr char kGpuHealthQuery[] =
    "index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "remapped_rows.pending";
std::vector<GpuHealthRow> ParseGpuHealthRows(const std::string& csv);

// The kernel's log, read as it grows.
class KernelLog {
 public:
  virtual ~KernelLog() = default;
  // The lines written since the last call (the first call: since the log was opened).
  virtual std::vector<std::string> ReadNew() = 0;
};

// A file that grows (a test's stand-in, a syslog file) or /dev/kmsg. Starts at its end: what was
// logged before the agent started is not read. Follows truncation and rotation by rename.
class FileKernelLog final : public KernelLog {
 public:
  explicit FileKernelLog(std::string path);
  ~FileKernelLog() override;
  std::vector<std::string> ReadNew() override;

 private:
  std::vector<std::string> ReadFrom(int fd);  // the whole lines after offset_ in `fd`

  std::string path_;
  int fd_ = -1;
  bool device_ = false;  // /dev/kmsg: one record per read
  ino_t inode_ = 0;      // of the file open, to notice a rotation
  int64_t offset_ = 0;
  std::string partial_;  // a line not ended yet
};

// The node's file systems, as the probes see them.
class NodeSystem {
 public:
  virtual ~NodeSystem() = default;
  virtual std::optional<int64_t> FreeMib(const std::string& path) = 0;  // none: cannot tell
  virtual bool Writable(const std::string& dir) = 0;
  // The executable regular files of `dir`, in name order (names starting with '.' or ending with
  // '~' left out); empty when there is no such directory.
  virtual std::vector<std::string> Executables(const std::string& dir) = 0;
};

class LocalNodeSystem final : public NodeSystem {
 public:
  std::optional<int64_t> FreeMib(const std::string& path) override;
  bool Writable(const std::string& dir) override;
  std::vector<std::string> Executables(const std::string& dir) override;
};

// What the prober checks on this node.
struct ProbeTargets {
  std::vector<int> gpus;                 // the node's GPU indices
  std::vector<std::string> disk_paths;   // where free space must remain
  std::vector<std::string> cgroup_dirs;  // the agent's cgroup directories (none: no isolation)
};

class HealthProber {
 public:
  // `kernel_log` may be null (no XID probe). All must outlive the prober.
  HealthProber(const HealthSettings& settings, ProbeTargets targets, CommandRunner& runner,
               KernelLog* kernel_log, NodeSystem& system);

  // One round of the light probes. `clock_skew_ms`: the agent's clock minus the server's, when
  // measured.
  std::vector<ProbeRun> RunLight(std::optional<int64_t> clock_skew_ms);
  // The idle probes; a run that `abort` stopped is left out.
  // `*aborted`: a launch stopped them (they are due again at the next idle time).
  std::vector<ProbeRun> RunIdle(const std::function<bool()>& abort, bool* aborted);
  // Runs the scripts of `dir` (a prolog or epilog) with `env`, in name order, until one fails:
  // its failure ("prolog.d/10-check: exit code 1: no scratch space"), or "" when all passed.
  std::string RunHooks(const std::string& dir, const std::string& what,
                       const std::map<std::string, std::string>& env);

 private:
  ProbeRun Disk();
  ProbeRun Cgroups();
  ProbeRun Clock(int64_t skew_ms);
  // "gpus" and "ecc" from one nvidia-smi query; refreshes bus_to_gpu_.
  void Gpus(std::vector<ProbeRun>& out);
  ProbeRun Xid();
  ProbeRun Script(const std::string& path, const std::string& prefix,
                  const std::function<bool()>& abort, bool* aborted, int64_t timeout_ms);

  const HealthSettings& settings_;
  ProbeTargets targets_;
  CommandRunner& runner_;
  KernelLog* kernel_log_;
  NodeSystem& system_;
  std::string nvidia_smi_;  // its path; "" when not found
  std::map<std::string, int> bus_to_gpu_;
};

}  // namespace berth
