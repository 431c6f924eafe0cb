// Store: berth's durable state (jobs, their specs, attempts and state history, nodes) behind one
// narrow interface, so that the embedded SQLite backend and a later PostgreSQL one are
// interchangeable.
//
// Contract: every method is atomic (one transaction) and durable when it returns ok. Methods return
// a non-ok Status on I/O or database failure and never throw. Implementations are thread-safe:
// methods may be called from any thread; they serialize internally.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_status.h"
#include "common/resources.h"
#include "common/role.h"
#include "common/status.h"

namespace berth {

// One job as stored: the columns `berth queue` and the scheduler need, without the spec text.
struct JobRow {
  int64_t id = 0;
  int64_t spec_id = 0;
  std::optional<int64_t> group;  // bulk submission group, or none
  std::optional<int> rank;       // rank in its group
  std::string name;
  std::string user;
  int priority = 0;
  int num_nodes = 1;
  ResourceRequest resources;  // per node
  JobStatus status = JobStatus::kPending;
  std::string reason;  // why it is pending, or why it ended
  int attempt = 0;     // 0 until first placed; +1 on every placement (the current or last attempt)
  // Why earlier attempts went back to the queue: failures restarted by the job's retry policy,
  // preemptions (and reclaims), and other requeues (node lost, `berth requeue`).
  int restarts = 0;
  int preemptions = 0;
  int requeues = 0;
  std::optional<TimeMs> not_before;  // a restart's backoff: not placed before this wall time
  DurationMs run_ms = 0;             // running time of the earlier attempts, summed
  TimeMs submitted_at = 0;
  std::optional<TimeMs> started_at;  // when the current attempt started RUNNING
  std::optional<TimeMs> ended_at;
  std::optional<int> exit_code;
  Placement placement;  // current/last attempt's placement; empty while pending
};

// One state change, for `berth show`.
struct JobEvent {
  TimeMs at = 0;
  JobStatus status = JobStatus::kPending;
  int attempt = 0;
  std::string reason;
  std::string by;  // the user whose request made the change ("" when berth made it by itself)
};

// One attempt of a job: where it ran and how it ended.
struct AttemptRow {
  int attempt = 1;
  Placement placement;
  TimeMs placed_at = 0;
  std::optional<TimeMs> ended_at;
  std::optional<JobStatus> outcome;  // terminal status of this attempt, or PENDING when requeued
  std::string reason;
  std::optional<int> exit_code;
  // What its ranks used, as their supervisors measured it (docs/security.md "Isolation"): the
  // highest peak memory of a rank (its cgroup's, page cache included; else its largest process's
  // RSS) and the CPU time of all ranks. None: not measured (an older agent, or not ended).
  std::optional<int64_t> peak_memory_bytes;
  std::optional<int64_t> cpu_ms;
};

struct NodeRow {
  std::string name;
  std::string node_id;  // secret identity kept in the agent's state dir
  NodeState state = NodeState::kUp;
  bool draining = false;
  std::string pool;
  std::map<std::string, std::string> labels;
  std::string address;
  MilliCpu cpus = 0;
  Mib memory = 0;
  std::vector<GpuDevice> gpus;
  TimeMs registered_at = 0;
  TimeMs last_seen = 0;
  std::optional<TimeMs> down_since;
};

// A user's rights, as an admin set them. A user without a row has the defaults.
struct UserRow {
  std::string name;
  Role role = Role::kUser;
  int max_priority = 0;                 // the highest priority the user may submit at
  std::string team;                     // "" when none
  std::optional<int> max_running_gpus;  // whole GPUs (any type) its running jobs may hold at once
  std::optional<int> max_pending_jobs;  // jobs it may have waiting at once; more are refused
  TimeMs updated_at = 0;
  std::string updated_by;
};

// A team's claim on the cluster's GPUs (docs/fair-share.md). Users belong to one team each (their
// UserRow::team); users without one are in the default team, which has no row unless an admin made
// one ("default").
struct TeamRow {
  std::string name;
  // GPU type -> milli-GPUs guaranteed to the team (its nominal quota). A type without an entry has
  // a quota of 0: every GPU of it the team uses is borrowed.
  std::map<std::string, MilliGpu> quota;
  // GPU type -> milli-GPUs the team may use beyond its quota while they are idle. A type without an
  // entry may be borrowed without limit.
  std::map<std::string, MilliGpu> borrow_limit;
  double weight = 1.0;  // fair-share weight: usage is divided by it
  TimeMs updated_at = 0;
  std::string updated_by;
};

// What one attempt of a job used, from its placement to its end; written with the attempt's end
// and rolled up by hour (the store keeps the rollup, not these records).
struct UsageRecord {
  std::string user;
  std::string team;        // the user's team when the attempt ended ("" = the default team)
  std::string gpu_type;    // "" when the job has no GPU
  MilliGpu gpu_milli = 0;  // over all its nodes
  MilliCpu cpu_milli = 0;  // over all its nodes
  TimeMs placed_at = 0;
  TimeMs ended_at = 0;
  DurationMs wait_ms = 0;  // how long this attempt waited in the queue before it was placed
  bool job_ended = false;  // the attempt ended the job (it counts in `jobs`)
  bool preempted = false;  // the attempt was ended by a preemption or a reclaim
  // What the attempt's ranks used, where every rank's supervisor measured it (docs/security.md,
  // "Isolation"): CPU time over all ranks and the largest rank's peak memory. Counted, with the
  // allotment they are measured against, in the hour containing ended_at.
  std::optional<int64_t> cpu_used_ms;
  std::optional<int64_t> peak_memory_bytes;
  int64_t memory_mib = 0;  // each rank's resources.memory; 0: none asked
  // What its GPUs did where its nodes sampled them (docs/idle.md): the mean SM utilisation over
  // the attempt (percent; none: not sampled) and how long all of them sat idle. Counted, with the
  // GPU time they are measured against, in the hour containing ended_at.
  std::optional<double> gpu_mean_sm;
  DurationMs gpu_idle_ms = 0;
};

// `berth usage`: totals per user or team over [since, until).
struct UsageQuery {
  TimeMs since = 0;
  TimeMs until = 0;
  bool by_team = false;
};

struct UsageRow {
  std::string name;                           // the user or the team ("" = the default team)
  std::map<std::string, double> gpu_seconds;  // by GPU type
  double cpu_seconds = 0;
  int64_t jobs = 0;         // jobs that ended in the window
  double wait_seconds = 0;  // summed over the attempts placed in the window
  int64_t waits = 0;        // attempts placed in the window
  int64_t preemptions = 0;  // attempts preempted (or reclaimed) in the window
  // Efficiency of the attempts that ended in the window with measured usage (like Slurm's seff):
  // CPU time used against CPUs x time allotted, and peak memory x time against resources.memory x
  // time (attempts that asked for memory). Unmeasured attempts count in neither.
  double used_cpu_seconds = 0;
  double measured_cpu_seconds = 0;  // CPUs x time allotted to the measured attempts
  double peak_memory_mib_seconds = 0;
  double asked_memory_mib_seconds = 0;
  // Sampled GPUs of the attempts that ended in the window (GPU-seconds): their time, that time
  // weighted by SM utilisation (GPU efficiency: busy over sampled), and their idle time.
  double gpu_sampled_seconds = 0;
  double gpu_busy_seconds = 0;
  double idle_gpu_seconds = 0;
};

// One hour of one user's use of one GPU type (for rebuilding decayed fair-share usage at start).
struct UsageBucket {
  TimeMs hour = 0;  // the hour's start
  std::string user;
  std::string team;
  std::string gpu_type;  // "" for CPU-only use
  double gpu_seconds = 0;
  double cpu_seconds = 0;
  double idle_gpu_seconds = 0;  // of the attempts that ended in the hour (docs/idle.md)
};

// A user's bearer token. Only a hash of the secret is kept.
struct TokenRow {
  std::string name;  // unique, chosen by the admin or generated
  std::string user;
  std::string hash;  // "sha256:<hex>" of the secret
  TimeMs created_at = 0;
  std::optional<TimeMs> expires_at;  // none: never expires
  std::optional<TimeMs> revoked_at;
  std::string created_by;
  // A node credential's (or join token's) local users: whom the node may speak for through its
  // user socket. "" no one, "*" any user but an admin, else names separated by ','.
  std::string speaks_for;
};

// One administrative action (drain, tokens, users), for `berth admin audit`. Actions on jobs are
// recorded as their events instead (JobEvent::by).
struct AuditRow {
  int64_t seq = 0;  // assigned by the store, ascending
  TimeMs at = 0;
  std::string by;
  std::string action;  // "drain", "undrain", "token create", "token revoke", "user set", ...
  std::string target;  // the node, token or user acted on
  std::string detail;
};

// A user's default sink for notifications (docs/notifications.md): an e-mail address or a webhook.
// One per (user, kind). The webhook's secret signs its deliveries; the API never shows it again.
struct NotifySinkRow {
  std::string user;
  std::string kind;    // "email" or "webhook"
  std::string target;  // the address or the URL
  std::string secret;  // webhook: the signing secret
  std::string format;  // webhook: "json" (berth's event) or "slack" (Slack-compatible text too)
  // The events a job without a `notify:` of its own is notified of ("" = none: only jobs that
  // ask; spec/notify_events.h).
  std::string events;
  TimeMs updated_at = 0;
};

// One notification to deliver, written in the transaction of the change it tells of (the outbox;
// docs/notifications.md). One row per (event, sink); a second write of the same pair is ignored.
struct NoticeRow {
  int64_t seq = 0;       // assigned by the store, ascending
  std::string event_id;  // stable for the event: "job-42.3.end", "group-7.end" (receivers dedupe)
  std::string user;      // whom it is for
  std::string sink;      // "email" or "webhook" (the user's sink of that kind at delivery)
  std::string type;      // started, end, fail, oom, preempted, pending, summary, test
  int64_t job = 0;       // the job (a group's summary: its first job)
  std::optional<int64_t> group;
  TimeMs created_at = 0;
  std::string payload;            // the event's JSON
  std::string state = "pending";  // pending, sent, failed
  int attempts = 0;
  TimeMs next_at = 0;  // not tried before
  std::string last_error;
  std::optional<TimeMs> sent_at;
};

// A delivery tried: its new state.
struct NoticeUpdate {
  int64_t seq = 0;
  std::string state;
  int attempts = 0;
  TimeMs next_at = 0;
  std::string last_error;
  std::optional<TimeMs> sent_at;
};

// An operator's reservation (docs/reservations.md): its definition as the server's
// server/reservations/reservation.h encodes it (JSON), by name.
struct ReservationRow {
  std::string name;
  std::string spec;  // JSON
  TimeMs created_at = 0;
  TimeMs updated_at = 0;
  std::string updated_by;
};

// A new submission: one spec shared by `count` jobs.
struct Submission {
  std::string spec_json;
  std::string name;
  std::string user;
  int priority = 0;
  int num_nodes = 1;
  ResourceRequest resources;
  int count = 1;
  bool as_group = false;           // true: create a group; jobs get ranks 0..count-1
  std::optional<int> max_running;  // the group's (as_group only)
  TimeMs now = 0;
  // The client's idempotency key ("": none). Unique per user: FindSubmission(user, key) returns
  // this submission's result until kSubmitKeyRetentionMs after it was written.
  std::string key;
  std::string fingerprint;  // what was submitted under `key` (a digest), to tell a retry from reuse
};

// How long a submission's idempotency key is kept: a client retries within seconds or minutes.
inline constexpr TimeMs kSubmitKeyRetentionMs = 24LL * 3600 * 1000;

struct SubmitResult {
  std::optional<int64_t> group;
  int64_t spec_id = 0;
  std::vector<int64_t> ids;  // consecutive, ascending
};

// A submission recorded under an idempotency key.
struct KeyedSubmission {
  SubmitResult result;
  std::string fingerprint;
};

// Writes that must land together (one scheduling pass, one agent report batch).
struct Batch {
  std::vector<JobRow> jobs;                              // replace the row with the same id
  std::vector<std::pair<int64_t, JobEvent>> events;      // (job id, event) appended
  std::vector<std::pair<int64_t, AttemptRow>> attempts;  // (job id, attempt) inserted or replaced
  std::vector<NodeRow> nodes;                            // inserted or replaced by name
  std::vector<UserRow> users;                            // inserted or replaced by name
  std::vector<TokenRow> tokens;                          // inserted or replaced by name
  std::vector<AuditRow> audit;                           // appended (seq is assigned)
  std::vector<TeamRow> teams;                            // inserted or replaced by name
  std::vector<UsageRecord> usage;                        // added to the hourly rollup
  // (group, max_running) set on an existing group; none: no limit.
  std::vector<std::pair<int64_t, std::optional<int>>> group_limits;
  std::vector<NotifySinkRow> notify_sinks;  // inserted or replaced by (user, kind)
  // (user, kind) sinks removed
  std::vector<std::pair<std::string, std::string>> notify_sink_deletes;
  std::vector<NoticeRow> notices;  // appended (seq assigned), unless (event_id, sink) exists
  std::vector<ReservationRow> reservations;      // inserted or replaced by name
  std::vector<std::string> reservation_deletes;  // by name
  bool empty() const {
    return jobs.empty() && events.empty() && attempts.empty() && nodes.empty() && users.empty() &&
           tokens.empty() && audit.empty() && teams.empty() && usage.empty() &&
           group_limits.empty() && notify_sinks.empty() && notify_sink_deletes.empty() &&
           notices.empty() && reservations.empty() && reservation_deletes.empty();
  }
};

struct JobQuery {
  bool all = false;  // include every finished job
  int limit = 0;     // 0 = no limit; applies to finished jobs when !all, to everything when all
  int page = 0;      // 0 = no limit; when !all: at most this many rows in all (a page)
  std::optional<int64_t> group;
  std::optional<int64_t> before_id;  // page: only jobs with id < before_id
  bool finished_only = false;        // only finished jobs (the newest `limit`; `all` ignored)
  bool ungrouped_only = false;       // only jobs that are not in a bulk group
};

class Store {
 public:
  virtual ~Store() = default;

