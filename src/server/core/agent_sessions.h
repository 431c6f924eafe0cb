// AgentSessions: the core's side of the node agents — registration (a new session, reconciled with
// what the agent says it runs), heartbeats and leases, report batches (a rank started, pulled,
// exited, is gone), health, drains, and the rights a session has: which logs it may append to,
// which specs and uploads it may read.
//
// Leases run on monotonic time (Clock::Monotonic): a node whose lease runs out is marked down and
// its jobs end or are requeued (CheckLeases); a step of the wall clock expires nothing.
//
// Thread-safety: every public method is thread-safe; the private steps run under the state lock
// (core_state.h) except ReadForgotten, which reads the store without it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "protocol/agent_protocol.h"
#include "server/core/core_state.h"
#include "server/core/job_books.h"
#include "server/core/lifecycle.h"
#include "server/core/read_model.h"

namespace berth {

class AgentSessions {
 public:
  AgentSessions(CoreState& state, JobBooks& books, Lifecycle& life)
      : s_(state), books_(books), life_(life) {}

  // Starts a new session for the node (replacing any earlier one) and reconciles what the agent
  // says it runs with what the store says should run. Conflict: the name is held by another live
  // agent. Unavailable: the registration could not be recorded (nothing changed).
  Result<proto::RegisterAnswer> Register(const proto::RegisterRequest& request,
                                         const std::string& remote_address) EXCLUDES(core_lock);
  // Renews the node's lease. Conflict: not the node's current session.
  Result<proto::HeartbeatAnswer> Heartbeat(const std::string& node, const std::string& session)
      EXCLUDES(core_lock);
  // Takes the node's health (docs/operators.md "Node health"): a node-level fault keeps it from
  // new jobs, a GPU's fault makes that GPU unallocatable and ends the attempts that hold it (their
  // recovery.on_node_fault applies). Conflict: unknown session. Unavailable: not recorded.
  Result<proto::HealthAnswer> ReportHealth(const proto::HealthRequest& request) EXCLUDES(core_lock);
  // Applies a batch of reports all or nothing; entries that could not be decoded, or name nothing
  // applicable, are answered one by one. Conflict: unknown session. Unavailable: not recorded.
  Result<std::vector<proto::ReportResult>> Report(const proto::ReportBatch& request)
      EXCLUDES(core_lock);
  // Ends the node's agent session now (its credential was revoked): its calls are refused from here
  // on (Conflict), its watch stream ends, and its lease runs out as a silent node's does.
  void EndSession(const std::string& node) EXCLUDES(core_lock);
  // Whether `session` is the node's current session.
  bool SessionIs(const std::string& node, const std::string& session) EXCLUDES(core_lock);
  // NotFound for an unknown node; Unavailable when the change could not be recorded.
  // `by` is recorded in the audit log. Undraining with `force` also clears a drain by the node's
  // health probes (the agent forgets its faults and probes afresh); without it such a drain stays.
  Result<NodeStatus> Drain(const std::string& node, bool drain, const std::string& by = "",
                           bool force = false) EXCLUDES(core_lock);

