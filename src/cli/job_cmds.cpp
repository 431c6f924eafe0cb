// berth exec / queue / cancel / requeue / update (logs: logs_cmd.cpp; show: show_cmd.cpp).
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
#include "spec/notify_events.h"

namespace berth::cli {

std::string GpusOf(const json::object& job) {
  const json::value& acc = job.at("resources").as_object().at("accelerators");
  if (!acc.is_object() || acc.as_object().empty()) return "-";
  const auto& [type, count] = *acc.as_object().begin();
  std::string n = count.is_double() ? fmt::format("{}", count.as_double())
                                    : std::to_string(AsInt(count).value_or(0));
  return std::string(type) + ":" + n;
}

int Fail(const Status& status) {
  fmt::print(stderr, "berth: {}\n", status.message());
  return status.code() == Code::kInvalidArgument ? 2 : 1;
}

Result<json::value> CallServer(const GlobalFlags& g, const std::string& method,
                               const std::string& target, const std::string& body) {
  Connection conn(g.server, g.token, g.self_exe);
  BERTH_RETURN_IF_ERROR(conn.Connect());
  return conn.Call(method, target, body);
}

namespace {

std::string Time(const json::value& v, TimeMs now) {
  auto t = TimeFromJson(v);
  return t ? FormatAgo(*t, now) : "-";
}

std::string NodesOf(const json::object& job) {
  std::vector<std::string> nodes;
  for (const auto& p : job.at("placement").as_array())
    nodes.emplace_back(p.as_object().at("node").as_string());
  return nodes.empty() ? "-" : Join(nodes, ",");
}

// The REASON column: why a pending job waits, or how a finished one ended (as squeue's
// NODELIST(REASON)); "-" for one that runs. Long reasons are cut (berth show has them whole).
std::string ReasonOf(const json::object& job) {
  const json::value* reason = job.if_contains("reason");
  const std::string status(job.at("status").as_string());
  if (reason == nullptr || !reason->is_string() || reason->as_string().empty() ||
      IsActive(ParseJobStatus(status).value_or(JobStatus::kPending))) {
    return "-";
  }
  std::string text(reason->as_string());
  constexpr size_t kWidth = 48;
  if (text.size() > kWidth) text = text.substr(0, kWidth - 3) + "...";
  return text;
}

// Whether a row of `berth queue` is kept by its --status / --active filter.
bool StatusKept(const QueueFlags& f, const std::string& status) {
  if (f.active && IsTerminal(ParseJobStatus(status).value_or(JobStatus::kSucceeded))) return false;
  if (f.status.empty()) return true;
  for (const std::string& s : Split(f.status, ',')) {
    if (Trim(s) == status) return true;
  }
  return false;
}

}  // namespace

namespace {

// The spec of `berth exec ARGS`: the task file, or the command, with its name.
Result<JobSpec> SpecOfArgs(const ExecFlags& f) {
  JobSpec spec;
  std::string yaml_path;
  if (f.args.size() == 1 && !f.command && LooksLikeTaskFile(f.args[0])) {
    yaml_path = f.args[0];
    std::ifstream in(yaml_path);
    if (!in) {
      return Status::Invalid("cannot read task file " + yaml_path + ": " + std::strerror(errno));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto parsed = ParseTaskYaml(ss.str(), yaml_path);
    if (!parsed.ok() && !yaml_path.ends_with(".yaml") && !yaml_path.ends_with(".yml")) {
      // A script given where a task file goes: say how to run it.
      const std::string ext = std::filesystem::path(yaml_path).extension().string();
      const std::string runner = ext == ".py" ? "python3 " : ext == ".sh" ? "bash " : "";
      return Status::Invalid(fmt::format(
          "{} is not a task file (YAML: {}); to run it as a command: berth exec -- {}{}", yaml_path,
          parsed.status().message(), runner, yaml_path));
    }
    if (!parsed.ok()) return parsed.status();
    for (const auto& w : parsed->warnings) fmt::print(stderr, "berth: warning: {}\n", w);
    spec = parsed->spec;
    if (spec.name.empty()) spec.name = std::filesystem::path(yaml_path).stem().string();
  } else {
    std::vector<std::string> quoted;
    for (const auto& a : f.args) quoted.push_back(f.args.size() == 1 ? a : ShellQuote(a));
    spec.run = Join(quoted, " ");
    std::string first = Split(Trim(f.args[0]), ' ')[0];
    spec.name = std::filesystem::path(first).filename().string();
  }
  if (!f.name.empty()) spec.name = f.name;
  if (!spec.name.empty() && !IsValidName(spec.name)) {
    // Derived names may hold odd characters; keep what is valid.
    std::string clean;
    for (char c : spec.name)
      clean +=
          (isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    if (!f.name.empty())
      return Status::Invalid("-n: invalid job name '" + f.name + "' (use letters, digits, . _ -)");
    spec.name = clean.empty() || clean[0] == '-' ? "job" : clean.substr(0, 128);
  }
  return spec;
}

// The command line's overrides of the task file (--gpus, --cpus, --env, ...).
Status ApplyOverrides(const ExecFlags& f, JobSpec& spec) {
  if (!f.gpus.empty()) {
    if (f.gpus == "none" || f.gpus == "0") {
      spec.resources.gpu_type.clear();
      spec.resources.gpu_milli = 0;
    } else {
      auto acc = ParseAccelerators(f.gpus);
      if (!acc.ok()) return Status::Invalid("--gpus: " + acc.status().message());
      spec.resources.gpu_type = acc->first;
      spec.resources.gpu_milli = acc->second;
    }
  }
  if (!f.cpus.empty()) {
    auto cpus = ParseMilli(f.cpus);
    if (!cpus)
      return Status::Invalid("--cpus: expected a number like 2 or 0.5, got '" + f.cpus + "'");
    spec.resources.cpus = *cpus;
  }
  if (!f.memory.empty()) {
    auto mem = ParseMilli(f.memory);
    if (!mem)
      return Status::Invalid("--memory: expected GiB as a number like 16, got '" + f.memory + "'");
    spec.resources.memory = *mem * kMibPerGib / 1000;
  }
  if (!f.cpu_binding.empty()) {
    auto binding = ParseCpuBinding(f.cpu_binding);
    if (!binding) {
      return Status::Invalid("--cpu-binding: expected cores or none, got '" + f.cpu_binding + "'");
    }
    spec.cpu_binding = *binding;
  }
  for (const auto& e : f.envs) {
    auto eq = e.find('=');
    std::string key = e.substr(0, eq);
    std::string value;
    if (eq == std::string::npos) {
      const char* v =
          std::getenv(key.c_str());  // --env KEY passes this shell's value, like docker -e
      if (!v) return Status::Invalid("--env " + key + ": not set here; use --env KEY=VALUE");
      value = v;
    } else {
      value = e.substr(eq + 1);
    }
    std::erase_if(spec.envs, [&](const auto& kv) { return kv.first == key; });
    spec.envs.emplace_back(key, value);
  }
  if (f.priority) spec.priority = *f.priority;
  if (f.num_nodes) spec.num_nodes = *f.num_nodes;
  if (!f.workdir.empty()) spec.workdir = f.workdir;
  if (!f.pool.empty()) spec.pool = f.pool;
  if (!f.reservation.empty()) spec.reservation = f.reservation;
  if (!f.idle_ok.empty()) spec.idle_ok = f.idle_ok;
  if (!f.notify.empty()) {
    Result<NotifyEvents> events = ParseNotifyEvents(f.notify);
    if (!events.ok()) return Status::Invalid("--" + events.status().message());
    spec.notify = FormatNotifyEvents(*events);
  }
  if (!f.topology.empty()) {
    // "rack" (required), or "required=rack,preferred=switch" (either part alone too).
    spec.topology_required.clear();
    spec.topology_preferred.clear();
    for (const std::string& part : Split(f.topology, ',')) {
      const size_t eq = part.find('=');
      const std::string key = eq == std::string::npos ? "required" : part.substr(0, eq);
      const std::string value = eq == std::string::npos ? part : part.substr(eq + 1);
      if ((key != "required" && key != "preferred") || value.empty()) {
        return Status::Invalid(
            "--topology: expected LEVEL or required=LEVEL,preferred=LEVEL, got '" + f.topology +
            "'");
      }
      (key == "required" ? spec.topology_required : spec.topology_preferred) = value;
    }
  }
  if (!f.image.empty()) {
    const std::string ref = StartsWith(f.image, "docker:") ? f.image.substr(7) : f.image;
    if (spec.container) {
      spec.container->image = ref;
    } else {
      spec.container = ContainerSpec{.image = ref};
    }
  }
  if (!f.pull.empty()) {
    auto pull = ParsePullPolicy(f.pull);
    if (!pull) {
      return Status::Invalid("--pull: expected missing, always or never, got '" + f.pull + "'");
    }
    if (!spec.container) {
      return Status::Invalid("--pull: the job runs in no image (--image, or the task's image_id)");
    }
    spec.container->pull = *pull;
  }
  for (const std::string& text : f.after) {
    auto dep = ParseDependency(text);
    if (!dep.ok()) return Status::Invalid("--after: " + dep.status().message());
    spec.depends_on.push_back(std::move(*dep));
  }
  if (f.max_running) {
    if (!f.num_jobs) return Status::Invalid("--max-running limits a bulk group: add --num-jobs N");
    spec.max_running = *f.max_running;
  }
  if (f.interactive) spec.interactive = true;
  if (!f.time_limit.empty()) {
    auto limit = ParseDuration(f.time_limit);
    if (!limit || *limit <= 0) {
      return Status::Invalid("--time: expected a duration like 4h, 90m or 1h30m, got '" +
                             f.time_limit + "'");
    }
    spec.time_limit = *limit;
  }
  return Status::Ok();
}

// A workdir on the nodes rather than uploaded: `workdir: node:/shared/proj`.
constexpr std::string_view kNodeWorkdirPrefix = "node:";

// "~/x" -> "$HOME/x"; anything else as it is.
std::string ExpandHome(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (home && (path == "~" || path.starts_with("~/"))) return home + path.substr(1);
  return path;
}

// Where the job runs (docs/user-guide.md "Workdir upload"): `node:/path` is a path on the nodes (a
// shared file system); any other workdir is a local directory, uploaded (UploadWorkdir); none
// means here, as a path on the nodes (as sbatch does). Answers whether the workdir is to be
// uploaded.
Result<bool> ResolveWorkdir(JobSpec& spec) {
  std::error_code ec;
  std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (spec.workdir.empty()) {
    spec.workdir = cwd.string();
    return false;
  }
  if (spec.workdir.starts_with(kNodeWorkdirPrefix)) {
    spec.workdir = spec.workdir.substr(kNodeWorkdirPrefix.size());
    if (!std::filesystem::path(spec.workdir).is_absolute()) {
      return Status::Invalid("workdir: node:" + spec.workdir +
                             ": a path on the nodes must be absolute (node:/shared/proj)");
    }
    return false;
  }
  return true;
}

// Uploads the spec's local workdir and file mounts' sources, naming the uploads in the spec.
Status UploadSources(Connection& conn, JobSpec& spec, bool upload_workdir, bool verbose) {
  if (upload_workdir) {
    auto report = UploadTree(conn, spec.workdir, "workdir", verbose);
    if (!report.ok()) return report.status();
    spec.workdir.clear();
    spec.workdir_upload = report->manifest;
  }
  for (FileMount& m : spec.file_mounts) {
    if (m.source.empty()) continue;
    const std::string source = ExpandHome(m.source);
    auto report = UploadTree(conn, source, "file_mounts: " + m.target, verbose);
    if (!report.ok()) return report.status();
    m.upload = report->manifest;
    std::error_code ec;
    m.file = !std::filesystem::is_directory(source, ec);
    m.source.clear();
  }
  return Status::Ok();
}

}  // namespace

int Exec(const GlobalFlags& g, const ExecFlags& f) {
  if (f.into) return ExecInto(g, f);
  if (f.args.empty())
    return Fail(
        Status::Invalid("exec: give a task YAML or a command (berth exec task.yaml, berth exec -- "
                        "python train.py)"));
  Result<JobSpec> parsed = SpecOfArgs(f);
  if (!parsed.ok()) return Fail(parsed.status());
  JobSpec spec = std::move(*parsed);
  if (Status st = ApplyOverrides(f, spec); !st.ok()) return Fail(st);
  Result<bool> upload_workdir = ResolveWorkdir(spec);
  if (!upload_workdir.ok()) return Fail(upload_workdir.status());
  Status valid = ValidateSpec(spec);
  if (!valid.ok()) return Fail(valid);

  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  st = UploadSources(conn, spec, *upload_workdir, false);
  if (!st.ok()) return Fail(st);
  auto res = SubmitSpec(conn, spec, f.num_jobs, f.idempotency_key);
  if (!res.ok()) return Fail(res.status());
  const json::object& out = res->as_object();
  const json::array& ids = out.at("jobs").as_array();
  // What the server wants the submitter to know (a limit no node there enforces), once.
  if (const json::value* warnings = out.if_contains("warnings"); warnings && warnings->is_array()) {
    for (const json::value& w : warnings->as_array()) {
      if (w.is_string()) fmt::print(stderr, "berth: warning: {}\n", std::string(w.as_string()));
    }
  }
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(json::object{{"group", out.at("group")}, {"jobs", ids}}));
  } else if (!out.at("group").is_null()) {
    fmt::print("Submitted group {}: jobs {}-{} ({} jobs).\n", AsInt(out.at("group")).value(),
               AsInt(ids.front()).value(), AsInt(ids.back()).value(), ids.size());
  } else {
    fmt::print(f.detach ? stdout : stderr, "Job {} submitted ({}).\n", AsInt(ids.front()).value(),
               spec.name);
  }
  std::fflush(stdout);
  if (f.detach) return 0;
  // A bulk submission: its progress until every job has ended (the exit code says whether all
  // succeeded), as `berth wait --group G` shows it.
  if (!out.at("group").is_null()) {
    return Wait(g, WaitFlags{.group = AsInt(out.at("group")).value(), .as_json = f.as_json});
  }
  if (ids.size() != 1) return 0;
  if (spec.interactive) return AttachToJob(conn, AsInt(ids.front()).value(), 0, true);
  return FollowToEnd(conn, AsInt(ids.front()).value(), true);
}

Result<json::value> SubmitSpec(Connection& conn, const JobSpec& spec, std::optional<int> num_jobs,
                               const std::string& idempotency_key) {
  // No "user": the server knows who we are (socket credentials or our token).
  json::object body{{"spec", SpecToJson(spec)}};
  if (num_jobs) body["num_jobs"] = *num_jobs;
  // Keyed, so that the call may be sent again (to this server or, after a failover, the next)
  // when its answer was lost, without submitting twice (docs/api.md "Idempotency-Key").
  const std::string key = idempotency_key.empty() ? NewIdempotencyKey() : idempotency_key;
  return conn.CallIdempotent("POST", "/v1/jobs", SerializeJson(body), key);
}

int FollowToEnd(Connection& conn, int64_t id, bool submitted) {
  std::string status;
  std::unique_ptr<Connection> side;
  std::optional<Interrupts> interrupts;
  if (submitted) {
    side = conn.Another();
    interrupts.emplace([&side, id](int sig, bool repeated) {
      if (sig == SIGQUIT) {
        fflush(stdout);
        fmt::print(stderr,
                   "\nberth: stopped following job {}; it goes on (berth logs {} follows it "
                   "again, berth cancel {} cancels it)\n",
                   id, id, id);
        ::_exit(0);
      }
      if (repeated) {
        auto cancelled = side->Call("POST", "/v1/jobs/cancel",
                                    SerializeJson(json::object{{"ids", json::array{id}}}));
        fmt::print(stderr, "\nberth: {}\n",
                   cancelled.ok() ? fmt::format("cancelled job {} (Ctrl-C twice)", id)
                                  : "could not cancel: " + cancelled.status().message());
        return;
      }
      auto job = side->Call("GET", fmt::format("/v1/jobs/{}", id));
      std::string state = "still there";
      if (job.ok()) {
        const json::object& o = job->as_object();
        state = std::string(o.at("status").as_string());
        if (const std::string nodes = NodesOf(o); nodes != "-") state += " on " + nodes;
      }
      fmt::print(stderr,
                 "\nberth: job {} is {}. Ctrl-C again within a second cancels it; Ctrl-\\ stops "
                 "following and leaves it running\n",
                 id, state);
    });
  }
  if (!FollowLogs(conn, LogStream{.id = id}, &status)) return 1;
  auto job = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!job.ok()) return Fail(job.status());
  const json::object& j = job->as_object();
  status = std::string(j.at("status").as_string());
  if (status == "SUCCEEDED") return 0;
  fmt::print(stderr, "berth: job {} {}: {}\n", id, status, std::string(j.at("reason").as_string()));
  auto code = AsInt(j.at("exit_code"));
  return code && *code > 0 && *code < 256 ? static_cast<int>(*code) : 1;
}

