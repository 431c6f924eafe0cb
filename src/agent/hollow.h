// HollowNodes: N simulated nodes in one process (`berth agent --hollow N`), for scale tests and
// demos.
//
// Each node registers with the declared resources, keeps its own watch stream, heartbeats and
// reports over the real agent protocol — the server cannot tell them from real agents — but "runs"
// jobs without processes: a job lasts as many seconds as its env var BERTH_HOLLOW_SECONDS says
// (absent: until it is stopped), then exits 0, reported like a real exit — or exits CODE where
// BERTH_HOLLOW_EXIT says "CODE" (every job) or "CODE/N" (the jobs whose id N divides).
//
// Threads: a fixed few whatever the count, so that a scale benchmark measures the server and not
// this process: against an http:// server, every node's watch stream is read on one thread
// (agent/watch_mux.h), a few registrar threads (re)register the nodes whose stream ended, and
// one dispatcher handles the streams' messages in order (it fetches specs, which blocks). Against
// https:// or unix: servers each node reads its stream on a thread of its own instead. Besides:
// one heartbeat thread, one reporter/timer thread. Shared state is guarded by `mu_`. Run() blocks
// until RequestStop().
//
// Several servers on one store (a comma-separated --server, docs/ha.md): calls go through one
// FailoverAgentConnection, which moves on when its server is unavailable; a node's stream is opened
// at the server that answered its registration, and a stream that ends registers the node again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/connection.h"
#include "agent/watch_mux.h"
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
    bool queued = false;  // waits in to_register_
    size_t server = 0;    // in the server list: the one that answered its registration
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

  // Registers node `index` through `connection` (connection_, or a registrar's own).
  Status Register(size_t index, FailoverAgentConnection& connection);
  // With streams_: registers the nodes queued in to_register_, then opens their streams, through
  // `connection`, this registrar's own: registrations go out side by side, as 10,000 real
  // agents' would (one connection serves one request at a time).
  void RegisterLoop(FailoverAgentConnection& connection);
  // Marks node `index` for registration; with streams_, queues it for RegisterLoop (once). Caller
  // holds mu_.
  void QueueRegistration(size_t index);
  // With streams_: handles the messages they delivered, in their order.
  void DispatchLoop();
  // Without streams_: one node's registrations and stream, on a thread of its own.
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
  std::vector<std::string> server_urls_;                 // --server, split at its commas
  std::unique_ptr<FailoverAgentConnection> connection_;  // one for every simulated node
  std::vector<std::unique_ptr<FailoverAgentConnection>> registrar_connections_;  // one each
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Node> nodes_;                 // guarded by mu_ (the vector's size is fixed)
  std::vector<Timer> timers_;               // guarded by mu_; a heap
  std::map<int64_t, HollowRun> spec_runs_;  // guarded by mu_
  std::unique_ptr<WatchMux> streams_;       // null: a thread per node
  // One each, so that a message wakes only the dispatcher and a registration one registrar.
  std::condition_variable registrations_cv_;  // to_register_ grew, or stop
  std::condition_variable messages_cv_;       // messages_ grew, or stop
  std::deque<size_t> to_register_;            // guarded by mu_
  // Guarded by mu_. At most one launch and one stop per rank placed on these nodes: the server's
  // placements bound it.
  std::deque<std::pair<size_t, proto::WatchMessage>> messages_;
  std::atomic<bool> stop_{false};
  DurationMs heartbeat_ms_ = 5000;
};

}  // namespace berth