  // --- a session's rights ---
  // For a log append: checks the session, and that rank `rank` of the job's attempt `attempt` is
  // (or was) placed on `node` (Forbidden otherwise: a node writes only its own jobs' logs); returns
  // the prefix each line of `rank` gets in the interleaved log of a multi-node job ("" for a
  // single-node job). An ended attempt's placement is read from the store.
  Result<std::string> LogPrefix(const std::string& node, const std::string& session, int64_t job,
                                int attempt, int rank) EXCLUDES(core_lock);
  // LogPrefix for each rank of a log batch, taking the state lock once (and reading each ended
  // attempt's placement from the store once, after it).
  std::vector<Result<std::string>> LogPrefixes(const std::string& node, const std::string& session,
                                               const std::vector<proto::AttemptRank>& ranks)
      EXCLUDES(core_lock);
  // For a spec read: Ok when `session` is the node's and job `job`, of spec `spec_id`, is placed on
  // it now; else Conflict (session) or Forbidden.
  Status MayReadSpec(const std::string& node, const std::string& session, int64_t job,
                     int64_t spec_id) EXCLUDES(core_lock);
  // For a node's fetch of uploaded blobs: the manifests (workdir_upload, file_mounts) of job `job`
  // when it is placed on `node` now, whose session `session` is; else Conflict or Forbidden.
  Result<std::vector<std::string>> JobUploads(const std::string& node, const std::string& session,
                                              int64_t job) EXCLUDES(core_lock);
  // The manifests the jobs not ended yet name (their uploads must stay); Unavailable when one's
  // spec is not in memory (then nothing may be collected this time).
  Result<std::set<std::string>> LiveUploads() EXCLUDES(core_lock);

  // --- housekeeping ---
  // Marks down nodes whose lease ran out (monotonic time) and ends or requeues their jobs.
  void CheckLeases() EXCLUDES(core_lock);
  // Forgets the nodes down for longer than options.node_retention_ms (their rows stay in the
  // store; the name is free again, also for a join). Answers how many went.
  size_t ForgetGoneNodes() EXCLUDES(core_lock);

 private:
  Result<NodeRuntime*> Authenticate(const std::string& node, const std::string& session)
      REQUIRES(core_lock);
  static Status NotPlacedHere(const std::string& node, int64_t job, int attempt, int rank);
  // Where attempt `attempt` of `job` runs while it is live (placed now, or dying): nullptr
  // otherwise.
  const Placement* LivePlacement(int64_t job, int attempt) const REQUIRES(core_lock);

  // Register's steps. Attempts an agent runs that are not in memory (a restart forgot them): read
  // from the store.
  struct ForgottenAttempts {
    std::map<int64_t, JobRow> rows;                           // terminal jobs the agent still runs
    std::map<int64_t, std::vector<AttemptRow>> attempts;      // earlier attempts of active jobs
    std::map<int64_t, std::shared_ptr<const JobSpec>> specs;  // of the terminal rows, by spec id
  };
  ForgottenAttempts ReadForgotten(const std::set<std::tuple<int64_t, int, int>>& running)
      EXCLUDES(core_lock);
  // Rank `rank` of an earlier attempt `key`, which node `node`'s agent still runs: held (its grant
  // allocated) when it was placed on that node; ignored otherwise.
  void HoldDyingRank(Txn& txn, const std::string& node, const AttemptKey& key, int rank,
                     const ResourceRequest& per_node, const ForgottenAttempts& forgotten)
      REQUIRES(core_lock);
  void HoldEndedAttempts(Txn& txn, const NodeRuntime& node,
                         const std::set<std::tuple<int64_t, int, int>>& running,
                         const ForgottenAttempts& forgotten) REQUIRES(core_lock);
  // Sets the node's health; ends the attempts that hold a GPU it finds faulty.
  void ApplyHealth(Txn& txn, NodeRuntime& node, proto::NodeHealth health, TimeMs now)
      REQUIRES(core_lock);
  // Report's step: one report applied to `txn`.
  proto::ReportResult ApplyReport(Txn& txn, NodeRuntime& node, const proto::Report& report,
                                  TimeMs now) REQUIRES(core_lock);
  // ApplyReport's two longer cases: a rank pulling its image (the reason shows the progress), and
  // a rank's exit (recorded in its RankState already) deciding how the attempt ends.
  void ApplyPulling(Txn& txn, ActiveJob& job, const proto::Report& r, TimeMs now)
      REQUIRES(core_lock);
  void ApplyExit(Txn& txn, ActiveJob& job, const NodeRuntime& node, const proto::Report& r,
                 TimeMs now) REQUIRES(core_lock);

  CoreState& s_;
  JobBooks& books_;
  Lifecycle& life_;
};

}  // namespace berth