  // For each submission, inserts the spec, the group (when as_group) and `count` PENDING jobs with
  // their first event — all submissions in one transaction (the server's group commit): either all
  // of them exist afterwards or none does. Results are in the order of `submissions`.
  virtual Result<std::vector<SubmitResult>> SubmitMany(
      const std::vector<Submission>& submissions) = 0;
  // SubmitMany of one.
  Result<SubmitResult> Submit(const Submission& submission) {
    auto results = SubmitMany({submission});
    if (!results.ok()) return results.status();
    return std::move(results->front());
  }

  // The submission `user` recorded under idempotency key `key` (none when there is none, or it
  // expired). A keyed submission's key is written in its SubmitMany transaction; expired keys are
  // deleted there too.
  virtual Result<std::optional<KeyedSubmission>> FindSubmission(const std::string& user,
                                                                const std::string& key) = 0;

  // Applies every write of `batch` in one transaction.
  virtual Status Commit(const Batch& batch) = 0;

  // Jobs that are not terminal (PENDING, STARTING, SETTING_UP, RUNNING), ascending id. Used at
  // start-up.
  virtual Result<std::vector<JobRow>> LoadActiveJobs() = 0;

  // For listings: active jobs plus finished ones per `query`, newest (highest id) first.
  virtual Result<std::vector<JobRow>> ListJobs(const JobQuery& query) = 0;

