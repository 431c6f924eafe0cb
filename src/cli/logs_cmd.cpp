// berth logs: a job's output (a rank, an attempt, all of them; followed with -f).
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli/arguments.h"
#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/interrupts.h"
#include "cli/table.h"
#include "cli/upload.h"
#include "common/clock.h"
#include "common/job_status.h"
#include "common/strings.h"
#include "net/http.h"
#include "spec/job_spec.h"

namespace berth::cli {

// Follows a job's output from `offset` until the job ends. Returns false on a connection error.
bool FollowLogs(Connection& conn, const LogStream& s, std::string* final_status, int64_t* from,
                const std::function<void(std::string_view)>& sink) {
  const int64_t id = s.id;
  const int attempt = s.attempt;
  const bool follow = s.follow;
  int64_t start = from != nullptr ? *from : 0;
  int64_t& offset = from != nullptr ? *from : start;
  int current_attempt = attempt;
  while (true) {
    std::string target = fmt::format("/v1/jobs/{}/logs?offset={}&rank={}&attempt={}&wait_ms={}{}",
                                     id, offset, s.rank, current_attempt, follow ? 20'000 : 0,
                                     s.timestamps ? "&timestamps=1" : "");
    auto res = conn.http().Request("GET", target, "", 70'000);
    if (!res.ok()) {
      fmt::print(stderr, "berth: {}\n", res.status().message());
      return false;
    }
    if (res->status != 200) {
      fmt::print(stderr, "berth: {}\n", conn.Decode(*res, "GET", target).status().message());
      return false;
    }
    if (!res->body.empty() && sink) {
      sink(res->body);
    } else if (!res->body.empty()) {
      fwrite(res->body.data(), 1, res->body.size(), stdout);
      fflush(stdout);
    }
    int reported_attempt = std::atoi(res->Header("X-Berth-Attempt").c_str());
    // (0 from a server that does not say.)
    const int latest_attempt = std::atoi(res->Header("X-Berth-Latest-Attempt").c_str());
    if (attempt == 0 && current_attempt != 0 && reported_attempt != current_attempt) {
      // The job was requeued: follow the new attempt from its start.
      fmt::print(stderr, "berth: job {} restarted (attempt {})\n", id, reported_attempt);
      offset = 0;
    } else if (attempt == 0 && res->body.empty() && latest_attempt > reported_attempt) {
      // The attempt followed was requeued, and what it printed is all read: on to the latest one
      // (asking for the old attempt again would be answered at once, for ever).
      fmt::print(stderr, "berth: job {} restarted (attempt {})\n", id, latest_attempt);
      reported_attempt = latest_attempt;
      offset = 0;
    } else {
      offset = std::atoll(res->Header("X-Berth-Offset").c_str());
    }
    if (attempt == 0) current_attempt = reported_attempt;
    if (final_status) *final_status = res->Header("X-Berth-Status");
    if (res->Header("X-Berth-Done") == "1") return true;
    if (!follow && res->body.empty()) return true;
  }
}

namespace {

// Prints the last `lines` lines of what job `id` printed so far; `offset` gets where they end.
bool PrintTail(Connection& conn, const LogStream& s, int64_t lines, int64_t* offset) {
  std::deque<std::string> kept;
  std::string partial;
  auto keep = [&](std::string_view data) {
    for (char c : data) {
      partial += c;
      if (c != '\n') continue;
      kept.push_back(std::move(partial));
      partial.clear();
      if (static_cast<int64_t>(kept.size()) > lines) kept.pop_front();
    }
  };
  LogStream what = s;
  what.follow = false;
  if (!FollowLogs(conn, what, nullptr, offset, keep)) return false;
  if (!partial.empty() && lines > 0) {
    kept.push_back(std::move(partial));
    if (static_cast<int64_t>(kept.size()) > lines) kept.pop_front();
  }
  for (const std::string& line : kept) fwrite(line.data(), 1, line.size(), stdout);
  fflush(stdout);
  return true;
}

// The output of one job, as `berth logs` prints it. Following to its end, the exit status is the
// job's (as `berth exec` without -d); a job with no output yet says why (pending, and for what).
int LogsOfJob(Connection& conn, int64_t id, const LogsFlags& f) {
  auto job = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!job.ok()) return Fail(job.status());
  const json::object& j = job->as_object();
  int num_nodes = static_cast<int>(AsInt(j.at("num_nodes")).value_or(1));
  if (f.rank && (*f.rank < 0 || *f.rank >= num_nodes)) {
    return Fail(Status::Invalid(fmt::format("--rank: job {} has ranks 0..{}", id, num_nodes - 1)));
  }
  const bool follow = !f.no_follow;
  const std::string status(j.at("status").as_string());
  if (status == "PENDING") {
    const json::value* reason = j.if_contains("reason");
    const std::string why = reason && reason->is_string() ? std::string(reason->as_string()) : "";
    fmt::print(stderr, "berth: job {} is PENDING{}{}\n", id, why.empty() ? "" : ": " + why,
               follow ? "; its output follows once it runs" : "; it has printed nothing yet");
  }
  int64_t offset = 0;
  const LogStream stream{.id = id,
                         .rank = f.rank.value_or(-1),
                         .attempt = f.attempt,
                         .follow = follow,
                         .timestamps = f.timestamps};
  if (f.tail && !PrintTail(conn, stream, *f.tail, &offset)) return 1;
  if (f.tail && !follow) return 0;
  if (!FollowLogs(conn, stream, nullptr, &offset)) return 1;
  if (!follow) return 0;
  // Followed to the end: the job's own outcome.
  auto ended = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!ended.ok()) return Fail(ended.status());
  const json::object& e = ended->as_object();
  const std::string outcome(e.at("status").as_string());
  if (outcome == "SUCCEEDED") return 0;
  fmt::print(stderr, "berth: job {} {}: {}\n", id, outcome,
             std::string(e.at("reason").as_string()));
  auto code = AsInt(e.at("exit_code"));
  return code && *code > 0 && *code < 256 ? static_cast<int>(*code) : 1;
}

}  // namespace