namespace {

// The summary `berth queue` prints by default: every active job in no group (up to a cap), each
// bulk group as one row with its jobs' counts per status, and the newest --limit finished jobs;
// what is left out is said at the end.
// Returns nullopt when the server is older than the summary (no /v1/queue): the caller lists jobs
// one per row instead.
std::optional<int> QueueSummary(Connection& conn, const QueueFlags& f) {
  std::string target = fmt::format("/v1/queue?limit={}", f.limit);
  if (!f.user.empty()) target += "&user=" + net::UrlEncode(f.user);
  if (!f.team.empty()) target += "&team=" + net::UrlEncode(f.team);
  auto res = conn.Call("GET", target);
  if (!res.ok() && res.status().code() == Code::kNotFound &&
      res.status().message().find("no such endpoint") != std::string::npos) {
    return std::nullopt;
  }
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  Table table({"ID", "NAME", "USER", "SUBMITTED", "STARTED", "STATUS", "GPUS", "NODE", "REASON"});
  TimeMs now = SystemClock::Get().Now();
  std::vector<std::string> groups;
  int64_t bookkeeping = 0;  // ended image jobs left out
  for (const auto& rv : o.at("rows").as_array()) {
    const json::object& j = rv.as_object();
    if (j.at("kind").as_string() == "group") {
      const std::string group = std::to_string(AsInt(j.at("group")).value_or(0));
      groups.push_back(group);
      // Counts in the order of a job's life: what waits, what runs, how they ended.
      std::vector<std::string> counts;
      for (JobStatus s :
           {JobStatus::kPending, JobStatus::kStarting, JobStatus::kSettingUp, JobStatus::kRunning,
            JobStatus::kSucceeded, JobStatus::kFailed, JobStatus::kFailedSetup,
            JobStatus::kCancelled, JobStatus::kLost, JobStatus::kPreempted}) {
        const json::value* n = j.at("counts").as_object().if_contains(JobStatusName(s));
        if (n != nullptr)
          counts.push_back(fmt::format("{} {}", AsInt(*n).value_or(0), JobStatusName(s)));
      }
      table.Add({"group " + group, std::string(j.at("name").as_string()),
                 std::string(j.at("user").as_string()), Time(j.at("submitted_at"), now), "-",
                 Join(counts, ", "), GpusOf(j),
                 fmt::format("{} jobs", AsInt(j.at("jobs")).value_or(0)), "-"});
      continue;
    }
    const std::string status(j.at("status").as_string());
    const bool ended = IsTerminal(ParseJobStatus(status).value_or(JobStatus::kSucceeded));
    // --limit 0: no finished job (the server's limit 0 is its default).
    if (f.limit == 0 && ended) continue;
    // The ended jobs of `berth image ls|rm|prefetch` are berth's own bookkeeping, not the user's
    // work: left out (--all lists them).
    if (ended && std::string_view(j.at("name").as_string()).starts_with(kImageJobPrefix)) {
      ++bookkeeping;
      continue;
    }
    table.Add({std::to_string(AsInt(j.at("id")).value()), std::string(j.at("name").as_string()),
               std::string(j.at("user").as_string()), Time(j.at("submitted_at"), now),
               Time(j.at("started_at"), now), status, GpusOf(j), NodesOf(j), ReasonOf(j)});
  }
  fmt::print("{}", table.Render());
  const int64_t hidden = AsInt(o.at("active_not_shown")).value_or(0);
  if (hidden > 0) {
    fmt::print(
        "({} more active job(s) not in a group are not shown: berth queue --all lists every "
        "job, --user or --team fewer)\n",
        hidden);
  }
  if (f.limit > 0 && o.at("more_finished").as_bool()) {
    fmt::print(
        "(only the newest {} finished job(s) are shown: --limit N shows more, --all every "
        "job)\n",
        f.limit);
  }
  if (!groups.empty()) {
    fmt::print("(each bulk group is one row: berth queue --group {} lists its jobs)\n",
               groups.front());
  }
  if (bookkeeping > 0) {
    fmt::print("({} ended job(s) of berth image ls|rm|prefetch are not shown: --all lists them)\n",
               bookkeeping);
  }
  return 0;
}

}  // namespace

