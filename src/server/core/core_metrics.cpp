#include "server/core/core_metrics.h"

namespace berth {

void CoreMetrics::Write(metrics::ExpositionWriter& out) const {
  pass_seconds.Write(out);
  passes.Write(out);
  pass_lock_hold_seconds.Write(out);
  commit_seconds.Write(out);
  admission_wait_seconds.Write(out);
  job_run_seconds.Write(out);
  jobs_finished.Write(out);
  preemptions.Write(out);
  launches.Write(out);
  lease_expiries.Write(out);
  out_of_memory.Write(out);
  user_gpu_seconds.Write(out);
  user_whole_gpu_seconds.Write(out);
  user_cpu_seconds.Write(out);
}

}  // namespace berth
