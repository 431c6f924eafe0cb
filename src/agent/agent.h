// Agent: runs on every node. Registers the node with the server, keeps one watch stream open to
// receive launch and stop commands, renews its lease by heartbeat, starts each job rank under a
// supervisor process (which outlives the agent), ships the jobs' output and reports their progress
// and exits, each report naming (job, attempt, rank).
//
// Seams: the server is reached through an AgentConnection (agent/connection.h), supervisors are
// started through a Launcher (agent/launcher.h), and time is read from a Clock — unit tests run the
// agent against fakes of all three (tests/unit/agent/agent_test.cpp). Job directories and inotify
// are real (a temp dir in tests).
//
// Threads: the control thread (register + watch stream), a heartbeat thread, a launcher thread
// (spec fetch and supervisor start, so that a slow fetch never blocks the stream), and a shipper
// thread (logs, events, reports, reaping). Shared state is guarded by `mu_`. Run() blocks until
// RequestStop() (e.g. on SIGTERM), then flushes reports and returns, leaving jobs running under
// their supervisors.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/account_cache.h"
#include "agent/connection.h"
#include "agent/container.h"
#include "agent/cpu_pins.h"
#include "agent/discovery.h"
#include "agent/gpu_watch.h"
#include "agent/health_keeper.h"
#include "agent/health_probes.h"
#include "agent/job_account.h"
#include "agent/launcher.h"
#include "agent/mps.h"
#include "agent/node_gpus.h"
#include "agent/node_uploads.h"
#include "agent/parsed_specs.h"
#include "agent/session_relays.h"
#include "agent/spare_dirs.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/resources.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"
#include "spec/job_spec.h"
#include "supervise/cgroup.h"
#include "supervise/supervisor.h"

namespace berth {

struct AgentOptions {
  std::string server_url;
  std::string token;
  std::string tls_fingerprint;  // pins an https server's certificate
  std::string name;
  std::string state_dir;
  std::string gpus;  // declared "TYPE:N"; empty: discover with nvidia-smi
  std::string mig;   // declared MIG layout of those (agent/mig.h); empty: none
  // Whether the server may re-slice this node's idle GPUs in MIG mode (agent/mig_layout.h).
  bool mig_reconfigure = false;
  std::string gpu_topology;  // --gpu-topology: nvidia-smi topo -m's output; empty: ask nvidia-smi
  // GPU utilisation sampling (agent/gpu_watch.h): every this often where nvidia-smi is on PATH;
  // 0: never.
  DurationMs gpu_sample_interval = 10'000;
  std::optional<MilliCpu> cpus;  // empty: what this process may use
  std::optional<Mib> memory;     // empty: MemTotal
  std::string pool;
  std::map<std::string, std::string> labels;
  std::string address;   // empty: the address the server sees
  std::string self_exe;  // path of the berth binary, for supervisors
  // The environment jobs start from (the agent's own, by default; see FilterBaseEnvironment).
  std::map<std::string, std::string> base_environment;
  // Run each job as its user (set when the agent is root): `lookup_account` finds the account on
  // this node (an answer is reused for 2 s: a burst of launches reads the user database once);
  // a user without one fails the job with that reason. Unset: every job runs as the agent's own
  // user.
  AccountLookup lookup_account;
  // Set when the agent is not root: the one user whose jobs it may run (as itself); other users'
  // jobs fail, saying why, instead of running as this user with its files and credentials.
  std::string only_user;
  // The upload cache (agent/node_uploads.h): <state_dir>/uploads, at most this many bytes.
  int64_t upload_cache_bytes = 20LL << 30;
  // Reports in which no job ended wait up to this long for more news before they are sent, so
  // that a short job's acceptance, start and exit reach the server in one request and one commit
  // (two before; on the server, a request and a commit are most of a short job's cost). An exit
  // is never held, nor anything queued with one, nor a round that shipped output (whoever reads
  // a job's output must see it running). 0: send each round at once.
  int64_t report_hold_ms = 20;
  // Isolation (supervise/cgroup.h, docs/security.md "Isolation"): each rank in a cgroup of its own
  // with its limits, where this host allows. Off: none.
  bool isolation = true;
  bool require_isolation = false;         // refuse to start where no cgroup can be made
  int64_t job_pids_max = 16384;           // a rank's processes and threads
  std::optional<Mib> job_memory_default;  // a job without a memory request; empty: the node's
  std::string gpu_device_dir = "/dev";    // where nvidiaN are (tests point it at mknod'ed nodes)
  // Containers (agent/container.h): off, or podman (`podman`: its path; "" = on PATH) where found,
  // with these plain-HTTP registries, host paths jobs may mount, and retries of an unreachable
  // registry.
  bool containers = true;
  std::string podman;
  std::vector<std::string> insecure_registries;
  std::vector<std::string> container_mounts;
  int pull_retries = 3;
  int image_tag_ttl_s = 60;  // ContainerHost::tag_ttl_s
  // Node health (agent/health_probes.h, docs/operators.md "Node health"): probes, prolog and
  // epilog. Seams left null get the real ones (processes, the settings' kernel log, the local
  // file systems).
  HealthSettings health;
  std::shared_ptr<CommandRunner> command_runner;
  std::shared_ptr<KernelLog> kernel_log;
  std::shared_ptr<NodeSystem> node_system;
};

class Agent {
 public:
  // `clock`, `connection` and `launcher` must outlive the agent.
  Agent(AgentOptions options, const Clock& clock, AgentConnection& connection, Launcher& launcher);
  ~Agent();

