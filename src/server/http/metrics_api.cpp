// GET /metrics: the Prometheus text exposition of what the server did and what it holds now
// (docs/monitoring.md). Built from the core's counters (no lock), one walk of its state under the
// lock (ReadModel::WriteGauges), and the HTTP histograms.
#include "common/metrics.h"
#include "server/http/server.h"

namespace berth {

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
  return net::HttpResponse{.status = 200,
                           .content_type = "text/plain; version=0.0.4; charset=utf-8",
                           .body = out.Take()};
}

}  // namespace berth
