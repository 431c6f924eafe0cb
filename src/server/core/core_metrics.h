// CoreMetrics: the counters and histograms of what the Core did (docs/monitoring.md), updated as
// changes are applied — after their commit, so that a change the store refused counts nothing —
// and written to /metrics with the gauges the Core computes at scrape time
// (ReadModel::WriteGauges).
//
// Events are collected in a txn while it is built (TxnEvents) and counted by CoreState::Execute
// once the txn's commit succeeded.
//
// Thread-safety: every family is safe to update and write from any thread (common/metrics.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/metrics.h"

namespace berth {

struct CoreMetrics {
  // Series per user (their names come from submissions, which a node may make for any name it
  // speaks for): at most this many, the rest counted together.
  static constexpr size_t kMaxUserSeries = 10'000;
  metrics::HistogramFamily pass_seconds{
      "berth_scheduler_pass_seconds",
      "Time one scheduling pass spent deciding (sched::Schedule on its snapshot).",
      {},
      metrics::HistogramFamily::FastSeconds()};
  // How long a pass held the state lock at once, apart from its deciding (which holds none): what
  // every request waiting for the lock waits at most, pass by pass.
  metrics::HistogramFamily pass_lock_hold_seconds{
      "berth_scheduler_lock_hold_seconds",
      "Time a scheduling pass held the server's state lock at once: phase=snapshot (building its "
      "input) or commit (applying and committing one chunk of its decisions).",
      {"phase"},
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  metrics::HistogramFamily commit_seconds{"berth_store_commit_seconds",
                                          "Time one commit of a change to the store took.",
                                          {},
                                          metrics::HistogramFamily::FastSeconds()};
  metrics::HistogramFamily admission_wait_seconds{
      "berth_admission_wait_seconds",
      "Time an attempt waited in the queue (since submission or requeue) before it was placed.",
      {"team"},
      metrics::HistogramFamily::SlowSeconds()};
  metrics::HistogramFamily job_run_seconds{
      "berth_job_run_seconds",
      "Run time of jobs that ended (from start to end of their last attempt), by final status.",
      {"status"},
      metrics::HistogramFamily::SlowSeconds()};
  metrics::CounterFamily passes{
      "berth_scheduler_passes_total",
      "Scheduling passes over pending jobs: outcome=decided (placed or preempted something) or "
      "nothing (decided nothing; the next pass waits three times as long as this one took).",
      {"outcome"}};
  metrics::CounterFamily jobs_finished{
      "berth_jobs_finished_total", "Jobs that reached a final status, by that status.", {"status"}};
  metrics::CounterFamily preemptions{
      "berth_preemptions_total",
      "Running jobs evicted by the scheduler: reason=priority (a higher-priority job) or "
      "reclaim (a team taking back its quota).",
      {"reason"}};
  metrics::CounterFamily launches{
      "berth_launches_total", "Attempts placed and sent to their nodes.", {}};
  metrics::CounterFamily lease_expiries{
      "berth_lease_expiries_total", "Nodes marked down because their lease ran out.", {}};
  metrics::CounterFamily out_of_memory{
      "berth_out_of_memory_total",
      "Attempts that ended because the kernel killed them for their memory limit "
      "(resources.memory; docs/security.md \"Isolation\").",
      {}};
  metrics::CounterFamily user_gpu_seconds{
      "berth_user_gpu_seconds_total",
      "GPU-seconds used by ended attempts (undecayed, unweighted), by user, team and GPU type; "
      "past 10,000 series, new ones are counted under \"_other\".",
      {"user", "team", "gpu_type"},
      kMaxUserSeries};
  metrics::CounterFamily user_whole_gpu_seconds{
      "berth_user_whole_gpu_seconds_total",
      "berth_user_gpu_seconds_total as whole GPUs: a MIG slice's seconds count as its share of its "
      "GPU, under its GPU's type (an A100-3g.40gb-second is 3/7 of an A100-second).",
      {"user", "team", "gpu_type"},
      kMaxUserSeries};
  metrics::CounterFamily user_cpu_seconds{
      "berth_user_cpu_seconds_total",
      "CPU-seconds allocated to ended attempts, by user and team; past 10,000 series, new "
      "ones are counted under \"_other\".",
      {"user", "team"},
      kMaxUserSeries};

  void Write(metrics::ExpositionWriter& out) const;
};

// What a plan did, to be counted once it is committed.
struct TxnEvents {
  std::vector<std::pair<std::string, double>>
      finished;                                        // (final status, run seconds; -1: never ran)
  std::vector<std::pair<std::string, double>> placed;  // (team, seconds waited)
  std::vector<std::string> preempted;                  // reason: "priority" or "reclaim"
  int lease_expiries = 0;
  int out_of_memory = 0;  // attempts the kernel killed for their memory limit
};

}  // namespace berth