  // Runs until RequestStop(). Returns an error if the node cannot join (bad options, name held by
  // another live agent).
  Status Run();
  // Safe from any thread and from a signal-handling thread.
  void RequestStop();

 private:
  struct LocalJob {
    proto::AttemptRank id;
    std::string dir;
    pid_t pid = 0;            // supervisor
    int64_t log_shipped = 0;  // bytes of output.log the server has
    size_t events_seen = 0;   // events of the events file already queued as reports
    bool exited = false;      // an "exited" event was seen
    int watch = -1;           // inotify watch on dir
  };

  // In a rank's directory: why the agent ended it (EndRank), said in its exit report.
  static constexpr char kStopReasonFile[] = "stop_reason";

  Status LoadIdentity();
  // Isolation of a rank (RunPlan::cgroup, RunPlan::limits).
  RankLimits LimitsOf(const proto::LaunchMessage& m, const ResourceRequest& request) const;
  void FenceGpuEnvironment(const proto::LaunchMessage& m, RunPlan& plan) const;
  // The node's GPUs now (a re-slice replaces them; a launch keeps the ones it planned with).
  std::shared_ptr<const NodeGpus> Gpus() const EXCLUDES(gpus_mu_);
  // The server re-slices a GPU (proto::MigLayoutMessage): applied, then the node registers again
  // with its new slices, or with the error (RegisterRequest::mig_error). On the control thread.
  void ApplyMigLayout(const proto::MigLayoutMessage& m) EXCLUDES(mu_, gpus_mu_);
  void SetUpContainers();
  // The directories of user `uid`'s image store and podman run dir (and the agent's two above
  // them), each theirs; made where missing (/run loses the run dirs at a reboot).
  Status MakeContainerDirs(uid_t uid, gid_t gid) const;
  // A container rank's steps (RunPlan::pull, setup, run) in its image; an error fails the launch.
  Status PlanContainer(const proto::LaunchMessage& m, const JobSpec& spec, const std::string& key,
                       const std::string& job_dir, const std::optional<JobAccount>& account,
                       const std::string& mount_script, RunPlan& plan) const;
  void AdoptExisting() EXCLUDES(mu_);
  Status Register() EXCLUDES(mu_);
  void ControlLoop() EXCLUDES(mu_);
  void HandleMessage(const proto::WatchMessage& message) EXCLUDES(mu_);
  void HeartbeatLoop() EXCLUDES(mu_);
  // Whether no rank runs or starts (HealthKeeper runs its heavy probes only then).
  bool NodeIdle() EXCLUDES(mu_);
  void LauncherLoop() EXCLUDES(mu_);
  // Launches whose jobs need uploaded content (a workdir, file mounts), which may take long to
  // fetch: on a thread of their own, so that no other launch waits behind a fetch.
  void UploadLauncherLoop() EXCLUDES(mu_);
  // Writes the run plan and starts the supervisor; a spec `error` (unavailable, unreadable) fails
  // the launch.
  void Launch(const proto::LaunchMessage& launch, std::shared_ptr<const JobSpec> spec,
              std::string error) EXCLUDES(mu_);
  Result<RunPlan> PlanRun(const proto::LaunchMessage& m, const JobSpec& spec,
                          const std::string& key, const std::string& job_dir) EXCLUDES(mu_);
  // Builds the uploaded tree `manifest` for launch `m` in `dest`, owned by `account` (the
  // agent's user when none).
  Status BuildUpload(const proto::LaunchMessage& m, const std::string& manifest,
                     const std::string& dest, const std::optional<JobAccount>& account)
      EXCLUDES(mu_);
  // Builds the spec's file mounts in <job_dir>/mounts; answers the shell that places them
  // (agent/file_mounts.h), to run before setup.
  Result<std::string> BuildFileMounts(const proto::LaunchMessage& m, const JobSpec& spec,
                                      const std::string& job_dir,
                                      const std::optional<JobAccount>& account) EXCLUDES(mu_);
  void ShipperLoop() EXCLUDES(mu_);
  // Ships output and reports of the jobs in `only` (all jobs when null). With `may_hold`, reports
  // that include no exit are kept for a later round instead (returns true; see report_hold_ms).
  bool ShipOnce(bool final, const std::set<std::string>* only = nullptr, bool may_hold = false)
      EXCLUDES(mu_);
  // ShipOnce's parts. What ShipOutputs did for one rank: whether all its output up to now went
  // (false: try again later), and, while its image is `pulling`, the last pull progress line it
  // shipped.
  struct ShipState {
    bool pulling = false;
    bool shipped_all = false;
    bool refused = false;  // the server refused its output this time (not tried again this time)
    std::optional<std::string> progress;
  };
  // Ships the new output of `jobs` (their log_shipped advance), in as few requests as the batch
  // caps allow (proto::kMaxLogPieces, proto::kMaxLogBatchBytes; at most 1 MiB of a rank per
  // request); *shipped_output when some went. Then: the reports of their new events; what the
  // server answered.
  void ShipOutputs(std::vector<LocalJob>& jobs, std::vector<ShipState>& ships,
                   const std::string& session, bool final, bool* shipped_output) EXCLUDES(mu_);
  static void AddEventReports(const proto::AttemptRank& id,
                              const std::vector<SupervisorEvent>& fresh,
                              std::vector<proto::Report>& out);
  void ApplyReportAnswer(const proto::ReportRequest& request, const proto::ReportAnswer& answer)
      EXCLUDES(mu_);
  void WatchDir(LocalJob& job, const std::string& key) REQUIRES(mu_);
  void StopJob(LocalJob& job) REQUIRES(mu_);
  // Ends rank `key` for `reason` (what its exit report says in place of "stopped"): the MPS
  // daemon its GPU share ran under died.
  void EndRank(const std::string& key, const std::string& reason) REQUIRES(mu_);
  // A job whose supervisor is gone without an "exited" event would never be reported gone and the
  // server would hold its resources for good: records one (exit 137). Returns whether the job has
  // ended (recorded now or before).
  bool RecordEndOfDeadSupervisor(const LocalJob& job);
  // Sleeps up to `ms` or until RequestStop() (or until `wake` is signalled).
  void Pause(int64_t ms) EXCLUDES(mu_) { Pause(stop_cv_, ms); }
  void Pause(CondVar& wake, int64_t ms) EXCLUDES(mu_);
  void WakeAll() EXCLUDES(mu_);  // every loop below, to see stop_
  static std::string KeyOf(const proto::AttemptRank& id);