  // Specific jobs by id (ascending). Unknown ids are simply absent from the result.
  virtual Result<std::vector<JobRow>> GetJobs(const std::vector<int64_t>& ids) = 0;
  virtual Result<std::vector<JobEvent>> GetEvents(int64_t job) = 0;
  virtual Result<std::vector<AttemptRow>> GetAttempts(int64_t job) = 0;

  // The spec text of a submission; NotFound if unknown.
  virtual Result<std::string> GetSpec(int64_t spec_id) = 0;

  // The number of jobs of a bulk group (its BERTH_NUM_JOBS); NotFound if unknown.
  virtual Result<int> GroupSize(int64_t group) = 0;
  // For each group: how many of its jobs are in each status.
  virtual Result<std::map<int64_t, std::map<JobStatus, int>>> GroupStatusCounts(
      const std::vector<int64_t>& groups) = 0;
  // Facts about bulk groups: (first job, last job, owner, max_running); NotFound if unknown.
  struct GroupInfo {
    int64_t first_job = 0;
    int64_t last_job = 0;  // a group's jobs are first_job..last_job
    std::string user;
    std::optional<int> max_running;
  };
  virtual Result<GroupInfo> GetGroup(int64_t group) = 0;
  // Every group with a max_running that has an active job: group -> max_running.
  virtual Result<std::map<int64_t, int>> LoadGroupLimits() = 0;