int Logs(const GlobalFlags& g, const LogsFlags& f) {
  if (f.follow && f.no_follow) return Fail(Status::Invalid("logs: -f and --no-follow disagree"));
  if (f.id.has_value() == f.group.has_value()) {
    return Fail(Status::Invalid("logs: give a job id or --group G (one of them)"));
  }
  if (f.tail && *f.tail < 0) return Fail(Status::Invalid("--tail: expected a count of lines"));
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  if (f.id) return LogsOfJob(conn, *f.id, f);
  // A group: each job's output in turn, under a header (as `tail` heads several files).
  std::vector<int64_t> ids;
  for (std::string before;;) {  // pages, newest first, each naming the next
    auto page = conn.Call("GET", fmt::format("/v1/jobs?group={}&all=1&limit=2000{}", *f.group,
                                             before.empty() ? "" : "&before=" + before));
    if (!page.ok()) return Fail(page.status());
    const json::object& o = page->as_object();
    for (const auto& j : o.at("jobs").as_array()) {
      ids.push_back(AsInt(j.as_object().at("id")).value_or(0));
    }
    const json::value* next = o.if_contains("next");
    if (next == nullptr || next->is_null()) break;
    before = std::to_string(AsInt(*next).value_or(0));
  }
  if (ids.empty()) return Fail(Status::NotFound(fmt::format("group {} has no jobs", *f.group)));
  std::sort(ids.begin(), ids.end());
  int rc = 0;
  for (int64_t id : ids) {
    fmt::print("==> job {} <==\n", id);
    fflush(stdout);
    const int one = LogsOfJob(conn, id, f);
    if (rc == 0) rc = one;
  }
  return rc;
}

void AddLogsCommand(CommandContext& c) {
  auto& logs_flags = c.Keep<LogsFlags>();
  auto* logs =
      c.app.add_subcommand("logs", "Print a job's output, following it until the job ends");
  logs->add_option("id", logs_flags.id, "Job id");
  logs->add_flag("-f,--follow", logs_flags.follow,
                 "Follow the output until the job ends, then exit with its exit code (the "
                 "default)");
  logs->add_flag("--no-follow", logs_flags.no_follow, "Print what is there and return");
  logs->add_option("--tail", logs_flags.tail,
                   "Only the last N lines of what the job printed so far (then what follows)");
  logs->add_flag("-t,--timestamps", logs_flags.timestamps,
                 "Prefix each line with when it reached the server (UTC, to the second)");
  logs->add_option("--group", logs_flags.group,
                   "Every job of this bulk group, one after another, each under a header");
  logs->add_option("--rank", logs_flags.rank, "Node rank of a multi-node job");
  logs->add_option("--attempt", logs_flags.attempt, "Attempt (default: the latest)");
  c.AddGlobal(logs);
  logs->callback([&] { c.rc = Logs(c.g, logs_flags); });
}

}  // namespace berth::cli