  AgentOptions options_;
  const Clock& clock_;
  AgentConnection& connection_;
  Launcher& launcher_;
  NodeResources resources_;
  CgroupHost cgroups_;        // set in Run(), read-only after
  ContainerHost containers_;  // set in Run(), read-only after
  // Its GPUs and their files: set in Run(); replaced whole by a re-slice (ApplyMigLayout), which
  // also rewrites resources_.gpus (the control thread's, as Register() is) and mig_error_.
  mutable Mutex gpus_mu_;
  std::shared_ptr<const NodeGpus> gpus_ GUARDED_BY(gpus_mu_);
  std::string mig_error_;  // the control thread's
  // Set by a message that needs the node registered again at once (a re-slice): the watch ends.
  std::atomic<bool> reregister_{false};
  // Its managers, each with its own lock: the CPUs pinned ranks hold (configured in Run()), the
  // specs parsed for launches, the unix accounts looked up for them, the GPU sampler and what it
  // learned per rank.
  CpuPins cpu_pins_;
  ParsedSpecs specs_;
  AccountCache accounts_;
  std::shared_ptr<CommandRunner> gpu_runner_;  // the sampler's (set in Run(), before the loop)
  GpuWatch gpu_watch_;
  std::string node_id_;
  int lock_fd_ = -1;  // holds flock(<state_dir>/agent.lock) for the agent's lifetime

