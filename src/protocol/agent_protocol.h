// The protocol between berth's server and its agents (docs/api.md, "Agent protocol") as typed
// messages: register, the watch stream (hello, ping, launch, stop), heartbeat, reports and log
// shipping. Each message is a plain struct with Encode(), which builds exactly the JSON the wire
// carries today (same field names, types and order), and a static Decode(), which checks every
// field it reads and returns InvalidArgument naming the message and the field ("launch: 'attempt'
// must be an integer") instead of throwing or crashing on a malformed peer.
//
// Rules every Decode follows, so that servers and agents of different versions keep talking:
// - unknown fields are ignored; a field that has a default may be absent, and JSON null reads as
//   absent;
// - integers may arrive as JSON doubles without a fraction (as common/json_util.h's AsInt reads
//   them); an int field out of int range is an error;
// - authentication is not a decoding matter: `node` and `session` are only type-checked (absent
//   reads as ""), and the server's session check answers 409 "register again" as it does today.
//
// Thread-safety: plain values and pure functions; safe to use from any thread.
#pragma once

#include <boost/json.hpp>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/resources.h"
#include "common/status.h"

namespace berth::proto {

namespace json = boost::json;

// A follower among several servers (docs/ha.md) answers 503 with an error that ends in this phrase
// followed by the leader's URL; agents go there next.
inline constexpr const char* kLeaderIs = "the leader is ";

// One rank of one attempt of a job: what the agent runs, and what reports and stops name.
struct AttemptRank {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;

