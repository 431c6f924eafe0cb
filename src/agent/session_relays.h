// SessionRelays: the agent's manager of interactive sessions — a rank's terminal (`berth attach`),
// a command run into a rank (`berth exec --into`), a port forwarded to a rank — each relayed
// between a WebSocket to the server and the rank, on a thread of its own (at most kMaxSessions at
// once; the server times out one never opened). The agent composes it (agent/agent.h).
//
// Thread-safety: thread-safe. The count of relays running is guarded by its own lock, never held
// while calling the agent back (AgentSide), the server or the rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "agent/connection.h"
#include "agent/container.h"
#include "agent/launcher.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"
#include "supervise/cgroup.h"

namespace berth {

// The name of a rank's job directory under <state>/jobs: "JOB-ATTEMPT-RANK".
std::string RankKey(const proto::AttemptRank& id);

class SessionRelays {
 public:
  static constexpr int kMaxSessions = 256;

  // What the relays ask of the agent, never under their own lock: its session with the server,
  // and whether the rank of job directory `key` runs here now.
  struct AgentSide {
    std::function<std::string()> session;
    std::function<bool(const std::string& key)> runs;
  };
  struct Node {
    std::string state_dir;
    std::string name;
    const ContainerHost* containers = nullptr;  // set before the first session, read-only after
    const CgroupHost* cgroups = nullptr;        // likewise
  };
  // Everything given must outlive the relays.
  SessionRelays(Node node, Launcher& launcher, AgentConnection& connection,
                const std::atomic<bool>& stop, AgentSide side);

  // Each starts the relay on a thread of its own and returns; a relay refused for the cap is
  // logged (the server times the session out).
  void Terminal(const proto::SessionMessage& m) EXCLUDES(mu_);
  void Exec(const proto::ExecMessage& m) EXCLUDES(mu_);
  void Forward(const proto::ForwardMessage& m) EXCLUDES(mu_);
  // After a stop: waits up to `ms` for the relays to see it and end (the jobs run on).
  void WaitForAll(int64_t ms) EXCLUDES(mu_);

 private:
  void Start(const proto::AttemptRank& id, std::function<void()> relay) EXCLUDES(mu_);
  // Opens session `sid`'s WebSocket, then a leg (`open_leg`), and relays the two
  // (agent/session_pump.h); a leg that cannot be had is told the user as an error and 4004.
  void RelayLeg(const std::string& sid, const proto::AttemptRank& id,
                const std::function<Result<int>()>& open_leg);
  Result<int> OpenExecLeg(const proto::ExecMessage& m);
  void RunForward(const proto::ForwardMessage& m);
  // Connects to the port the rank listens on; one it does not listen on is refused.
  Result<int> ConnectToRankPort(const proto::ForwardMessage& m);

  const Node node_;
  Launcher& launcher_;
  AgentConnection& connection_;
  const std::atomic<bool>& stop_;
  const AgentSide side_;
  Mutex mu_;
  CondVar done_cv_;
  int running_ GUARDED_BY(mu_) = 0;
};

}  // namespace berth
