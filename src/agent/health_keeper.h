// HealthKeeper: the agent's manager of node health (docs/operators.md "Node health"): probe rounds
// on an interval, heavy probes while the node is idle, the prolog before each rank and the epilog
// after it, the sticky faults kept in <state>/health.json, and the health sent to the server. What
// the probes check is agent/health_probes.h; when a fault is forgotten, agent/health_book.h. The
// agent (agent/agent.h) composes it and runs its two loops on threads of their own.
//
// Thread-safety: thread-safe. Its state is guarded by its own lock, never held while calling the
// agent back (AgentSide) or the server; sends are one at a time (send_mu_, taken before mu_), so
// that the server gets the books in the order they were read.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "agent/connection.h"
#include "agent/discovery.h"
#include "agent/health_book.h"
#include "agent/health_probes.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/resources.h"
#include "supervise/cgroup.h"
#include "supervise/supervisor.h"

namespace berth {

class HealthKeeper {
 public:
  // What the keeper asks of the agent, never under its own lock: the session to send the health
  // in ("": not registered, nothing is sent), that it register again (the server no longer knows
  // the session), and whether no rank runs or starts (heavy probes run only then).
  struct AgentSide {
    std::function<std::string()> session;
    std::function<void()> register_again;
    std::function<bool()> node_idle;
  };
  struct Settings {
    HealthSettings health;
    std::string state_dir;
    std::string node_name;
    std::string only_user;  // AgentOptions::only_user: whom the hooks run for when no user is set
    std::shared_ptr<CommandRunner> command_runner;  // null: real processes
    std::shared_ptr<KernelLog> kernel_log;          // null: health.kernel_log, if set
    std::shared_ptr<NodeSystem> node_system;        // null: this machine
  };
  // `clock`, `connection` and `stop` must outlive the keeper.
  HealthKeeper(Settings settings, const Clock& clock, AgentConnection& connection,
               const std::atomic<bool>& stop, AgentSide side);

  // Builds the prober for the node's GPUs (`gpus`: their indices, never a MIG slice's), state dir
  // and cgroups, loads the sticky faults and runs the first round (before the node registers: a
  // node whose probes fail never comes UP).
  void SetUp(const std::vector<int>& gpus, const CgroupHost& cgroups) EXCLUDES(mu_);
  // What the probes found last (sent with each registration).
  proto::NodeHealth Health() const EXCLUDES(mu_);
  // The health thread: a round every interval (or at once after Reset), until the stop.
  void Loop() EXCLUDES(mu_, send_mu_);
  // The epilog thread: runs the queued epilogs one by one, until the stop.
  void EpilogLoop() EXCLUDES(mu_, send_mu_);
  // Wakes both loops (to see the stop).
  void WakeAll() EXCLUDES(mu_);
  // An operator's `berth undrain --force`: the health thread forgets every fault, then probes
  // afresh.
  void Reset() EXCLUDES(mu_);
  // Runs the prolog scripts for the rank about to start from `plan`: "" when they passed, else
  // why the rank cannot start here (and the node is drained).
  std::string RunProlog(const RunPlan& plan) EXCLUDES(mu_, send_mu_);
  // Queues the epilog of an ended rank (its run plan in `dir`, read now: the directory is
  // recycled once the server has the rank's end).
  void QueueEpilog(const std::string& dir, int exit_code) EXCLUDES(mu_);

 private:
  // One round of light probes (and the idle ones when due and the node is idle); sends the
  // health when `send`.
  void ProbeRound(bool send) EXCLUDES(mu_, send_mu_);
  // Posts the book's health to the server; measures the clock skew from its answer.
  void Send() EXCLUDES(mu_, send_mu_);
  // A failing prolog or epilog: a sticky node fault, kept in <state>/health.json and sent at once.
  void AddStickyFault(const std::string& probe, const std::string& reason) EXCLUDES(mu_, send_mu_);
  void SaveStickyFaults() REQUIRES(mu_);
  // The environment of a rank's prolog and epilog: who, which job, which GPUs.
  std::map<std::string, std::string> HookEnvironment(const RunPlan& plan) const;

  static constexpr size_t kMaxQueuedEpilogs = 10'000;

  Settings settings_;
  const Clock& clock_;
  AgentConnection& connection_;
  const std::atomic<bool>& stop_;
  const AgentSide side_;
  std::unique_ptr<HealthProber> prober_;  // set by SetUp, before the loops start

  Mutex send_mu_;  // taken before mu_, never while holding it
  mutable Mutex mu_ ACQUIRED_AFTER(send_mu_);
  CondVar health_cv_;  // Loop: reset_, the stop
  CondVar epilog_cv_;  // EpilogLoop: epilogs_, the stop
  HealthBook book_ GUARDED_BY(mu_);
  std::optional<int64_t> clock_skew_ms_ GUARDED_BY(mu_);
  int64_t last_idle_probe_ GUARDED_BY(mu_) = 0;  // monotonic ms
  bool reset_ GUARDED_BY(mu_) = false;           // Reset() asked, not yet done
  std::deque<std::map<std::string, std::string>> epilogs_ GUARDED_BY(mu_);  // their environments
};

}  // namespace berth
