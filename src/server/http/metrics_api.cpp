// GET /metrics: the Prometheus text exposition of what the server did and what it holds now
// (docs/monitoring.md). Built from the core's counters (no lock), one walk of its state under the
// lock (ReadModel::WriteGauges), and the HTTP histograms.
#include <algorithm>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "server/http/server.h"

namespace berth {
namespace {

// Per-job series for at most this many attempts (the idle ones first, longest idle first, then
// the least busy): a cluster of 10,000 running jobs does not make 20,000 series.
constexpr size_t kMaxGpuJobSeries = 200;

// What running jobs' GPUs do (docs/idle.md): how many are sampled and idle, and per-job gauges.
void WriteGpuUsage(const GpuUsageTable& table, TimeMs now, metrics::ExpositionWriter& out) {
  const auto all = table.All(now);
  std::vector<std::pair<std::pair<int64_t, int>, JobGpuUse>> jobs(all.begin(), all.end());
  const auto idle = std::count_if(jobs.begin(), jobs.end(),
                                  [](const auto& j) { return j.second.idle_for_ms > 0; });
  out.Family("berth_gpu_sampled_jobs", "gauge",
             "Running jobs whose GPUs their nodes sample (docs/idle.md).");
  out.Sample("berth_gpu_sampled_jobs", {}, static_cast<double>(jobs.size()));
  out.Family("berth_gpu_idle_jobs", "gauge",
             "Of those, the jobs whose GPUs are idle now (below 5% SM or no process on them).");
  out.Sample("berth_gpu_idle_jobs", {}, static_cast<double>(idle));
  const size_t shown = std::min(jobs.size(), kMaxGpuJobSeries);
  std::partial_sort(jobs.begin(), jobs.begin() + static_cast<std::ptrdiff_t>(shown), jobs.end(),
                    [](const auto& a, const auto& b) {
                      if (a.second.idle_for_ms != b.second.idle_for_ms) {
                        return a.second.idle_for_ms > b.second.idle_for_ms;
                      }
                      return a.second.mean_sm < b.second.mean_sm;
                    });
  jobs.resize(shown);
  std::sort(jobs.begin(), jobs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  out.Family("berth_job_gpu_sm_percent", "gauge",
             "A running job's mean SM utilisation so far, over its GPUs (at most 200 jobs: the "
             "idle ones first).");
  for (const auto& [key, use] : jobs) {
    const std::string job = std::to_string(key.first), attempt = std::to_string(key.second);
    out.Sample("berth_job_gpu_sm_percent", {{"job", job}, {"attempt", attempt}}, use.mean_sm);
  }
  out.Family("berth_job_gpu_idle_seconds", "gauge",
             "How long a running job's GPUs have been idle now (0: busy); the same jobs.");
  for (const auto& [key, use] : jobs) {
    const std::string job = std::to_string(key.first), attempt = std::to_string(key.second);
    out.Sample("berth_job_gpu_idle_seconds", {{"job", job}, {"attempt", attempt}},
               static_cast<double>(use.idle_for_ms / 1000));
  }
}

}  // namespace

net::HttpResponse Server::HandleMetrics() {
  metrics::ExpositionWriter out;
  out.Family("berth_build_info", "gauge", "The running server's version (always 1).");
  out.Sample("berth_build_info", {{"version", BERTH_VERSION}}, 1);
  control_->core().reads().WriteGauges(out);
  control_->core().metrics().Write(out);
  http_seconds_.Write(out);
  out.Family("berth_upload_blobs_total", "counter",
             "Blobs of workdirs and file mounts received whole from users.");
  out.Sample("berth_upload_blobs_total", {},
             static_cast<double>(control_->uploads().blobs_received()));
  out.Family("berth_upload_bytes_total", "counter", "Bytes of those blobs.");
  out.Sample("berth_upload_bytes_total", {},
             static_cast<double>(control_->uploads().bytes_received()));
  out.Family("berth_upload_piece_bytes_total", "counter",
             "Bytes of big blobs received in pieces (a resumed upload sends only the rest).");
  out.Sample("berth_upload_piece_bytes_total", {},
             static_cast<double>(control_->uploads().piece_bytes()));
  out.Family("berth_interactive_sessions", "gauge",
             "Sessions (attach, exec --into, port-forward connections) waiting for their node or "
             "relayed now.");
  out.Sample("berth_interactive_sessions", {}, static_cast<double>(terminals_.size()));
  out.Family("berth_interactive_sessions_unanswered_total", "counter",
             "Sessions closed because the job's node did not answer within "
             "--interactive-connect-timeout (its client dials again).");
  out.Sample("berth_interactive_sessions_unanswered_total", {},
             static_cast<double>(terminals_.unanswered()));
  WriteGpuUsage(gpu_usage_, clock_.Now(), out);
  control_->notice_sender().WriteMetrics(out);
  return net::HttpResponse{.status = 200,
                           .content_type = "text/plain; version=0.0.4; charset=utf-8",
                           .body = out.Take()};
}

}  // namespace berth
