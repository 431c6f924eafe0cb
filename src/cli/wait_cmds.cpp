// `berth wait` and the progress of a bulk submission (`berth exec --num-jobs N` without -d): polls
// the server until every job has ended, drawing pending / running / succeeded / failed, the rate at
// which jobs end and the time left.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/job_status.h"
#include "common/json_util.h"
#include "common/strings.h"

namespace berth::cli {
namespace {

using Counts = std::map<std::string, int64_t>;  // status name -> jobs

// The counts of what is waited for: a group's from the server, or each job's own status. Waiting
// for one job that has not started yet, *why: its reason (why it waits, or how far its image's
// pull got).
Result<Counts> Poll(Connection& conn, const WaitFlags& f, int64_t* total, std::string* why) {
  why->clear();
  Counts counts;
  if (f.group) {
    auto res = conn.Call("GET", fmt::format("/v1/groups/{}", *f.group));
    if (!res.ok()) return res.status();
    const json::object& o = res->as_object();
    *total = AsInt(o.at("jobs")).value_or(0);
    for (const auto& [status, n] : o.at("counts").as_object()) {
      counts[std::string(status)] = AsInt(n).value_or(0);
    }
    return counts;
  }
  *total = static_cast<int64_t>(f.ids.size());
  for (int64_t id : f.ids) {
    auto res = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
    if (!res.ok()) return res.status();
    const json::object& job = res->as_object();
    const std::string status(job.at("status").as_string());
    ++counts[status];
    if (f.ids.size() == 1 && (status == JobStatusName(JobStatus::kPending) ||
                              status == JobStatusName(JobStatus::kStarting))) {
      if (const json::value* r = job.if_contains("reason"); r && r->is_string()) {
        *why = std::string(r->as_string());
      }
    }
  }
  return counts;
}

int64_t Sum(const Counts& c, std::initializer_list<JobStatus> statuses) {
  int64_t n = 0;
  for (JobStatus s : statuses) {
    auto it = c.find(std::string(JobStatusName(s)));
    if (it != c.end()) n += it->second;
  }
  return n;
}

struct Progress {
  int64_t pending = 0;
  int64_t running = 0;  // starting, setting up or running
  int64_t succeeded = 0;
  int64_t failed = 0;  // failed, failed in setup, lost, preempted
  int64_t cancelled = 0;
  int64_t total = 0;
  std::string why;  // one job not started yet: its reason
  int64_t done() const { return succeeded + failed + cancelled; }
  bool operator==(const Progress&) const = default;
};

Progress Summarize(const Counts& c, int64_t total) {
  Progress p;
  p.pending = Sum(c, {JobStatus::kPending});
  p.running = Sum(c, {JobStatus::kStarting, JobStatus::kSettingUp, JobStatus::kRunning});
  p.succeeded = Sum(c, {JobStatus::kSucceeded});
  p.failed = Sum(
      c, {JobStatus::kFailed, JobStatus::kFailedSetup, JobStatus::kLost, JobStatus::kPreempted});
  p.cancelled = Sum(c, {JobStatus::kCancelled});
  p.total = total;
  return p;
}

}  // namespace

int Wait(const GlobalFlags& g, const WaitFlags& f) {
  if (f.ids.empty() == !f.group) {
    return Fail(Status::Invalid("wait: give job ids or --group G (not both)"));
  }
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  const bool tty = ::isatty(STDOUT_FILENO) != 0 && !f.as_json;
  const std::string what = f.group ? fmt::format("group {}", *f.group)
                                   : (f.ids.size() == 1 ? fmt::format("job {}", f.ids.front())
                                                        : fmt::format("{} jobs", f.ids.size()));
  using SteadyClock = std::chrono::steady_clock;
  const auto start = SteadyClock::now();
  std::optional<Progress> first;
  std::optional<Progress> last;
  while (true) {
    int64_t total = 0;
    std::string why;
    auto counts = Poll(conn, f, &total, &why);
    if (!counts.ok()) {
      if (tty) fmt::print("\n");
      return Fail(counts.status());
    }
    Progress p = Summarize(*counts, total);
    p.why = std::move(why);
    if (!first) first = p;
    const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
    // The rate at which jobs end since we started watching; the time left at that rate.
    const double rate =
        elapsed > 0.5 ? static_cast<double>(p.done() - first->done()) / elapsed : 0.0;
    const bool finished = p.total > 0 && p.done() >= p.total;
    auto eta = [&]() -> std::string {
      if (finished) return "0s";
      if (rate <= 0) return "-";
      return FormatDuration(
          static_cast<DurationMs>(1000.0 * static_cast<double>(p.total - p.done()) / rate));
    };
    if (f.as_json) {
      if (!last || !(p == *last) || finished) {
        fmt::print(
            "{}\n",
            SerializeJson(json::object{
                {"pending", p.pending},
                {"running", p.running},
                {"succeeded", p.succeeded},
                {"failed", p.failed},
                {"cancelled", p.cancelled},
                {"done", p.done()},
                {"total", p.total},
                {"rate_per_s", rate},
                {"eta_s",
                 rate > 0 || finished
                     ? json::value(finished ? 0.0 : static_cast<double>(p.total - p.done()) / rate)
                     : json::value(nullptr)},
                {"finished", finished},
                {"reason", p.why.empty() ? json::value(nullptr) : json::value(p.why)}}));
      }
    } else {
      std::string line = fmt::format(
          "{}: {} pending, {} running, {} succeeded, {} failed{} | {}/{} done, {:.1f}/s, ETA {}",
          what, p.pending, p.running, p.succeeded, p.failed,
          p.cancelled > 0 ? fmt::format(", {} cancelled", p.cancelled) : "", p.done(), p.total,
          rate, eta());
      if (!p.why.empty()) line += " | " + p.why;
      if (tty) {
        fmt::print("\r\033[K{}", line);  // redrawn in place
      } else if (!last || !(p == *last) || finished) {
        fmt::print("{}\n", line);
      }
    }
    std::fflush(stdout);
    last = p;
    if (finished) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 250 : 500));
  }
  if (tty) fmt::print("\n");
  if (last->succeeded == last->total) return 0;
  if (!f.as_json) {
    fmt::print(stderr, "berth: {}: {} of {} did not succeed ({} failed, {} cancelled)\n", what,
               last->total - last->succeeded, last->total, last->failed, last->cancelled);
  }
  return 1;
}

// --- command line: the registration of each command (cli/command_context.h) ---

void AddWaitCommand(CommandContext& c) {
  auto& wait_flags = c.Keep<WaitFlags>();
  auto* wait = c.app.add_subcommand(
      "wait",
      "Wait until jobs end, showing progress (pending, running, succeeded, failed, rate, ETA); "
      "exits 0 only if every one succeeded");
  wait->add_option("ids", wait_flags.ids, "Job ids");
  wait->add_option("--group", wait_flags.group, "Every job of this bulk group");
  wait->add_flag("--json", wait_flags.as_json,
                 "One JSON object per line each time the counts change, for scripts");
  c.AddGlobal(wait);
  wait->callback([&] { c.rc = Wait(c.g, wait_flags); });
}

}  // namespace berth::cli