// `berth queue --all`: the page size it asks for (the server's maximum).
constexpr int kAllJobsPage = 2'000;

int Queue(const GlobalFlags& g, const QueueFlags& f) {
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  for (const std::string& name : Split(f.status, ',')) {
    if (!Trim(name).empty() && !ParseJobStatus(Trim(name))) {
      std::vector<std::string> known;
      for (JobStatus st :
           {JobStatus::kPending, JobStatus::kStarting, JobStatus::kSettingUp, JobStatus::kRunning,
            JobStatus::kSucceeded, JobStatus::kFailed, JobStatus::kFailedSetup,
            JobStatus::kCancelled, JobStatus::kLost, JobStatus::kPreempted}) {
        known.emplace_back(JobStatusName(st));
      }
      return Fail(
          Status::Invalid(fmt::format("--status: no status {}{}; statuses are {}", name,
                                      Nearest(Trim(name), known).empty()
                                          ? ""
                                          : " (did you mean " + Nearest(Trim(name), known) + "?)",
                                      Join(known, ", "))));
    }
  }
  const bool filtered = f.active || !f.status.empty();
  if (!f.as_json && !f.all && !f.group && !filtered) {
    if (std::optional<int> rc = QueueSummary(conn, f)) return *rc;
  }
  // Filtered by status: every page is read (the server lists by id) and the rows kept here.
  const bool every_page = f.all || filtered;
  // A page: at most --limit rows, newest first, of the active jobs and the most recent finished
  // ones. --all: every job, page after page (the server pages every listing), each page printed
  // as it arrives with --json.
  std::string target = every_page ? fmt::format("/v1/jobs?all=1&page={}", kAllJobsPage)
                                  : fmt::format("/v1/jobs?limit={}&page={}", f.limit, f.limit);
  if (f.group) target += fmt::format("&group={}", *f.group);
  if (!f.user.empty()) target += "&user=" + net::UrlEncode(f.user);
  if (!f.team.empty()) target += "&team=" + net::UrlEncode(f.team);
  auto res = conn.Call("GET", target);
  if (!res.ok()) return Fail(res.status());
  json::array jobs = std::move(res->as_object().at("jobs").as_array());
  auto keep = [&](json::array& page) {
    if (!filtered) return;
    json::array kept;
    for (auto& j : page) {
      if (StatusKept(f, std::string(j.as_object().at("status").as_string()))) {
        kept.push_back(std::move(j));
      }
    }
    page = std::move(kept);
  };
  keep(jobs);
  if (every_page) {
    bool first = true;
    auto emit = [&](const json::array& page) {
      for (const auto& j : page) {
        fmt::print("{}{}", first ? "[" : ",\n", SerializeJson(j));
        first = false;
      }
    };
    if (f.as_json) emit(jobs);
    auto next_of = [](const json::value& answer) {
      const json::value* next = answer.as_object().if_contains("next");
      return next == nullptr ? json::value(nullptr) : *next;  // an older server: one answer
    };
    for (json::value next = next_of(*res); !next.is_null();) {
      auto more = conn.Call("GET", target + fmt::format("&before={}", AsInt(next).value_or(0)));
      if (!more.ok()) {
        if (f.as_json) fmt::print("{}\n", first ? "" : "]");
        return Fail(more.status());
      }
      json::array& page = more->as_object().at("jobs").as_array();
      keep(page);
      if (f.as_json) {
        emit(page);
      } else {
        for (auto& j : page) jobs.push_back(std::move(j));
      }
      next = next_of(*more);
    }
    if (f.as_json) {
      fmt::print("{}\n", first ? "[]" : "]");
      return 0;
    }
  }
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(jobs));
    return 0;
  }
  // Active jobs first, then the finished ones, each newest first (as the summary shows them).
  {
    json::array active_first;
    for (bool active : {true, false}) {
      for (const auto& j : jobs) {
        const auto status = ParseJobStatus(std::string(j.as_object().at("status").as_string()));
        if (!IsTerminal(status.value_or(JobStatus::kSucceeded)) == active) {
          active_first.push_back(j);
        }
      }
    }
    jobs = std::move(active_first);
  }
  bool grouped = false;
  for (const auto& j : jobs) grouped = grouped || !j.as_object().at("group").is_null();
  std::vector<std::string> header = {"ID",     "NAME", "USER", "SUBMITTED", "STARTED",
                                     "STATUS", "GPUS", "NODE", "REASON"};
  if (grouped) header.insert(header.begin() + 2, {"GROUP", "RANK"});
  Table table(header);
  TimeMs now = SystemClock::Get().Now();
  for (const auto& jv : jobs) {
    const json::object& j = jv.as_object();
    std::vector<std::string> row = {std::to_string(AsInt(j.at("id")).value()),
                                    std::string(j.at("name").as_string()),
                                    std::string(j.at("user").as_string()),
                                    Time(j.at("submitted_at"), now),
                                    Time(j.at("started_at"), now),
                                    std::string(j.at("status").as_string()),
                                    GpusOf(j),
                                    NodesOf(j),
                                    ReasonOf(j)};
    if (grouped) {
      row.insert(row.begin() + 2,
                 {j.at("group").is_null() ? "-" : std::to_string(AsInt(j.at("group")).value()),
                  j.at("rank").is_null() ? "-" : std::to_string(AsInt(j.at("rank")).value())});
    }
    table.Add(row);
  }
  fmt::print("{}", table.Render());
  if (const auto* more = res->as_object().if_contains("more");
      !every_page && more && more->is_bool() && more->as_bool()) {
    fmt::print("(the newest {} shown; --limit N shows more, --all every job)\n", f.limit);
  }
  return 0;
}

