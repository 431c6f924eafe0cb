// Agent: runs on every node. Registers the node with the server, keeps one watch stream open to
// receive launch and stop commands, renews its lease by heartbeat, starts each job rank under a
// supervisor process (which outlives the agent), ships the jobs' output and reports their progress
// and exits, each report naming (job, attempt, rank).
//
// Threads: the control thread (register + watch stream), a heartbeat thread, a launcher thread
// (spec fetch and supervisor spawn, so that a slow fetch never blocks the stream), and a shipper
// thread (logs, events, reports, reaping). Shared state is guarded by `mu_`. Run() blocks until
// RequestStop() (e.g. on SIGTERM), then flushes reports and returns, leaving jobs running under
// their supervisors.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/discovery.h"
#include "agent/spawner.h"
#include "common/json_util.h"
#include "common/status.h"

namespace berth {

struct AgentOptions {
  std::string server_url;
  std::string token;
  std::string name;
  std::string state_dir;
  std::string gpus;              // declared "TYPE:N"; empty: discover with nvidia-smi
  std::optional<MilliCpu> cpus;  // empty: what this process may use
  std::optional<Mib> memory;     // empty: MemTotal
  std::string pool;
  std::map<std::string, std::string> labels;
  std::string address;   // empty: the address the server sees
  std::string self_exe;  // path of the berth binary, for supervisors
};

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();

  // Runs until RequestStop(). Returns an error if the node cannot join (bad options, name held by
  // another live agent).
  Status Run();
  // Safe from any thread and from a signal-handling thread.
  void RequestStop();

 private:
  struct LocalJob {
    int64_t job = 0;
    int attempt = 0;
    int rank = 0;
    std::string dir;
    pid_t pid = 0;            // supervisor
    int64_t log_shipped = 0;  // bytes of output.log the server has
    size_t events_seen = 0;   // events of the events file already queued as reports
    bool exited = false;      // an "exited" event was seen
    bool exit_acked = false;
    bool stop_sent = false;
    int watch = -1;  // inotify watch on dir
  };

  Status LoadIdentity();
  void AdoptExisting();
  Status Register();
  void ControlLoop();
  void HandleMessage(const json::object& message);
  void HeartbeatLoop();
  void LauncherLoop();
  void Launch(const json::object& launch);
  void ShipperLoop();
  // Ships output and reports of the jobs in `only` (all jobs when null).
  void ShipOnce(bool final, const std::set<std::string>* only = nullptr);
  void WatchDir(LocalJob& job, const std::string& key);
  void StopJob(LocalJob& job);
  std::string KeyOf(int64_t job, int attempt, int rank) const;

  AgentOptions options_;
  NodeResources resources_;
  std::string node_id_;
  int lock_fd_ = -1;  // holds flock(<state_dir>/agent.lock) for the agent's lifetime

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, LocalJob> jobs_;  // guarded by mu_; key "job-attempt-rank"
  std::deque<json::object> launches_;     // guarded by mu_
  std::set<std::string> launching_;  // guarded by mu_; keys taken from launches_, not yet in jobs_
  std::set<std::string>
      stopped_launches_;              // guarded by mu_; keys of launching_ told to stop meanwhile
  std::deque<json::object> reports_;  // guarded by mu_; waiting to be sent
  std::string session_;               // guarded by mu_
  DurationMs heartbeat_ms_ = 5000;    // guarded by mu_
  DurationMs lease_ms_ = 30'000;      // guarded by mu_
  int64_t last_renewal_ = 0;          // guarded by mu_; monotonic ms of the last lease renewal
  bool need_register_ = true;         // guarded by mu_
  std::map<int64_t, std::string> spec_cache_;  // guarded by mu_; spec id -> JSON text
  std::atomic<bool> stop_{false};
  std::atomic<void*> watch_client_{nullptr};  // the client reading the watch stream, to abort it
  std::unique_ptr<Spawner> spawner_;          // set before the threads start
  // The shipper wakes on changes in job directories (inotify) instead of scanning them all: with a
  // thousand jobs, a 50 ms scan alone would eat most of a core. A full scan still runs every
  // second.
  int inotify_fd_ = -1;                    // set before the threads start
  std::map<int, std::string> watch_keys_;  // guarded by mu_; inotify watch -> job key
  std::set<std::string> dirty_;            // guarded by mu_; jobs to look at in the next round
};

}  // namespace berth
