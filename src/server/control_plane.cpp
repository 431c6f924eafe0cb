// ControlPlane: opening the state's parts, the scheduler and housekeeping threads, idle heap trims
// and the uploads' collection (control_plane.h).
#include "server/control_plane.h"

#include <chrono>
#include <optional>

#include "common/executor.h"
#include "common/heap.h"
#include "common/log.h"
#include "store/blob_store.h"
#include "store/log_bytes.h"

namespace berth {

ControlPlane::ControlPlane(const ServerOptions& options, const Clock& clock, Store& store,
                           AgentChannel& channel)
    : options_(options), clock_(clock), store_(store), channel_(channel) {}

ControlPlane::~ControlPlane() { Stop(); }

Status ControlPlane::Open(std::set<std::string> builtin_admins) {
  accounts_ = std::make_unique<Accounts>(store_, clock_, std::move(builtin_admins));
  BERTH_RETURN_IF_ERROR(accounts_->Load());
  if (options_.log_store.empty()) {
    logs_ = std::make_unique<LogStore>(options_.state_dir + "/logs");
  } else {
    Result<std::unique_ptr<LogBytes>> bytes =
        OpenPgLogBytes(options_.log_store, options_.log_store_fence);
    if (!bytes.ok()) return bytes.status();
    logs_ = std::make_unique<LogStore>(std::move(*bytes));
  }
  auto blobs = options_.upload_store.empty()
                   ? OpenFileBlobStore(options_.state_dir + "/uploads", clock_)
                   : OpenPgBlobStore(options_.upload_store, clock_);
  if (!blobs.ok()) return blobs.status();
  uploads_ =
      std::make_unique<Uploads>(std::move(*blobs), options_.upload_limits, options_.upload_quota);
  BERTH_RETURN_IF_ERROR(CheckUsageConfig(options_.core.usage));
  core_ = std::make_unique<Core>(options_.core, store_, clock_, channel_);
  BERTH_RETURN_IF_ERROR(core_->Load());
  BERTH_RETURN_IF_ERROR(core_->scheduling().LoadUsage());
  core_->scheduling().SetShareRules(accounts_->Users(), accounts_->Teams());
  notice_transport_ = std::make_unique<RelayTransport>(options_.notify_relay);
  notice_sender_ =
      std::make_unique<NoticeSender>(store_, clock_, *notice_transport_, options_.notify);
  core_->notices().SetBell([sender = notice_sender_.get()] { sender->Ring(); });
  return Status::Ok();
}

void ControlPlane::Start(Hooks hooks) {
  hooks_ = std::move(hooks);
  started_ = true;
  scheduler_thread_ = std::thread([this] {
    NameThisThread("berth-sched");
    LowerThisThreadPriority(kWorkNice);
    SchedulerLoop();
  });
  housekeeping_thread_ = std::thread([this] {
    NameThisThread("berth-house");
    HousekeepingLoop();
  });
  notice_sender_->Start();
  core_->scheduling().RequestPass();
}

void ControlPlane::Stop() {
  if (!started_) return;
  started_ = false;
  stopping_ = true;
  core_->Shutdown();  // ends every log follower's wait and wakes the scheduler
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (housekeeping_thread_.joinable()) housekeeping_thread_.join();
  if (notice_sender_) notice_sender_->Stop();
}

void ControlPlane::SchedulerLoop() {
  while (!stopping_) {
    if (!core_->scheduling().WaitForPassRequest(1000)) {
      if (scheduler_trim_owed_.exchange(false)) TrimThisThreadsArena();
      continue;
    }
    if (!core_->scheduling().RunPass() && !stopping_) {
      // A commit failed (the store is unreachable?): try again shortly, not in a tight loop.
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      core_->scheduling().RequestPass();
    }
  }
}

void ControlPlane::CollectUploads() {
  if (collecting_uploads_.exchange(true)) return;
  hooks_.post_read([this] {
    auto live = core_->agents().LiveUploads();
    if (live.ok()) {
      // A retention of 0 keeps every blob (nothing was stored before the epoch); pieces of
      // unfinished uploads expire either way.
      const TimeMs before =
          options_.upload_retention_ms > 0 ? clock_.Now() - options_.upload_retention_ms : 0;
      auto gone =
          uploads_->Collect(*live, before, clock_.Now() - options_.upload_piece_retention_ms);
      if (!gone.ok()) {
        LogWarn("uploads not collected: {}", gone.status().message());
      } else if (*gone > 0) {
        LogInfo("{} uploaded blobs no job uses were deleted (--upload-retention)", *gone);
      }
    }
    collecting_uploads_ = false;
  });
}

void ControlPlane::StartIdleTrim() {
  core_->ForgetUnheldSpecs();  // their entries would pin heap pages (SpecCache::Sweep)
  heap::BeginIdleTrim();
  // The scheduler thread, then each thread posted to. Only this thread reads the count to end the
  // trim, after these additions, so a thread that counts down before its addition does no harm.
  arena_trims_owed_ = 1;
  scheduler_trim_owed_ = true;
  arena_trims_owed_ += hooks_.on_each_request_thread([this] { TrimThisThreadsArena(); });
  heap::TrimThisThreadsArena();  // the housekeeping thread's own
}

void ControlPlane::TrimThisThreadsArena() {
  heap::TrimThisThreadsArena();
  --arena_trims_owed_;
}

void ControlPlane::HousekeepingLoop() {
  int64_t trimmed_after = 0;  // the busy period (its last pass) the heap was last trimmed after
  std::optional<int64_t> trim_started;                 // while an idle trim runs
  int64_t next_collect = clock_.Monotonic() + 60'000;  // uploads: a minute after start, then 10 min
  const int64_t watching_since = clock_.Monotonic();   // sessions are seen from now on
  int64_t next_idle_check = 0;
  int64_t next_gpu_check = 0;
  std::map<std::pair<int64_t, int>, IdleVerdict> told;  // the idle policy's, per idle attempt
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (stopping_) break;
    core_->agents().CheckLeases();
    core_->lifecycle().CheckTimeLimits();
    core_->lifecycle().RetryFailedCancels();
    core_->notices().CheckPending();
    core_->reservations().Tick();
    int64_t now = clock_.Monotonic();
    if (options_.core.interactive_idle_limit_ms > 0 && now >= next_idle_check) {
      next_idle_check = now + 1000;
      core_->lifecycle().EndIdleInteractive(
          hooks_.sessions_seen(now, options_.core.interactive_idle_limit_ms), watching_since);
    }
    if (hooks_.gpu_readings && now >= next_gpu_check) {
      next_gpu_check = now + 5'000;
      const std::vector<Lifecycle::GpuReading> readings = hooks_.gpu_readings(clock_.Now());
      std::set<std::pair<int64_t, int>> still;
      for (const Lifecycle::GpuReading& r : readings) {
        if (r.idle_for > 0) still.emplace(r.job, r.attempt);
      }
      // Busy again (or ended): a new spell is told anew.
      std::erase_if(told, [&](const auto& entry) { return !still.count(entry.first); });
      core_->lifecycle().NoteGpuUse(readings, told);
    }
    hooks_.tick(now);
    if (now >= next_collect) {
      next_collect = now + 10 * 60'000;
      CollectUploads();
      core_->agents().ForgetGoneNodes();
    }
    // Scheduling passes over a big queue build large short-lived snapshots, and request bursts
    // grow every handler thread's arena; give the memory back rather than keep each peak for ever
    // (common/heap.h). Only once the scheduler has been quiet for a while: malloc_trim holds the
    // allocator's lock for tens of milliseconds on a big heap, which would stall every thread that
    // allocates — the I/O threads answering health checks included. Once per busy period:
    // trimming walks the whole heap even when there is little to give back. The trim ends when
    // every thread has trimmed its arena, when work arrives, or after 2 s.
    int64_t busy = core_->scheduling().last_pass_with_work();
    if (!trim_started && busy != trimmed_after && now - busy >= 3000) {
      trimmed_after = busy;
      trim_started = now;
      StartIdleTrim();
    } else if (trim_started &&
               (arena_trims_owed_ <= 0 || busy != trimmed_after || now - *trim_started >= 2000)) {
      heap::EndIdleTrim();
      trim_started.reset();
    }
  }
  if (trim_started) heap::EndIdleTrim();
}

}  // namespace berth