  Mutex mu_;
  // One condition per waiting loop, so that an event wakes only the loop it concerns: with one
  // shared condition every launch woke all five loops, ~16 thread switches per job.
  CondVar launch_cv_;  // LauncherLoop: launches_
  CondVar upload_cv_;  // UploadLauncherLoop: upload_launches_
  CondVar ship_cv_;    // ShipperLoop without inotify: reports_ or dirty_
  CondVar stop_cv_;    // HeartbeatLoop, Pause: stop_
  std::map<std::string, LocalJob> jobs_ GUARDED_BY(mu_);  // key "job-attempt-rank"
  std::deque<proto::LaunchMessage> launches_ GUARDED_BY(mu_);
  // Taken from launches_ (and in launching_), waiting for the upload launcher.
  std::deque<std::pair<proto::LaunchMessage, std::shared_ptr<const JobSpec>>> upload_launches_
      GUARDED_BY(mu_);
  // Taken from launches_, not yet in jobs_: key -> the rank's id.
  std::map<std::string, proto::AttemptRank> launching_ GUARDED_BY(mu_);
  std::set<std::string> stopped_launches_ GUARDED_BY(mu_);  // of launching_, told to stop
  std::deque<proto::Report> reports_ GUARDED_BY(mu_);       // waiting to be sent
  std::string session_ GUARDED_BY(mu_);
  DurationMs heartbeat_ms_ GUARDED_BY(mu_) = 5000;
  DurationMs lease_ms_ GUARDED_BY(mu_) = 30'000;
  bool need_register_ GUARDED_BY(mu_) = true;
  std::string old_specs_;  // <state>/specs.old to remove once registered; set before the threads
  std::atomic<bool> stop_{false};
  NodeUploads uploads_;   // thread-safe itself
  SpareDirs spare_dirs_;  // recycled job directories (its own lock)
  // Node health: probes, hooks, sticky faults (its own lock; set up in Run(), before the threads).
  HealthKeeper health_;
  // The MPS daemons that enforce fractional GPU shares (its own lock, taken under mu_ or alone;
  // configured in Run(), before the threads).
  MpsDaemons mps_;
  // Terminals, execs and port forwards relayed to ranks (its own lock); Run() waits for them to
  // see a stop.
  SessionRelays relays_;
  // The shipper wakes on changes in job directories (inotify) instead of scanning them all: with a
  // thousand jobs, a 50 ms scan alone would eat most of a core. A full scan still runs every
  // second.
  int inotify_fd_ = -1;                                    // set before the threads start
  std::map<int, std::string> watch_keys_ GUARDED_BY(mu_);  // inotify watch -> job key
  std::set<std::string> dirty_ GUARDED_BY(mu_);            // jobs to look at in the next round
};

}  // namespace berth