  virtual Result<std::vector<NodeRow>> LoadNodes() = 0;

  // Every user row and every token (revoked and expired ones included), ascending name.
  virtual Result<std::vector<UserRow>> LoadUsers() = 0;
  virtual Result<std::vector<TokenRow>> LoadTokens() = 0;
  // The newest `limit` audit rows, oldest first.
  virtual Result<std::vector<AuditRow>> ListAudit(int limit) = 0;
  virtual Result<std::vector<TeamRow>> LoadTeams() = 0;

  // Usage is kept as an hourly rollup: a record's GPU and CPU time is split over the hours its
  // attempt spanned; its job count and preemption go to the hour it ended in, its wait to the hour
  // it was placed in. A query covers the whole hours that overlap [since, until) and costs
  // O(hours x users), not O(attempts). Rows by name, ascending.
  virtual Result<std::vector<UsageRow>> QueryUsage(const UsageQuery& query) = 0;
  // Every bucket of an hour that starts at or after `since`, oldest first.
  virtual Result<std::vector<UsageBucket>> LoadUsageBuckets(TimeMs since) = 0;

  // Notifications (docs/notifications.md). Every sink, by (user, kind).
  virtual Result<std::vector<NotifySinkRow>> LoadNotifySinks() = 0;
  // Every reservation, by name.
  virtual Result<std::vector<ReservationRow>> LoadReservations() = 0;
  // At most `limit` pending notices due at `now` (next_at <= now), oldest first.
  virtual Result<std::vector<NoticeRow>> DueNotices(TimeMs now, int limit) = 0;
  // Records what a delivery did.
  virtual Status UpdateNotice(const NoticeUpdate& update) = 0;
  // The newest `limit` notices of `user` ("": everyone's), or of job `job` when given; newest
  // first. Notices sent or failed more than `kNoticeRetentionMs` ago are deleted as new ones come.
  virtual Result<std::vector<NoticeRow>> ListNotices(const std::string& user,
                                                     std::optional<int64_t> job, int limit) = 0;
};

// How long a delivered (or failed) notice is kept for `berth notify ls` and `berth show`.
inline constexpr TimeMs kNoticeRetentionMs = 7LL * 24 * 3600 * 1000;

// Opens (creating if needed) the SQLite database at `path` in WAL mode and migrates its schema.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

// Opens the store at `location`: "sqlite:PATH" (the embedded default), or a PostgreSQL URL
// ("postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAMS]", libpq's syntax; PgStore). Anything else
// is kInvalidArgument naming the accepted forms.
Result<std::unique_ptr<Store>> OpenStore(const std::string& location);

}  // namespace berth
