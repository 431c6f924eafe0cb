// ControlPlane: berth's server without HTTP — the composition root of the control plane. It opens
// what the state needs beside the store (the accounts, the jobs' logs, the uploads), builds and
// loads the Core (server/core/core.h) with its services, and runs the scheduler thread (a pass
// whenever the core asks for one), the housekeeping thread (leases, time and idle limits, owed
// cancels, gone nodes, uploads no job uses, `pending>` notices, heap trims when idle) and the
// notices' sender (server/notify/notice_sender.h). The HTTP front
// (server/http/server.h) builds one from the one ServerOptions, serves the API over it, and hands
// it what housekeeping must also tend on the HTTP side (Hooks).
//
// Thread-safety: Open, Start and Stop from one controlling thread, in that order; the parts it
// hands out are thread-safe themselves.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/accounts.h"
#include "server/core/core.h"
#include "server/log_store.h"
#include "server/notify/notice_sender.h"
#include "server/server_options.h"
#include "server/uploads.h"
#include "store/store.h"

namespace berth {

class ControlPlane {
 public:
  // What the housekeeping thread asks of the side that serves requests.
  struct Hooks {
    // Each tick (every 200 ms), after the core's checks (the HTTP side: terminal bridges that
    // waited too long, watch streams' pings).
    std::function<void(int64_t mono)> tick;
    // When each interactive job last had a session (job -> monotonic ms), for the idle limit.
    std::function<std::map<int64_t, int64_t>(int64_t mono, DurationMs limit)> sessions_seen;
    // What the running attempts' sampled GPUs did (server/gpu_usage_table.h), for usage and the
    // idle policy.
    std::function<std::vector<Lifecycle::GpuReading>(TimeMs now)> gpu_readings;
    // Runs `work` on a thread that may wait for the store (the uploads' collection).
    std::function<void(std::function<void()>)> post_read;
    // Runs `work` once on each thread that serves requests (an idle heap trim); how many.
    std::function<int(std::function<void()>)> on_each_request_thread;
  };

  // How far below the I/O threads the scheduler and the server's executors run (nice steps), so
  // that on a busy machine a health check or a listing is answered before a pass goes on.
  static constexpr int kWorkNice = 5;

  // `options`, `clock`, `store` and `channel` (the agents' watch streams) must outlive it.
  ControlPlane(const ServerOptions& options, const Clock& clock, Store& store,
               AgentChannel& channel);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // Opens the accounts (with `builtin_admins`), the logs and the uploads, and builds and loads the
  // core, its usage and its share rules. An error leaves nothing running.
  Status Open(std::set<std::string> builtin_admins);
  // Starts the scheduler and housekeeping threads, and asks for a first pass.
  void Start(Hooks hooks);
  // Ends the core's waits and log followers, then joins the threads. Idempotent.
  void Stop();

  Core& core() { return *core_; }
  Accounts& accounts() { return *accounts_; }
  LogStore& logs() { return *logs_; }
  Uploads& uploads() { return *uploads_; }
  NoticeSender& notice_sender() { return *notice_sender_; }

 private:
  void SchedulerLoop();
  void HousekeepingLoop();
  // Starts an idle trim (common/heap.h): asks every thread that allocates for requests and passes
  // to give its heap arena's free top back; HousekeepingLoop ends it.
  void StartIdleTrim();
  // Gives the calling thread's arena back during an idle trim, and counts it.
  void TrimThisThreadsArena();
  // Deletes the uploads no live job uses past their retention (Uploads::Collect), on a reading
  // thread (Hooks::post_read); one at a time.
  void CollectUploads();

  const ServerOptions& options_;
  const Clock& clock_;
  Store& store_;
  AgentChannel& channel_;
  Hooks hooks_;
  std::unique_ptr<Accounts> accounts_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<Uploads> uploads_;
  std::unique_ptr<Core> core_;
  // Notifications' delivery (server/notify/notice_sender.h), started with the other threads.
  std::unique_ptr<RelayTransport> notice_transport_;
  std::unique_ptr<NoticeSender> notice_sender_;
  std::atomic<bool> collecting_uploads_{false};
  // The threads of an idle trim that have not yet trimmed their arenas; whether the scheduler
  // thread still has to (it trims when it next wakes without a pass to run).
  std::atomic<int> arena_trims_owed_{0};
  std::atomic<bool> scheduler_trim_owed_{false};
  std::thread scheduler_thread_;
  std::thread housekeeping_thread_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
};

}  // namespace berth