int Cancel(const GlobalFlags& g, const CancelFlags& f) {
  if (f.ids.empty() && !f.all && !f.all_users && !f.group) {
    return Fail(Status::Invalid("cancel: give job ids, --group G or --all"));
  }
  json::object body;
  if (!f.ids.empty()) {
    json::array ids;
    for (auto id : f.ids) ids.push_back(id);
    body["ids"] = std::move(ids);
  }
  if (f.all) body["all"] = true;
  if (f.all_users) body["all_users"] = true;
  if (f.group) body["group"] = *f.group;
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  auto res = conn.Call("POST", "/v1/jobs/cancel", SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(o));
  } else {
    auto list = [](const json::array& a) {
      std::vector<std::string> s;
      for (const auto& x : a) s.push_back(std::to_string(AsInt(x).value_or(0)));
      return Join(s, ", ");
    };
    const auto& cancelled = o.at("cancelled").as_array();
    if (!cancelled.empty())
      fmt::print("Cancelled {}: {}\n", cancelled.size() == 1 ? "job" : "jobs", list(cancelled));
    if (cancelled.empty() && f.ids.empty()) fmt::print("No active jobs to cancel.\n");
    if (!o.at("already_finished").as_array().empty()) {
      fmt::print("Already finished: {}\n", list(o.at("already_finished").as_array()));
    }
    if (!o.at("not_found").as_array().empty()) {
      fmt::print(stderr, "berth: no such job: {}\n", list(o.at("not_found").as_array()));
    }
    if (const auto* f = o.if_contains("forbidden"); f && !f->as_array().empty()) {
      fmt::print(stderr,
                 "berth: not yours (cancelling another user's job needs the operator role): {}\n",
                 list(f->as_array()));
    }
  }
  const auto* forbidden = o.if_contains("forbidden");
  bool refused = forbidden && forbidden->is_array() && !forbidden->as_array().empty();
  return o.at("not_found").as_array().empty() && !refused ? 0 : 1;
}

