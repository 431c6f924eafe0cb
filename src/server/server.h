// Server: berth's control plane. It serves the HTTP/JSON API (users and agents), keeps the durable
// state in a Store, runs the scheduler loop, dispatches launches and stops to agents over their
// watch streams, keeps node leases, and stores jobs' logs.
//
// Decide, then act: the pure scheduler (src/sched) decides placements from a snapshot; the server
// commits them (placement + new attempt, one transaction) before sending anything, and never waits
// on an agent: messages go into per-node queues that the HTTP layer drains asynchronously.
//
// Threading: HTTP handlers run on the HttpServer's worker pool; the scheduler loop and the
// housekeeping loop have a thread each. All in-memory cluster state (nodes, active jobs, streams,
// log waiters) is guarded by one mutex, `mu_`; store calls that must be atomic with a state change
// are made while holding it (they are short; SQLite in WAL mode). Start/Stop are called from one
// controlling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "net/http.h"
#include "net/http_server.h"
#include "sched/scheduler.h"
#include "server/log_store.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace berth {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string state_dir;
  std::string token;           // empty: read or generate <state_dir>/token when one is required
  bool require_token = false;  // forced on when host is not a loopback address
  DurationMs lease_ms = 30'000;
  DurationMs kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL, unless the job sets kill_grace
  DurationMs starvation_ms = 10 * 60'000;
  size_t max_body_bytes = 64 << 20;
  int max_jobs_per_submit = 100'000;
  int threads = 0;  // 0: sized from the CPUs this process may use
};

// Whether `host` names only the local machine ("127.0.0.1", "::1", "localhost").
bool IsLoopbackHost(const std::string& host);

class Server {
 public:
  Server(ServerOptions options, const Clock& clock);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the store, loads state, binds the port and starts serving. The port is known when this
  // returns.
  Status Start();
  int port() const;
  std::string url() const;
  const std::string& token() const { return token_; }
  // Stops serving: in-flight handlers finish, streams close, threads join. Idempotent.
  void Stop();

 private:
  // --- in-memory state, all guarded by mu_ ---
  struct NodeRuntime {
    NodeRow row;
    MilliCpu cpus_used = 0;
    Mib memory_used = 0;
    std::map<int, MilliGpu> gpu_used;  // device index -> milli-GPUs held
    std::string session;               // current agent session; "" when none
    TimeMs lease_expires = 0;
    std::shared_ptr<net::Responder> watch;
    std::deque<std::string> outbox;  // messages waiting for a watch stream
  };
  struct RankState {
    bool setting_up = false;
    bool running = false;
    bool exited = false;
    int exit_code = 0;
  };
  struct ActiveJob {
    JobRow row;
    std::shared_ptr<const JobSpec> spec;
    int group_size = 0;            // BERTH_NUM_JOBS for bulk groups
    std::vector<RankState> ranks;  // per rank of the current attempt
    bool terminating = false;      // ended for the user; processes still being stopped
    TimeMs placed_at = 0;          // when the current attempt was placed
    // A preemptor's launch waits until its victims' processes are gone: (job, attempt) of each
    // victim.
    std::set<std::pair<int64_t, int>> launch_after;
  };
  // An earlier attempt of a job that went back to the queue (preempted, or its node lost) while
  // some of its ranks still run: its resources stay held until every one of them is reported gone.
  struct DyingAttempt {
    Placement placement;
    ResourceRequest per_node;
    std::set<int> alive;  // ranks not yet reported gone
  };
  struct LogWaiter {
    int64_t job;
    std::shared_ptr<net::Responder> responder;
    std::function<void()> fire;
  };

  // server.cpp
  Status LoadState();
  void HousekeepingLoop();
  void CheckLeases(TimeMs now);
  void CheckTimeLimits(TimeMs now);
  void KickScheduler();
  void SendToNode(NodeRuntime& node, const json::object& message);
  void Allocate(const JobRow& row, int sign);
  std::shared_ptr<const JobSpec> SpecFor(int64_t spec_id);
  void WakeLogWaiters(int64_t job);

  // scheduling.cpp
  void SchedulerLoop();
  void RunPass();
  sched::Snapshot BuildSnapshot(TimeMs now) const;
  std::vector<sched::NodeView> NodeViews() const;
  sched::JobRequest RequestFor(const ActiveJob& job) const;
  json::object LaunchMessage(const ActiveJob& job, int rank) const;
  // Starts a new attempt of `job` on `placement` (STARTING; resources taken); `how` ends the
  // reason.
  void Place(ActiveJob& job, const Placement& placement, const std::string& how, TimeMs now,
             Batch& batch);