  auto operator<=>(const AttemptRank&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Node health (docs/operators.md "Node health"): what the agent's probes found.

// The last run of one probe on the node.
struct ProbeResult {
  std::string name;  // "disk", "cgroups", "clock", "gpus", "ecc", "xid", "health.d/NAME", ...
  bool ok = true;
  bool timed_out = false;  // killed at its timeout (then not ok)
  std::string reason;      // why it failed ("" when ok)
  int64_t at_ms = 0;       // wall-clock ms it ended
  int64_t duration_ms = 0;
  int64_t failures = 0;  // failed runs since the agent started (timeouts included)
  int64_t timeouts = 0;

  bool operator==(const ProbeResult&) const = default;
};

// Something wrong with the node (gpu < 0) or with one of its GPUs (the device index). A fault keeps
// the node drained (or the GPU unallocatable) until the probe that found it runs clean enough times
// in a row; a sticky one (a failing prolog or epilog) only until an operator clears it.
struct HealthFault {
  std::string probe;
  int gpu = -1;
  std::string reason;  // "xid 79 on GPU 2 (fell off the bus)"
  int64_t since_ms = 0;
  bool sticky = false;

  bool operator==(const HealthFault&) const = default;
};

struct NodeHealth {
  std::vector<HealthFault> faults;
  std::vector<ProbeResult> probes;

  bool operator==(const NodeHealth&) const = default;
  // The node-level faults' reasons, "; "-joined ("" when none).
  std::string NodeReason() const;
  bool NodeFaulty() const;
  // The GPUs some fault names (given to no job).
  std::set<int> FaultyGpus() const;
  // The reason of the first fault on `gpu`; "" when it has none.
  std::string GpuReason(int gpu) const;

  json::object Encode() const;
  // At most 256 faults and 256 probes; names and reasons of at most 512 bytes; gpu >= -1.
  static Result<NodeHealth> Decode(const json::value& body, std::string_view what);
};

// ---------------------------------------------------------------------------------------------
// POST /v1/agent/register

using NodeGpu = GpuDevice;  // common/resources.h: {index, type}

struct RegisterRequest {
  std::string name;     // the node's name
  std::string node_id;  // the node's secret identity, kept in the agent's state dir (>= 8 chars)
  std::string address;  // empty: the server uses the connection's remote address
  std::string pool;     // empty: the default pool
  std::map<std::string, std::string> labels;
  int64_t cpus_milli = 0;
  int64_t memory_mib = 0;
  std::vector<NodeGpu> gpus;
  std::vector<AttemptRank> running;  // what the agent runs now; the server reconciles with it
  // How the node isolates jobs (supervise/cgroup.h CgroupHost::Describe): "v2", "v1",
  // "none: REASON"; "" from an agent that does not say.
  std::string isolation;
  // Whether fractional GPU shares are enforced there (agent/mps.h): "mps", "none"; "" from an
  // agent that does not say.
  std::string sharing;
  // Whether the server may change the MIG layout of its idle GPUs in MIG mode (agent
  // --mig-reconfigure; sched/reslice.h), and why the last change failed ("" when it did not).
  bool mig_reconfigure = false;
  std::string mig_error;
  // The memory limit of a job that asks for none (MiB; 0: the agent does not say).
  int64_t job_memory_default_mib = 0;
  // Host paths the node lets containers mount (agent --container-mount): absolute, at most 64.
  std::vector<std::string> container_mounts;
  // What the agent's probes found before it registered (none: an agent that does not probe).
  std::optional<NodeHealth> health;

  bool operator==(const RegisterRequest&) const = default;

  json::object Encode() const;
  // Type-checks every field, then Validate()s. Ill-typed containers ('labels' not an object,
  // 'gpus' or 'running' not an array, a running entry without integer ids) are errors.
  static Result<RegisterRequest> Decode(const json::value& body);
  // What the server requires of a node, with the messages it has always given: a valid name
  // ("register: invalid node name 'x'"), node_id of >= 8 chars ("register: node_id is missing"),
  // cpus > 0 and memory >= 0, a valid pool or none, labels of valid names and values, and GPUs with
  // an index >= 0 and a valid type.
  Status Validate() const;
};

struct RegisterAnswer {
  std::string session;
  int64_t lease_ms = 30'000;
  int64_t heartbeat_ms = 7'500;

  bool operator==(const RegisterAnswer&) const = default;

  json::object Encode() const;
  // `session` is required and non-empty. An absent lease_ms reads as 30000 and an absent
  // heartbeat_ms as lease_ms / 4 (the agent's defaults); both must be positive.
  static Result<RegisterAnswer> Decode(const json::value& body);
};

// ---------------------------------------------------------------------------------------------
// GET /v1/agent/watch?node=N&session=S: a stream of JSON lines, one message each.

struct HelloMessage {  // {"type":"hello"}: the first line of every stream
  bool operator==(const HelloMessage&) const = default;
  json::object Encode() const;
  static Result<HelloMessage> Decode(const json::value& message);
};

struct PingMessage {  // {"type":"ping"}: keeps an idle stream alive, every 5 s
  bool operator==(const PingMessage&) const = default;
  json::object Encode() const;
  static Result<PingMessage> Decode(const json::value& message);
};

// Start one rank of one attempt of a job.
struct LaunchMessage {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  int num_nodes = 1;
  int64_t spec_id = 0;
  std::string name;  // the job's name
  std::string user;
  std::vector<std::string> node_ips;  // by rank; "" for a node the server no longer knows
  std::vector<int> gpus;              // device indices for this rank
  int64_t gpus_per_node = 0;          // whole devices (a fraction of one counts as 1)
  std::optional<int64_t> group;       // the bulk group; group_rank and num_jobs only with it
  int group_rank = 0;
  int num_jobs = 1;
  int64_t kill_grace_ms = 10'000;
  // A signal for the job's processes warn_after_ms after its run step starts (the task's
  // `signal`, before its time limit); 0: none.
  int warn_signal = 0;
  int64_t warn_after_ms = 0;
  // The SM % below which the rank's GPUs count as idle: its idle policy's `below` (docs/idle.md);
  // 0: the agent's default (5).
  int idle_below = 0;

  bool operator==(const LaunchMessage&) const = default;

  AttemptRank id() const { return {job, attempt, rank}; }
  json::object Encode() const;
  // job, attempt, rank and spec_id are required; job > 0, attempt > 0, num_nodes > 0 and
  // 0 <= rank < num_nodes; GPU indices >= 0. With 'group', 'group_rank' and 'num_jobs' are
  // required too.
  static Result<LaunchMessage> Decode(const json::value& message);
};

// Stop one rank of one attempt (SIGTERM, then SIGKILL after the kill grace).
struct StopMessage {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  std::string reason;

  bool operator==(const StopMessage&) const = default;

  AttemptRank id() const { return {job, attempt, rank}; }
  json::object Encode() const;
  // job, attempt and rank are required; reason may be absent.
  static Result<StopMessage> Decode(const json::value& message);
};

// A job spec, sent once per spec and session before the first launch that uses it: the text
// GET /v1/specs/ID answers. It saves an agent that round trip per submission; one that has not
// got it (an older server, a dropped line) fetches the spec instead.
struct SpecMessage {
  int64_t id = 0;
  std::string text;  // the spec's JSON

  bool operator==(const SpecMessage&) const = default;
  json::object Encode() const;
  // id (> 0) and text are required.
  static Result<SpecMessage> Decode(const json::value& message);
};

// An operator cleared the node's health drain (`berth undrain --force`): the agent forgets its
// faults, sticky ones too, and probes afresh.
struct HealthResetMessage {
  bool operator==(const HealthResetMessage&) const = default;
  json::object Encode() const;
  static Result<HealthResetMessage> Decode(const json::value& message);
};

// A user attached to an interactive rank's terminal (docs/api.md "Interactive sessions"): the
// agent opens GET /v1/agent/sessions/{sid} as a WebSocket and relays it to the rank's terminal
// from byte `offset` of its output on (agent/session_pump.h).
struct SessionMessage {
  std::string sid;  // one use, unguessable
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  int64_t offset = 0;

  bool operator==(const SessionMessage&) const = default;
  AttemptRank id() const { return {job, attempt, rank}; }
  json::object Encode() const;
  // Every field required: sid of 16 to 64 letters and digits, job and attempt > 0, rank and
  // offset >= 0.
  static Result<SessionMessage> Decode(const json::value& message);
};

// A user forwarding a port of a running rank (docs/api.md "Port forwarding"): the agent opens GET
// /v1/agent/sessions/{sid} as a WebSocket, connects to `port` on the node's loopback once it has
// checked that a process of the rank listens there, and relays the two (net/ws_stream.h). A type
// of its own, so that an agent too old to forward skips it instead of taking it for a terminal.
struct ForwardMessage {
  std::string sid;  // one use, unguessable
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  int port = 0;

  bool operator==(const ForwardMessage&) const = default;
  AttemptRank id() const { return {job, attempt, rank}; }
  json::object Encode() const;
  // Every field required: sid as SessionMessage's, job and attempt > 0, rank >= 0, port 1-65535.
  static Result<ForwardMessage> Decode(const json::value& message);
};

// A user running a command into a running rank (`berth exec --into`; docs/api.md "Exec into a
// job"): the agent opens GET /v1/agent/sessions/{sid} as a WebSocket, has the node supervisor run
// `command` into the rank (Launcher::OpenExecLeg) and relays the two as a terminal session.
struct ExecMessage {
  std::string sid;  // one use, unguessable
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  std::string command;  // run with bash -c
  bool tty = false;     // on a pseudo-terminal of rows x cols
  int rows = 24;
  int cols = 80;

  bool operator==(const ExecMessage&) const = default;
  AttemptRank id() const { return {job, attempt, rank}; }
  json::object Encode() const;
  // sid, job, attempt, rank and command required (sid as SessionMessage's; command 1 to
  // kMaxExecCommand bytes); tty, rows and cols optional (rows and cols 1 to 1000).
  static Result<ExecMessage> Decode(const json::value& message);
};
inline constexpr size_t kMaxExecCommand = 64 << 10;

// The server re-slices one of the node's idle GPUs in MIG mode (sched/reslice.h): the agent
// replaces its GPU instances with `profiles` (nvidia-smi's names, "1g.10gb"), then registers again
// with the new slices, or with RegisterRequest::mig_error when it could not.
struct MigLayoutMessage {
  int gpu = 0;
  std::vector<std::string> profiles;

  bool operator==(const MigLayoutMessage&) const = default;
  json::object Encode() const;
  // gpu 0-99; 1 to 7 profiles, each 1 to 32 letters, digits, ".", "+".
  static Result<MigLayoutMessage> Decode(const json::value& message);
};

using WatchMessage =
    std::variant<HelloMessage, PingMessage, LaunchMessage, StopMessage, SpecMessage,
                 HealthResetMessage, SessionMessage, ForwardMessage, ExecMessage, MigLayoutMessage>;

// One line of the watch stream: the message's JSON and "\n".
std::string EncodeWatchLine(const WatchMessage& message);

// Decodes one line of the watch stream (a trailing "\n" or "\r\n" is allowed). A line whose "type"
// this version does not know gives Code::kNotFound ("watch: unknown message type 'x'"): callers
// should skip such lines, since a newer server may send types an older agent does not know. Any
// other problem (not JSON, not an object, no "type", a bad field) gives kInvalidArgument.
Result<WatchMessage> DecodeWatchMessage(std::string_view line);

// ---------------------------------------------------------------------------------------------
// POST /v1/agent/heartbeat

// What one rank's GPUs did so far (agent/gpu_usage.h), sent with each heartbeat while it
// runs on a node that samples its GPUs. SM percentages are in tenths, so the wire carries integers.
struct GpuUsage {
  AttemptRank id;
  bool known = false;           // the last sample saw its GPUs ("utilisation unknown" if not)
  int samples = 0;              // samples that saw its GPUs' utilisation
  int mean_sm_tenths = 0;       // mean SM utilisation, in tenths of a percent
  int p95_sm = 0;               // percent
  int64_t peak_memory_mib = 0;  // the most its GPUs held at once
  int64_t idle_ms = 0;          // idle in all so far
  int64_t idle_for_ms = 0;      // the current idle spell (0: not idle now)

  bool operator==(const GpuUsage&) const = default;
  json::object Encode() const;
  static Result<GpuUsage> Decode(const json::value& entry);
};

// One GPU of the node as its last sample saw it (what the dashboard shades each GPU cell by).
struct GpuNow {
  int index = 0;
  int sm = 0;  // percent
  int64_t memory_mib = 0;

  bool operator==(const GpuNow&) const = default;
  json::object Encode() const;
  static Result<GpuNow> Decode(const json::value& entry);
};

struct HeartbeatRequest {
  std::string node;
  std::string session;
  // At most kMaxGpuUsage entries (one per rank on the node); absent when the node samples none.
  static constexpr size_t kMaxGpuUsage = 4096;
  std::vector<GpuUsage> gpu_usage;
  // The node's GPUs at its last sample (at most kMaxGpusNow; absent when it has none recent).
  static constexpr size_t kMaxGpusNow = 1024;
  std::vector<GpuNow> gpus_now;

  bool operator==(const HeartbeatRequest&) const = default;

  json::object Encode() const;
  static Result<HeartbeatRequest> Decode(const json::value& body);
};

struct HeartbeatAnswer {
  bool ok = false;
  int64_t lease_ms = 0;

  bool operator==(const HeartbeatAnswer&) const = default;

  json::object Encode() const;
  // Absent fields read as ok = false and lease_ms = 0 (today's agents do not read this answer).
  static Result<HeartbeatAnswer> Decode(const json::value& body);
};

// ---------------------------------------------------------------------------------------------
// POST /v1/agent/health: the node's health after a round of probes (and whenever a fault comes or
// goes). The answer carries the server's clock, for the agent's clock-skew probe.

struct HealthRequest {
  std::string node;
  std::string session;
  NodeHealth health;

  bool operator==(const HealthRequest&) const = default;
  json::object Encode() const;
  static Result<HealthRequest> Decode(const json::value& body);
};

struct HealthAnswer {
  int64_t now_ms = 0;  // the server's wall clock

  bool operator==(const HealthAnswer&) const = default;
  json::object Encode() const;
  static Result<HealthAnswer> Decode(const json::value& body);
};

// ---------------------------------------------------------------------------------------------
// POST /v1/agent/report

enum class ReportEvent { kAccepted, kPulling, kSettingUp, kRunning, kExited };

// "accepted", "pulling" (a container job's image is being pulled), "setting_up", "running",
// "exited".
std::string_view ReportEventName(ReportEvent event);
std::optional<ReportEvent> ParseReportEvent(std::string_view name);

// What happened to one rank of one attempt.
struct Report {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  ReportEvent event = ReportEvent::kAccepted;
  // Only meaningful with kExited, and only sent with it.
  std::optional<int> exit_code;  // none: the job never ran, or its end is unknown (JSON null)
  // "pull" (its image could not be pulled), "setup", "run", "launch" (could not start),
  // "supervisor" (the rank's supervisor died: its end is unknown, and berth's fault, not the job's)
  // or "prolog" (the node's prolog failed: the job never started, and the node is at fault).
  std::string phase = "run";
  std::string reason;
  // With kExited, what the rank used, where its supervisor measured it (docs/security.md
  // "Isolation"): peak memory in bytes and CPU time in ms. Sent only when known.
  std::optional<int64_t> peak_memory_bytes;
  std::optional<int64_t> cpu_ms;
  // With kPulling while the image downloads: how far it got ("3 layers, 182.4 MB downloaded"),
  // the job's reason meanwhile. An older server ignores it.
  std::string progress;

  bool operator==(const Report&) const = default;

  // A progress event (accepted, pulling, setting_up, running) of one rank. A "pulling" sent after
  // the pull has `reason`: the image it resolved ("REF@sha256:...").
  static Report Event(const AttemptRank& id, ReportEvent event, std::string reason = "");
  // A "pulling" that says how far the download got.
  static Report PullProgress(const AttemptRank& id, std::string progress);
  // The end of one rank: its exit code (none: it never ran, or its end is unknown), the phase it
  // ended in, and why.
  static Report Exited(const AttemptRank& id, std::optional<int> exit_code, std::string phase,
                       std::string reason);

  AttemptRank id() const { return {job, attempt, rank}; }
  // {"job","attempt","rank","event"}, plus "exit_code" (null when none), "phase" and "reason" for
  // kExited, "reason" and "progress" for kPulling when set.
  json::object Encode() const;
  // job, attempt, rank and event are required; event must be one of the five names, phase one of
  // "pull", "setup", "run", "launch", "supervisor" and "prolog" (default "run"), exit_code an
  // integer or null.
  static Result<Report> Decode(const json::value& entry);
};

// One entry of a received report batch: its id as far as it could be read (0 where not) and the
// entry itself or why it is unreadable.
struct ReportEntry {
  AttemptRank id;
  Result<Report> report;
};

// A report request as the server receives it: each entry decoded on its own, so that one bad entry
// is answered with an error and does not fail the rest.
struct ReportBatch {
  std::string node;
  std::string session;
  std::vector<ReportEntry> entries;  // in the order sent; answers go back in the same order
};

struct ReportRequest {
  std::string node;
  std::string session;
  std::vector<Report> reports;

  bool operator==(const ReportRequest&) const = default;

  json::object Encode() const;
  // Fails as a whole only when the body is not an object, 'node' or 'session' is not a string, or
  // 'reports' is not an array; a bad entry becomes an error in its ReportEntry.
  static Result<ReportBatch> Decode(const json::value& body);
};

enum class ReportAction { kOk, kStop, kError };

// "ok", "stop", "error".
std::string_view ReportActionName(ReportAction action);
std::optional<ReportAction> ParseReportAction(std::string_view name);

// The server's answer to one report: kOk (applied or nothing to do), kStop (the rank is not
// current: stop it if it runs) or kError (the entry was unreadable; `error` says why).
struct ReportResult {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  ReportAction action = ReportAction::kOk;
  std::string error;  // only with kError

  bool operator==(const ReportResult&) const = default;

  // {"job","attempt","rank","action"}, plus "error" with kError.
  json::object Encode() const;
  // job, attempt, rank and action are required.
  static Result<ReportResult> Decode(const json::value& result);
};

struct ReportAnswer {
  std::vector<ReportResult> results;  // one per report, in the order they were sent

  bool operator==(const ReportAnswer&) const = default;

  json::object Encode() const;
  // Fails if any result is unreadable: results are matched to reports by position.
  static Result<ReportAnswer> Decode(const json::value& body);
};

// ---------------------------------------------------------------------------------------------
// POST /v1/agent/logs?node&session&job&attempt&rank&offset with the raw output bytes as the body.

struct LogAppend {
  std::string node;
  std::string session;
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  int64_t offset = 0;  // where the body's bytes start in the rank's output

  bool operator==(const LogAppend&) const = default;

  // From the request's decoded query parameters. job and attempt are required; rank and offset
  // default to 0. Non-integers give "logs: 'job' must be an integer" (and so on); values out of
  // range (job > 0, attempt > 0, rank >= 0, offset >= 0) give "logs: bad job, attempt, rank or
  // offset".
  static Result<LogAppend> FromQuery(const std::map<std::string, std::string>& query);
  // "node=...&session=...&job=...&attempt=...&rank=...&offset=..." (no leading '?'), node and
  // session percent-encoded.
  std::string ToQueryString() const;
};

// The answer to a log append: the size the server holds (200), or on 409 the same with `error`
// (a gap: the agent resumes from `size`).
struct LogAppendAnswer {
  int64_t size = 0;
  std::string error;  // "" on success

  bool operator==(const LogAppendAnswer&) const = default;

  json::object Encode() const;
  // 'size' is required and >= 0.
  static Result<LogAppendAnswer> Decode(const json::value& body);
};

// Output of several ranks in one request (POST /v1/agent/logs/batch?node=N&session=S): one round
// of an agent's shipping, instead of a request per rank that printed. Each piece is as a
// LogAppend's query and body.
struct LogPiece {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  int64_t offset = 0;  // where `data` starts in the rank's output
  std::string data;

  bool operator==(const LogPiece&) const = default;
};

// A batch holds at most this many pieces and this many bytes of output in all.
inline constexpr size_t kMaxLogPieces = 1024;
inline constexpr size_t kMaxLogBatchBytes = 4 << 20;

// The batch's body: for each piece a line of JSON {"job","attempt","rank","offset","size"}, then
// `size` bytes of output.
std::string EncodeLogBatch(const std::vector<LogPiece>& pieces);
// The pieces of a body; Invalid naming the piece and what is wrong with it (a header that is not
// such a line, fewer bytes than it says, a value out of range, over the caps above).
Result<std::vector<LogPiece>> DecodeLogBatch(std::string_view body);

// The answer to a batch: each piece's LogAppendAnswer, in order ({"results": [...]}).
struct LogBatchAnswer {
  std::vector<LogAppendAnswer> results;

  json::object Encode() const;
  static Result<LogBatchAnswer> Decode(const json::value& body);
};

}  // namespace berth::proto
