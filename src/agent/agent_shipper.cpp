// The agent's shipper (agent.h): each rank's output and events read from its directory, sent to
// the server in batches, and the directories recycled once the server has the end.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/agent.h"
#include "agent/file_mounts.h"
#include "agent/port_owner.h"
#include "agent/session_pump.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/tree_removal.h"
#include "net/ws_stream.h"
#include "protocol/job_env.h"
#include "spec/job_spec.h"
#include "supervise/cpu_set.h"
#include "supervise/supervisor.h"
#include "supervise/terminal.h"

namespace berth {

void Agent::WatchDir(LocalJob& job, const std::string& key) {
  if (inotify_fd_ < 0) return;
  job.watch = inotify_add_watch(inotify_fd_, job.dir.c_str(),
                                IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE);
  if (job.watch >= 0) watch_keys_[job.watch] = key;
}

void Agent::ShipperLoop() {
  using std::chrono::steady_clock;
  int64_t last_full = 0;
  // While reports are held back (see AgentOptions::report_hold_ms): when they must go. Real time,
  // as the poll's timeout is.
  bool holding = false;
  steady_clock::time_point send_by{};
  auto ms_left = [&](int64_t most) {
    if (!holding) return most;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(send_by - steady_clock::now());
    return std::clamp<int64_t>(left.count(), 0, most);
  };
  alignas(inotify_event) char buf[16384];
  while (!stop_) {
    bool full = inotify_fd_ < 0 || clock_.Monotonic() - last_full >= 1000;
    std::set<std::string> dirty;
    if (!full) {
      pollfd p{inotify_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(ms_left(50))) > 0) {
        ::usleep(2000);  // let a burst of changes arrive, to ship them in one round
        ssize_t n;
        MutexLock lock(mu_);
        while ((n = ::read(inotify_fd_, buf, sizeof(buf))) > 0) {
          for (char* at = buf; at < buf + n;) {
            auto* e = reinterpret_cast<inotify_event*>(at);
            if (e->mask & IN_Q_OVERFLOW) full = true;
            auto it = watch_keys_.find(e->wd);
            if (it != watch_keys_.end()) dirty.insert(it->second);
            at += sizeof(inotify_event) + e->len;
          }
        }
      }
    }
    bool reports_waiting;
    {
      MutexLock lock(mu_);
      dirty.insert(dirty_.begin(), dirty_.end());
      dirty_.clear();
      reports_waiting = !reports_.empty();
    }
    const bool may_hold =
        options_.report_hold_ms > 0 && (!holding || steady_clock::now() < send_by);
    bool held = false;
    if (full) {
      last_full = clock_.Monotonic();
      held = ShipOnce(false, nullptr, may_hold);
    } else if (!dirty.empty() || reports_waiting) {
      held = ShipOnce(false, &dirty, may_hold);
    }
    if (held && !holding) {
      send_by = steady_clock::now() + std::chrono::milliseconds(options_.report_hold_ms);
    }
    holding = held;
    if (inotify_fd_ < 0) Pause(ship_cv_, ms_left(50));
  }
}