  // jobs.cpp: state transitions, each committed to the store before it is visible.
  void Transition(ActiveJob& job, JobStatus status, const std::string& reason, TimeMs now,
                  Batch& batch);
  void EndJob(ActiveJob& job, JobStatus status, const std::string& reason,
              std::optional<int> exit_code, TimeMs now, Batch& batch);
  void StopRanks(ActiveJob& job, const std::string& reason);
  void Requeue(ActiveJob& job, const std::string& reason, TimeMs now, Batch& batch);
  void Release(ActiveJob& job);
  // Marks rank `rank` of a dying attempt gone; frees the attempt's resources when it was the last.
  void DyingRankGone(int64_t job, int attempt, int rank);
  // Takes `gone` (a stopped attempt now gone) off the held launches' lists, and sends the launches
  // of preemptors left waiting on nothing.
  void LaunchUnblocked(std::optional<std::pair<int64_t, int>> gone = std::nullopt);
  void ReapFinished();
  Status CommitLocked(const Batch& batch);

  // api.cpp: the user-facing API.
  void Handle(net::HttpRequest&& req, std::shared_ptr<net::Responder> res);
  net::HttpResponse HandleSubmit(const net::HttpRequest& req);
  net::HttpResponse HandleListJobs(const net::HttpRequest& req);
  net::HttpResponse HandleShowJob(int64_t id);
  net::HttpResponse HandleCancel(const net::HttpRequest& req);
  net::HttpResponse HandleNodes();
  net::HttpResponse HandleDrain(const std::string& node, bool drain);
  void HandleLogs(int64_t id, const net::HttpRequest& req, std::shared_ptr<net::Responder> res);
  json::object JobJson(const JobRow& row, const std::string& waiting) const;
  json::object NodeJson(const NodeRuntime& node) const;

  // agent_api.cpp: the agents' protocol.
  net::HttpResponse HandleRegister(const net::HttpRequest& req);
  void HandleWatch(const net::HttpRequest& req, std::shared_ptr<net::Responder> res);
  net::HttpResponse HandleHeartbeat(const net::HttpRequest& req);
  net::HttpResponse HandleReport(const net::HttpRequest& req);
  net::HttpResponse HandleLogAppend(const net::HttpRequest& req);
  net::HttpResponse HandleGetSpec(int64_t spec_id);
  Result<NodeRuntime*> AuthenticateAgent(const json::object& body);
  void HoldEndedAttempts(const NodeRuntime& node,
                         const std::set<std::tuple<int64_t, int, int>>& running);

  ServerOptions options_;
  const Clock& clock_;
  std::string token_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<net::HttpServer> http_;

  mutable std::mutex mu_;
  std::map<std::string, NodeRuntime> nodes_;  // guarded by mu_
  // Why each pending job waits (the last pass's reasons). Its own lock, taken after mu_ when both
  // are held, so that listings read it without waiting for a scheduling pass.
  std::mutex waiting_mu_;
  std::unordered_map<int64_t, std::string> waiting_;  // guarded by waiting_mu_
  std::map<int64_t, ActiveJob> jobs_;                 // guarded by mu_; non-terminal + terminating
  std::map<std::pair<int64_t, int>, DyingAttempt> dying_;  // guarded by mu_; (job, attempt)
  std::set<int64_t>
      launch_held_;  // guarded by mu_; placed preemptors whose launch waits on launch_after
  std::map<int64_t, std::shared_ptr<const JobSpec>> specs_;  // guarded by mu_; cache by spec id
  std::multimap<int64_t, LogWaiter> log_waiters_;            // guarded by mu_; job id -> long-poll
  // Cancel-all epochs: bumped by every `cancel --all` (per user) and `--all-users` (everyone). A
  // submission that was received before such a cancel but commits after it is cancelled too, so a
  // cancel never misses a submission that was in flight (SkyPilot's `cancel -a` did).
  uint64_t cancel_seq_ = 0;            // guarded by mu_; +1 per cancel-all
  uint64_t cancel_all_users_seq_ = 0;  // guarded by mu_; seq of the last --all-users
  std::map<std::string, uint64_t>
      cancel_user_seq_;          // guarded by mu_; seq of each user's last --all
  bool pass_requested_ = false;  // guarded by mu_
  bool stopping_ = false;        // guarded by mu_
  std::condition_variable sched_cv_;
  std::condition_variable housekeeping_cv_;
  std::thread scheduler_thread_;
  std::thread housekeeping_thread_;
  std::atomic<bool> started_{false};
};

}  // namespace berth