int Requeue(const GlobalFlags& g, const std::vector<int64_t>& ids) {
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  int rc = 0;
  for (int64_t id : ids) {
    auto res = conn.Call("POST", fmt::format("/v1/jobs/{}/requeue", id));
    if (!res.ok()) {
      rc = Fail(res.status());
      continue;
    }
    fmt::print("Job {} is back in the queue.\n", id);
  }
  return rc;
}

}  // namespace berth::cli

namespace berth::cli {

int Update(const GlobalFlags& g, const UpdateFlags& f) {
  if (!f.group) return Fail(Status::Invalid("say which group: --group N"));
  if (f.max_running.empty()) return Fail(Status::Invalid("say what to change: --max-running N"));
  json::object body;
  if (f.max_running == "none") {
    body["max_running"] = nullptr;
  } else {
    char* end = nullptr;
    long long n = std::strtoll(f.max_running.c_str(), &end, 10);
    if (end == f.max_running.c_str() || *end != '\0' || n < 1 || n > kMaxRunning) {
      return Fail(Status::Invalid(
          fmt::format("--max-running: expected a number from 1 to {} or 'none', got '{}'",
                      kMaxRunning, f.max_running)));
    }
    body["max_running"] = n;
  }
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  auto res = conn.Call("POST", fmt::format("/v1/groups/{}", *f.group), SerializeJson(body));
  if (!res.ok()) return Fail(res.status());
  const json::value& limit = res->as_object().at("max_running");
  fmt::print(
      "Group {}: max_running {}.\n", *f.group,
      limit.is_null() ? std::string("none (no limit)") : std::to_string(AsInt(limit).value()));
  return 0;
}

// --- command line: the registration of each command (cli/command_context.h) ---

void AddExecCommand(CommandContext& c) {
  auto& exec_flags = c.Keep<ExecFlags>();
  auto* exec = c.app.add_subcommand("exec", "Submit a job: a task YAML, or a command after --");
  exec->add_option("args", exec_flags.args,
                   "task.yaml, or the command to run: every word from its first on is the "
                   "command's (berth's options go before it, or before --)");
  exec->add_flag(
      "-d,--detach", exec_flags.detach,
      "Return at once instead of streaming the output (or, for --num-jobs, the progress)");
  exec->add_option("-n,--name", exec_flags.name, "Job name");
  exec->add_option("--gpus", exec_flags.gpus,
                   "Accelerators per node, TYPE:N (e.g. V100:1, T4:0.5)");
  exec->add_option("--cpus", exec_flags.cpus, "CPUs per node (default 0.5)");
  exec->add_option("--memory", exec_flags.memory,
                   "Memory per node in GiB (default: none reserved)");
  exec->add_option("--cpu-binding", exec_flags.cpu_binding,
                   "cores: pin each rank to --cpus whole CPUs no other pinned job holds "
                   "(as the YAML's resources.cpu_binding); none: the default");
  exec->add_option("--env", exec_flags.envs, "Environment variable KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  exec->add_option("--num-jobs", exec_flags.num_jobs,
                   "Submit N copies as one group, ranks 0..N-1; without -d, show their progress "
                   "until all end");
  exec->add_option("--priority", exec_flags.priority, "Priority (higher runs first; default 0)");
  exec->add_option("--num-nodes", exec_flags.num_nodes, "Nodes per job (a gang)");
  exec->add_option("--workdir", exec_flags.workdir,
                   "Local directory uploaded as the job's working directory (its .gitignore "
                   "files apply); node:/PATH for a path on the nodes (default: the current "
                   "directory's path, on the nodes)");
  exec->add_option("--pull", exec_flags.pull,
                   "When to pull the image: missing (the default: only when the node lacks it), "
                   "always (its tag again), never (the node's copy or fail); as the YAML's "
                   "container.pull");
  exec->add_option("--image", exec_flags.image,
                   "Run setup and run in this container image (as the YAML's resources.image_id: "
                   "docker:IMAGE), on nodes that run containers");
  exec->add_option("--pool", exec_flags.pool,
                   "Run only on nodes of this pool (as the YAML's pool:)");
  exec->add_option("--reservation", exec_flags.reservation,
                   "Run in this reservation (berth reserve list): only on its nodes, inside its "
                   "window; as the YAML's reservation:");
  exec->add_option("--idle-ok", exec_flags.idle_ok,
                   "Exempt the job from the cluster's idle policy, saying why (e.g. \"data "
                   "prep\"): its idle GPUs are reported, never acted on; refused where the policy "
                   "allows no exemptions (as the YAML's idle_ok:; docs/idle.md)");
  exec->add_option(
      "--notify", exec_flags.notify,
      "Tell you of these events, by your sinks (berth notify set): started, end, "
      "fail, oom, preempted, idle, pending>DURATION, e.g. end,fail; a --num-jobs group sends "
      "one summary when it ends (add each for one notice per job); as the YAML's "
      "notify: (docs/notifications.md)");
  exec->add_option("--topology", exec_flags.topology,
                   "Place a gang by the cluster's topology levels: required=LEVEL (all nodes "
                   "under one domain of it; a bare LEVEL means this), preferred=LEVEL (as few "
                   "domains of it as can be), or both joined by ','; as the YAML's "
                   "placement.topology (docs/topology.md)");
  exec->add_option("--after", exec_flags.after,
                   "Start only once a dependency holds: ok:ID[,ID] (all succeeded), notok:ID (all "
                   "ended, one failed), any:ID (all ended); ok:group:G for every job of a group. "
                   "Repeatable (all must hold); added to the task file's depends_on")
      ->allow_extra_args(false);
  exec->add_option("--max-running", exec_flags.max_running,
                   "With --num-jobs: at most N jobs of the group run at once");
  exec->add_flag("-i,-t,--interactive", exec_flags.interactive,
                 "Run on a terminal and attach to it once the job runs, as berth attach does "
                 "(the YAML's interactive: true); -it works too");
  exec->add_option("--into", exec_flags.into,
                   "Run the command inside this running job instead of submitting one (its user, "
                   "cgroup, work dir and environment, like srun --overlap): berth exec --into 12 "
                   "-- nvidia-smi; with -it on a terminal of its own. Exits with its exit code");
  exec->add_option("--rank", exec_flags.rank, "With --into: which node of a multi-node job");
  exec->add_option("--time", exec_flags.time_limit,
                   "Time limit, e.g. 4h or 90m (as the YAML's time_limit)");
  exec->add_flag("--json", exec_flags.as_json, "Print {\"group\": G, \"jobs\": [ids]}");
  exec->add_option("--idempotency-key", exec_flags.idempotency_key,
                   "Submit at most once under this key: sent again with it, the same submission "
                   "gets the jobs it made the first time (default: a fresh key per command, "
                   "which the command itself reuses when it retries)");
  c.AddGlobal(exec);
  exec->callback([&] {
    // What follows "--" is a command even when it names a file (`berth exec -- ./train.sh`).
    for (int i = 1; i < c.argc; ++i)
      exec_flags.command = exec_flags.command || std::strcmp(c.argv[i], "--") == 0;
    c.rc = Exec(c.g, exec_flags);
  });
}

void AddUpdateCommand(CommandContext& c) {
  auto& update_flags = c.Keep<UpdateFlags>();
  auto* update = c.app.add_subcommand(
      "update", "Change a bulk group after submission: berth update --group G --max-running N");
  update->add_option("--group", update_flags.group, "The group to change")->required();
  update->add_option("--max-running", update_flags.max_running,
                     "At most N of its jobs run at once ('none': no limit); the owner or an "
                     "operator");
  c.AddGlobal(update);
  update->callback([&] { c.rc = Update(c.g, update_flags); });
}

void AddQueueCommand(CommandContext& c) {
  auto& queue_flags = c.Keep<QueueFlags>();
  auto* queue = c.app.add_subcommand(
      "queue",
      "List every active job (each bulk group as one row with counts per status) and the most "
      "recent finished ones, newest first");
  queue->add_flag("-a,--all", queue_flags.all, "Every job, finished ones included");
  queue->add_flag("--active", queue_flags.active, "Only active jobs (pending, starting, running)");
  queue->add_option("--status", queue_flags.status,
                    "Only jobs of these statuses, comma-separated (PENDING,RUNNING,FAILED,...)");
  queue
      ->add_option("--limit", queue_flags.limit,
                   "Finished jobs shown (with --json: rows per page, active and finished)")
      ->capture_default_str();
  queue->add_option("--group", queue_flags.group, "Only the jobs of this group, one row each");
  queue->add_option("--user", queue_flags.user, "Only this user's jobs");
  queue->add_option("--team", queue_flags.team, "Only this team's jobs ('-': the default team)");
  queue->add_flag("--json", queue_flags.as_json, "Machine-readable output (a JSON array of jobs)");
  c.AddGlobal(queue);
  queue->callback([&] { c.rc = Queue(c.g, queue_flags); });
}

void AddCancelCommand(CommandContext& c) {
  auto& cancel_flags = c.Keep<CancelFlags>();
  auto* cancel = c.app.add_subcommand("cancel", "Cancel jobs");
  cancel->add_option("ids", cancel_flags.ids, "Job ids");
  // No -a: in `berth queue` it means every job; cancelling them all is spelled out.
  cancel->add_flag("--all", cancel_flags.all, "All of your active jobs");
  cancel->add_flag("--all-users", cancel_flags.all_users,
                   "Every active job of every user (operators)");
  cancel->add_option("--group", cancel_flags.group, "Every job of this group");
  cancel->add_flag("--json", cancel_flags.as_json, "Machine-readable output");
  c.AddGlobal(cancel);
  cancel->callback([&] { c.rc = Cancel(c.g, cancel_flags); });
}

void AddRequeueCommand(CommandContext& c) {
  auto& requeue_ids = c.Keep<std::vector<int64_t>>();
  auto* requeue = c.app.add_subcommand(
      "requeue",
      "Stop jobs' running attempts and put them back in the queue (yours; operators: any)");
  requeue->add_option("ids", requeue_ids, "Job ids")->required();
  c.AddGlobal(requeue);
  requeue->callback([&] { c.rc = Requeue(c.g, requeue_ids); });
}

}  // namespace berth::cli