bool Agent::ShipOnce(bool final, const std::set<std::string>* only, bool may_hold) {
  // Reap supervisors that were our children (they exit after recording the job's end).
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::string session;
  std::vector<LocalJob> snapshot;
  {
    MutexLock lock(mu_);
    session = session_;
    if (only) {
      for (const auto& key : *only) {
        auto it = jobs_.find(key);
        if (it != jobs_.end()) snapshot.push_back(it->second);
      }
    } else {
      for (const auto& [key, job] : jobs_) snapshot.push_back(job);
    }
  }
  if (!only) {
    // The full scan also notices supervisors that died without recording an end (SIGKILL, the
    // OOM killer): without an "exited" event the job would never be reported gone, and the server
    // would hold its resources for good. Events are read only once the process is seen dead: a
    // supervisor appends its "exited" event before it exits.
    for (const auto& job : snapshot) {
      if (!job.exited) RecordEndOfDeadSupervisor(job);
    }
    // And MPS daemons that died: the ranks that ran under them lost their GPU share.
    if (auto lost = mps_.Check(); !lost.empty()) {
      MutexLock lock(mu_);
      for (const auto& [key, reason] : lost) EndRank(key, reason);
    }
  }
  if (session.empty()) return false;
  // For each job: new events first, then its output up to now, so that an exit is reported only
  // after all output written before it has been shipped.
  std::vector<proto::Report> new_reports;
  // Output shipped this round: whoever reads it must also see the job's progress (its RUNNING),
  // so nothing is held back then.
  bool shipped_output = false;
  std::vector<std::pair<std::string, int>> ended;  // ranks whose epilog is due: dir, exit code
  std::vector<std::string> gone;                   // ranks whose processes are all gone
  // Each rank's new events are read before its output's size is taken (ShipOutputs), so that
  // every byte written before an event is shipped before the event is reported.
  std::vector<std::vector<SupervisorEvent>> events(snapshot.size());
  std::vector<ShipState> ships(snapshot.size());
  for (size_t i = 0; i < snapshot.size(); ++i) {
    events[i] = ParseEvents(ReadFileOr(snapshot[i].dir + "/events"));
    for (SupervisorEvent& e : events[i]) {
      // Stopped by the agent itself (EndRank): the exit says why.
      if (e.kind != "exited" || e.reason != "stopped") continue;
      const std::string why = Trim(ReadFileOr(snapshot[i].dir + "/" + kStopReasonFile));
      if (!why.empty()) e.reason = why;
    }
    // While its image downloads (a "pulling" not followed by what it resolved to), the rank's
    // output says how far it got: the job's reason shows it.
    ships[i].pulling = std::any_of(events[i].begin(), events[i].end(),
                                   [](const auto& e) { return e.kind == "pulling"; }) &&
                       std::none_of(events[i].begin(), events[i].end(), [](const auto& e) {
                         return (e.kind == "pulling" && !e.reason.empty()) ||
                                e.kind == "setting_up" || e.kind == "running" || e.kind == "exited";
                       });
  }
  ShipOutputs(snapshot, ships, session, final, &shipped_output);
  for (size_t i = 0; i < snapshot.size(); ++i) {
    LocalJob& job = snapshot[i];
    std::vector<SupervisorEvent> fresh(
        events[i].begin() + static_cast<long>(std::min(job.events_seen, events[i].size())),
        events[i].end());
    const bool shipped_all = ships[i].shipped_all;
    size_t reported = job.events_seen;
    if (shipped_all) {
      AddEventReports(job.id, fresh, new_reports);  // (its "pulling" before its progress)
      if (ships[i].progress) {
        new_reports.push_back(proto::Report::PullProgress(job.id, *ships[i].progress));
      }
      reported = events[i].size();
    }
    MutexLock lock(mu_);
    auto it = jobs_.find(KeyOf(job.id));
    if (it == jobs_.end()) continue;
    it->second.log_shipped = job.log_shipped;
    it->second.events_seen = reported;
    for (const auto& e : fresh) {
      if (shipped_all && e.kind == "exited") {
        it->second.exited = true;
        cpu_pins_.Release(it->first);  // every process of the rank is gone
        gpu_watch_.Release(job.id);
        gone.push_back(it->first);
        if (e.phase != "launch" && e.phase != "prolog") ended.emplace_back(job.dir, e.exit_code);
      }
    }
  }
  for (const auto& [dir, exit_code] : ended) health_.QueueEpilog(dir, exit_code);
  for (const std::string& key : gone) mps_.Release(key);  // (not under mu_: it may quit a daemon)
  proto::ReportRequest request{options_.name, session, {}};
  {
    MutexLock lock(mu_);
    for (auto& r : new_reports) reports_.push_back(std::move(r));
    if (may_hold && !final && !shipped_output && !reports_.empty() &&
        std::none_of(reports_.begin(), reports_.end(), [](const proto::Report& r) {
          return r.event == proto::ReportEvent::kExited;
        })) {
      return true;  // kept for a later round (see AgentOptions::report_hold_ms)
    }
    request.reports.assign(reports_.begin(), reports_.end());
  }
  if (request.reports.empty()) return false;
  auto answer = connection_.Report(request, final ? 2000 : 10'000);
  if (!answer.ok()) {
    if (answer.status().code() == Code::kConflict) {
      MutexLock lock(mu_);
      need_register_ = true;
    }
    return false;  // kept; sent again next round
  }
  ApplyReportAnswer(request, *answer);
  return false;
}

void Agent::ApplyReportAnswer(const proto::ReportRequest& request,
                              const proto::ReportAnswer& answer) {
  // Recycled after the lock (a big work dir takes a while); the flag: whether it may be reused.
  std::vector<std::pair<std::string, bool>> done_dirs;
  MutexLock lock(mu_);
  size_t sent = request.reports.size();
  reports_.erase(reports_.begin(),
                 reports_.begin() + static_cast<long>(std::min(sent, reports_.size())));
  // The server answers each report, in order.
  for (size_t i = 0; i < answer.results.size() && i < sent; ++i) {
    const proto::ReportResult& result = answer.results[i];
    const proto::Report& report = request.reports[i];
    if (result.job != report.job || result.attempt != report.attempt ||
        result.rank != report.rank) {
      LogWarn("report answer {} names job {} attempt {} rank {}, not the report sent; ignored", i,
              result.job, result.attempt, result.rank);
      continue;
    }
    if (result.action == proto::ReportAction::kError) {
      LogError("the server could not read a report of job {} attempt {} rank {}: {}", report.job,
               report.attempt, report.rank, result.error);
      continue;
    }
    auto it = jobs_.find(KeyOf(report.id()));
    if (it == jobs_.end()) continue;
    if (result.action == proto::ReportAction::kStop) StopJob(it->second);
    if (report.event == proto::ReportEvent::kExited && it->second.exited) {
      // The server has the exit and all output: the record can go.
      // A job whose supervisor died may have left processes that hold its output open.
      done_dirs.emplace_back(it->second.dir, report.phase != "supervisor");
      if (it->second.watch >= 0) {
        inotify_rm_watch(inotify_fd_, it->second.watch);
        watch_keys_.erase(it->second.watch);
      }
      jobs_.erase(it);
    }
  }
  lock.Unlock();
  for (const auto& [dir, reusable] : done_dirs) spare_dirs_.Recycle(dir, reusable);
}

void Agent::ShipOutputs(std::vector<LocalJob>& jobs, std::vector<ShipState>& ships,
                        const std::string& session, bool final, bool* shipped_output) {
  // The size each output has now: what this round ships at most.
  std::vector<int64_t> sizes(jobs.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    struct stat st {};
    sizes[i] = ::stat((jobs[i].dir + "/output.log").c_str(), &st) == 0 ? st.st_size : 0;
    ships[i].shipped_all = jobs[i].log_shipped >= sizes[i];
  }
  // Each request starts with the rank after the last one the previous request carried, so that a
  // few ranks with a lot of output do not keep the others' out of every request.
  size_t start = 0;
  for (int round = 0; round < 16; ++round) {  // past that the server keeps refusing: next time
    std::vector<proto::LogPiece> pieces;
    std::vector<size_t> whose;  // the job of each piece
    size_t bytes = 0;
    for (size_t k = 0; k < jobs.size() && pieces.size() < proto::kMaxLogPieces; ++k) {
      const size_t i = (start + k) % jobs.size();
      if (ships[i].shipped_all || ships[i].refused || bytes >= proto::kMaxLogBatchBytes) continue;
      const int64_t want =
          std::min<int64_t>({sizes[i] - jobs[i].log_shipped, 1 << 20,
                             static_cast<int64_t>(proto::kMaxLogBatchBytes - bytes)});
      proto::LogPiece piece{.job = jobs[i].id.job,
                            .attempt = jobs[i].id.attempt,
                            .rank = jobs[i].id.rank,
                            .offset = jobs[i].log_shipped,
                            .data = std::string(static_cast<size_t>(want), '\0')};
      int fd = ::open((jobs[i].dir + "/output.log").c_str(), O_RDONLY | O_CLOEXEC);
      const ssize_t n =
          fd < 0 ? -1 : ::pread(fd, piece.data.data(), piece.data.size(), piece.offset);
      if (fd >= 0) ::close(fd);
      if (n <= 0) {  // gone or shorter than it was (recycled): nothing more to ship
        ships[i].shipped_all = true;
        continue;
      }
      piece.data.resize(static_cast<size_t>(n));
      bytes += piece.data.size();
      pieces.push_back(std::move(piece));
      whose.push_back(i);
    }
    if (pieces.empty()) return;
    start = (whose.back() + 1) % jobs.size();
    auto answer = connection_.AppendLogs(options_.name, session, pieces, final ? 2000 : 10'000);
    if (!answer.ok() || answer->results.size() != pieces.size()) {
      if (!answer.ok() && answer.status().code() == Code::kConflict) {
        MutexLock lock(mu_);
        need_register_ = true;
      }
      return;  // what did not go is shipped next time
    }
    *shipped_output = true;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const size_t i = whose[k];
      const proto::LogAppendAnswer& result = answer->results[k];
      // With an error, the server holds a different amount (e.g. it lost a tail in a crash):
      // resume from its size. An error that moves nothing is a refusal (the rank is not the
      // node's to write): sent again next time, not in every round of this one.
      const int64_t before = jobs[i].log_shipped;
      jobs[i].log_shipped = std::min<int64_t>(result.size, sizes[i]);
      if (!result.error.empty() && jobs[i].log_shipped == before) {
        ships[i].refused = true;
        continue;
      }
      if (ships[i].pulling) {
        if (auto progress = LastPullProgress(pieces[k].data))
          ships[i].progress = std::move(progress);
      }
      if (jobs[i].log_shipped >= sizes[i]) ships[i].shipped_all = true;
    }
  }
}

void Agent::AddEventReports(const proto::AttemptRank& id, const std::vector<SupervisorEvent>& fresh,
                            std::vector<proto::Report>& out) {
  const SupervisorEvent* usage = nullptr;  // written with its "exited", in one write
  for (const auto& e : fresh) {
    if (e.kind == "usage") usage = &e;
    auto event = proto::ParseReportEvent(e.kind);
    if (!event) continue;
    if (*event == proto::ReportEvent::kExited) {
      proto::Report exited = proto::Report::Exited(id, e.exit_code, e.phase, e.reason);
      if (usage && usage->peak_memory_bytes >= 0)
        exited.peak_memory_bytes = usage->peak_memory_bytes;
      if (usage && usage->cpu_ms >= 0) exited.cpu_ms = usage->cpu_ms;
      out.push_back(std::move(exited));
    } else {
      out.push_back(proto::Report::Event(id, *event, e.reason));
    }
  }
}

}  // namespace berth
