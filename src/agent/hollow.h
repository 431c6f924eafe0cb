// HollowNodes: N simulated nodes in one process (`berth agent --hollow N`), for scale tests and
// demos.
//
// Each node registers with the declared resources, keeps its own watch stream, heartbeats and
// reports over the real agent protocol — the server cannot tell them from real agents — but "runs"
// jobs without processes: a job lasts as many seconds as its env var BERTH_HOLLOW_SECONDS says
// (absent: until it is stopped), then exits 0, reported like a real exit — or exits CODE where
// BERTH_HOLLOW_EXIT says "CODE" (every job) or "CODE/N" (the jobs whose id N divides).
//
// Threads: one watch-stream reader per node, one heartbeat thread, one reporter/timer thread.
// Shared state is guarded by `mu_`. Run() blocks until RequestStop().
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/connection.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "protocol/agent_protocol.h"

namespace berth {

class HollowNodes {
 public:
  // `options.name` is the prefix: nodes are PREFIX-0 ... PREFIX-(count-1).
  HollowNodes(AgentOptions options, int count, const Clock& clock);
  ~HollowNodes();

  Status Run();
  void RequestStop();

 private:
  struct Node {
    std::string name;
    std::string node_id;
    std::string session;
    bool need_register = true;
    std::set<std::tuple<int64_t, int, int>> running;  // (job, attempt, rank)
    std::vector<proto::Report> reports;
  };
  struct Timer {
    int64_t due_ms;  // monotonic
    size_t node;
    int64_t job;
    int attempt;
    int rank;
    int exit_code = 0;
    bool operator<(const Timer& o) const { return due_ms > o.due_ms; }  // min-heap
  };

  Status Register(size_t index);
  void WatchLoop(size_t index);
  void HeartbeatLoop();
  void ReporterLoop();
  void OnMessage(size_t index, const proto::WatchMessage& m);
  // How a spec's jobs run: how long (none: until stopped) and how they exit.
  struct HollowRun {
    std::optional<double> seconds;
    int exit_code = 0;
    int64_t every = 1;  // exit_code for the jobs whose id this divides; 0 for the others
  };
  HollowRun RunOf(size_t index, const proto::LaunchMessage& launch);

  AgentOptions options_;
  int count_;
  const Clock& clock_;
  std::unique_ptr<AgentConnection> connection_;  // one for every simulated node
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Node> nodes_;                 // guarded by mu_ (the vector's size is fixed)
  std::vector<Timer> timers_;               // guarded by mu_; a heap
  std::map<int64_t, HollowRun> spec_runs_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  DurationMs heartbeat_ms_ = 5000;
};

}  // namespace berth
