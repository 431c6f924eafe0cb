// The contracts of the server's own routes and of jobs, groups, the queue, accounting, nodes and
// the terminals (docs/api.md "Health", "Jobs", "Fair share", "Nodes", "Metrics").
#include "server/http/api_docs.h"

namespace berth::api_docs {

using namespace schema;

namespace {

QueryDoc Q(const char* name, json::value s, const char* description) {
  return QueryDoc{.name = name, .schema = std::move(s), .description = description};
}

// The query of the terminals' WebSockets: which rank, and the dashboard's CSRF secret.
std::vector<QueryDoc> TerminalQuery(std::vector<QueryDoc> more) {
  more.push_back(Q("rank", Int(), "the rank (default 0)"));
  more.push_back(Q("csrf", Str(), "the session's CSRF secret, when a dashboard cookie identifies"));
  return more;
}

}  // namespace

RouteDoc Health() {
  return {
      .summary = "Whether the server answers, its version and its HA role",
      .description = "Answered on the I/O thread, to anyone.",
      .response = Obj({{"ok", Bool()}, {"version", Str()}, {"ha", Map(Any())}}, {"ok", "version"})};
}

RouteDoc Metrics() {
  return {.summary = "The server's metrics, in the Prometheus text exposition",
          .description = "docs/monitoring.md lists them. Needs a user's identity.",
          .response_type = "text/plain",
          .response = Str()};
}

RouteDoc OpenApi() {
  return {.summary = "This description of the API (OpenAPI 3.1)",
          .description = "Answered to anyone; docs/openapi.json is the same document.",
          .response = Map(Any())};
}

RouteDoc Submit() {
  json::value request =
      Closed(Obj({{"spec", Described(Map(Any()), "the job spec (docs/api.md \"Submit\")")},
                  {"yaml", Described(Str(), "a task file's text (docs/task-yaml.md)")},
                  {"num_jobs", Described(Int(), "a bulk group of this many jobs, ranks 0..N-1")},
                  {"user", Str()}}));
  request.as_object()["oneOf"] = json::array{Obj({}, {"spec"}), Obj({}, {"yaml"})};
  return {
      .summary = "Submit a job, or a bulk group of jobs",
      .description =
          "One transaction: every job exists, PENDING, when the answer arrives, or none "
          "does. An `Idempotency-Key` header makes a retry answer the first submission's "
          "jobs.",
      .request = std::move(request),
      .ok_status = 201,
      .response = Obj({{"group", Nullable(Int())}, {"jobs", Arr(Int())}, {"warnings", Arr(Str())}},
                      {"group", "jobs"}),
      .errors = {{409, "the idempotency key was used for a different submission"},
                 {422, "the job can never run on this cluster"}}};
}

RouteDoc ListJobs() {
  return {.summary = "List jobs, newest first, one page at a time",
          .query = {Q("all", Enum({"0", "1"}), "every job, not only active and recent ones"),
                    Q("limit", Int(), "finished jobs to include (0: all)"),
                    Q("page", Int(), "jobs per page (at most 2000)"),
                    Q("group", Int(), "one bulk group's jobs"),
                    Q("before", Int(), "start below this job id (the previous page's `next`)"),
                    Q("user", Str(), "one user's jobs"),
                    Q("team", Str(), "one team's jobs (`-`: the default team)"),
                    Q("status", Str(), "jobs in this status")},
          .response = Obj({{"jobs", Arr(Ref("Job"))}, {"more", Bool()}, {"next", Nullable(Int())}},
                          {"jobs", "more", "next"})};
}

RouteDoc Cancel() {
  return {.summary = "Cancel jobs: by id, a group, all of yours, or everyone's (operators)",
          .request = Closed(Obj({{"ids", Arr(Int())},
                                 {"all", Bool()},
                                 {"all_users", Bool()},
                                 {"group", Int()},
                                 {"reason", Str()}})),
          .response = Obj({{"cancelled", Arr(Int())},
                           {"already_finished", Arr(Int())},
                           {"not_found", Arr(Int())},
                           {"forbidden", Arr(Int())}},
                          {"cancelled", "already_finished", "not_found", "forbidden"})};
}

RouteDoc ShowJob() {
  return {.summary = "One job, with its spec, events, attempts and why it waits",
          .response = Ref("JobDetail")};
}

RouteDoc Requeue() {
  return {.summary = "Stop a job's running attempt and put it back in the queue",
          .response = Obj({{"id", Int()}, {"status", Str()}}, {"id", "status"}),
          .errors = {{409, "the job is queued already or has ended"}}};
}

RouteDoc Logs() {
  return {.summary = "A job's output bytes from an offset (long poll with wait_ms)",
          .description =
              "Headers: X-Berth-Offset (ask for this next), X-Berth-Attempt (the attempt read), "
              "X-Berth-Latest-Attempt (the job's latest), X-Berth-Status, X-Berth-Done: 1 once "
              "the job ended and everything was sent.",
          .query = {Q("offset", Int(), "the byte to start at"), Q("rank", Int(), "the rank"),
                    Q("attempt", Int(), "the attempt (0: the current one)"),
                    Q("wait_ms", Int(), "hold the request until output arrives (at most 60000)"),
                    Q("timestamps", Enum({"0", "1"}), "prefix each line with its arrival time")},
          .response_type = "application/octet-stream",
          .response = Str()};
}

RouteDoc ShowGroup() {
  return {.summary = "A bulk group's size, owner, cap and counts per status",
          .response = Ref("Group")};
}

RouteDoc UpdateGroup() {
  return {.summary = "Change a bulk group's cap on running jobs (its owner or operators)",
          .request = Closed(Obj({{"max_running", Nullable(Int())}}, {"max_running"})),
          .response = Ref("Group")};
}

RouteDoc Queue() {
  return {.summary = "What `berth queue` prints: active jobs and groups, then recent finished",
          .query = {Q("limit", Int(), "finished rows (default 50, at most 2000)"),
                    Q("active_cap", Int(), "active rows (default 1000, at most 10000)"),
                    Q("user", Str(), "one user's jobs"), Q("team", Str(), "one team's jobs")},
          .response = Obj({{"rows", Arr(Ref("QueueRow"))},
                           {"active_not_shown", Int()},
                           {"finished_shown", Int()},
                           {"more_finished", Bool()}},
                          {"rows", "active_not_shown", "finished_shown", "more_finished"})};
}

RouteDoc Usage() {
  json::value row = Obj({{"user", Nullable(Str())},
                         {"team", Nullable(Str())},
                         {"gpu_seconds", Map(Num())},
                         {"whole_gpu_seconds", Map(Num())},
                         {"cpu_seconds", Num()},
                         {"jobs", Int()},
                         {"mean_wait_s", Num()},
                         {"preemptions", Int()},
                         {"used_cpu_seconds", Num()},
                         {"cpu_efficiency", Nullable(Num())},
                         {"memory_efficiency", Nullable(Num())},
                         {"sampled_gpu_seconds", Num()},
                         {"gpu_efficiency", Nullable(Num())},
                         {"idle_gpu_seconds", Num()}},
                        {"gpu_seconds", "cpu_seconds", "jobs"});
  return {.summary = "Usage by user or team over a window (`berth usage`)",
          .query = {Q("since", Str(), "a duration back from now (7d) or an RFC 3339 time"),
                    Q("until", Str(), "likewise (default now)"),
                    Q("by", Enum({"user", "team"}), "rows per user (default) or team")},
          .response = Obj({{"rows", Arr(std::move(row))},
                           {"since", Time()},
                           {"until", Time()},
                           {"by", Enum({"user", "team"})}},
                          {"rows", "since", "until", "by"})};
}

RouteDoc Teams() {
  return {.summary = "Every team's quota, borrow limit, weight, use and usage",
          .response = Obj({{"teams", Arr(Ref("Team"))}}, {"teams"})};
}

RouteDoc Nodes() {
  return {
      .summary = "Every node: capacity, what is free, devices, health",
      .query = {Q("holders", Enum({"0", "1"}), "add each device's jobs (what berth top draws)")},
      .response = Obj({{"nodes", Arr(Ref("Node"))}}, {"nodes"})};
}

RouteDoc Drain(bool drain) {
  if (drain) {
    return {.summary = "Drain a node: it takes no new job (operators)", .response = Ref("Node")};
  }
  return {.summary = "Lift an operator's drain; with force=1 also clear health faults (operators)",
          .query = {Q("force", Enum({"0", "1"}), "also clear the node's open health faults")},
          .response = Ref("Node")};
}

RouteDoc Attach() {
  return {.summary = "The terminal of a running interactive job's rank (WebSocket, berth.v1)",
          .query = TerminalQuery({Q("offset", Int(), "the byte of the rank's output to start at")}),
          .websocket = true,
          .errors = {{409, "the job is not interactive, or not RUNNING yet"}}};
}

RouteDoc ExecInto() {
  return {.summary = "Run a command inside a running job's rank (WebSocket, berth.v1)",
          .query = TerminalQuery({Q("command", Str(), "the command (bash -c)"),
                                  Q("tty", Enum({"0", "1"}), "on a pseudo-terminal"),
                                  Q("rows", Int(), "its rows"), Q("cols", Int(), "its columns")}),
          .websocket = true,
          .errors = {{409, "the job is not RUNNING yet"}}};
}

RouteDoc PortForward() {
  return {.summary = "One TCP connection to a port a running job listens on (WebSocket)",
          .description = "Without `Upgrade: websocket`: a check that reaches nothing.",
          .query = TerminalQuery({Q("port", Int(), "the port (1-65535)")}),
          .response = Obj({{"job", Int()}, {"rank", Int()}, {"node", Str()}, {"port", Int()}},
                          {"job", "rank", "node", "port"}),
          .websocket = true,
          .errors = {{409, "the job is not RUNNING yet"}}};
}

}  // namespace berth::api_docs
