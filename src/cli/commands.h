// The commands behind `berth`'s subcommands. Each returns the process exit status and prints errors
// as "berth: ..." on stderr. Not thread-safe (one command per process).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/connection.h"
#include "spec/job_spec.h"

namespace berth::cli {

struct GlobalFlags {
  std::string server;
  std::string token;
  std::string self_exe;
};

// --- daemons (parsed here, run by src/exe/daemons.cpp) ---
struct ServerFlags {
  std::string listen = "127.0.0.1:8765";
  std::string state_dir;
  std::string store;                // "" = sqlite:STATE_DIR/berth.db
  std::string leader_lease = "3s";  // with a PostgreSQL store (docs/ha.md)
  std::string advertise;            // the URL followers point clients at; "" = the listener's
  std::string log_retention =
      "30d";  // with a PostgreSQL store: output of jobs ended longer ago goes
  // Uploaded blobs no live job uses and nobody sent or asked about for this long go; "0": kept.
  std::string upload_retention = "7d";
  std::string upload_piece_retention = "6h";
  double upload_quota_gib = 20;    // per user; 0: none
  double upload_min_free_gib = 1;  // the upload store's disk keeps this free
  int max_connections = 0;         // 0: from the open-file limit
  int max_connections_per_peer = 512;
  std::string node_retention = "7d";
  std::string token;
  std::string token_file;
  bool require_token = false;
  bool allow_root_jobs = false;
  bool owner_only = false;
  std::string unix_socket;
  bool tls = false;
  std::string tls_cert;
  std::string tls_key;
  std::string lease = "30s";
  std::string kill_grace = "10s";
  std::string interactive_time_limit = "24h";
  std::string interactive_idle_limit = "0";
  std::string idle_policy;  // "below=5,warn=10m,act=30m,action=requeue"; empty: none
  std::vector<std::string> team_idle_policies;  // "TEAM=POLICY" or "TEAM=none"
  std::vector<std::string> pool_idle_policies;  // "POOL=POLICY" or "POOL=none"
  std::string interactive_connect_timeout = "10s";
  std::string starvation = "10m";
  std::string fair_share_half_life = "7d";
  std::string gpu_weights;  // "A100=2,T4=0.5"
  double idle_charge = 0;   // fair share: an idle GPU-second costs this much more (docs/idle.md)
  std::string admission_charge = "1h";
  int reclaim_limit = 3;
  std::string reclaim_window = "1m";
  std::string topology_levels;  // "block,rack,switch": node label keys, coarse to fine
  // Notifications (docs/notifications.md).
  std::string smtp;                    // HOST:PORT of the mail relay; "": no mail
  std::string smtp_from;               // the sender address
  std::string smtp_starttls = "auto";  // auto, require, off
  std::string smtp_ca_file;
  std::string webhook_ca_file;
  std::string notify_retry_cap = "10m";
  std::string notify_give_up = "24h";
  int notify_rate = 60;  // deliveries a minute per user
  int threads = 0;
  std::string url_file;
  std::string pid_file;
};

struct AgentFlags {
  std::string server;
  std::string join_token_file;  // a join token, exchanged for the node's credential at first start
  std::string user_socket;      // "": STATE_DIR/berth.sock; "-": none
  std::string tls_fingerprint;
  std::string token;
  std::string token_file;
  std::string name;
  std::string state_dir;
  std::string gpus;
  std::string mig;
  bool mig_reconfigure = false;
  std::string gpu_topology;                 // a file in nvidia-smi topo -m's format
  std::string gpu_sample_interval = "10s";  // how often GPU utilisation is sampled; 0: never
  std::string cpus;
  std::string memory;
  std::string pool;
  std::vector<std::string> labels;
  std::string address;
  std::string pid_file;
  int hollow = 0;                  // > 0: simulate this many nodes without processes
  std::string isolation = "auto";  // "auto" or "off"
  bool require_isolation = false;
  int64_t job_pids_max = 16384;
  std::string job_memory_default;  // GiB; "": the node's memory
  std::string gpu_device_dir = "/dev";
  std::string containers = "auto";  // auto | off
  std::string podman;               // "" = podman on PATH
  std::vector<std::string> insecure_registries;
  std::vector<std::string> container_mounts;
  int pull_retries = 3;
  int image_tag_ttl = 60;  // seconds
  // Node health (agent/health_probes.h HealthSettings); durations as ParseDuration reads them.
  std::string health = "on";  // "on" or "off"
  std::string health_interval = "30s";
  std::string health_timeout = "30s";
  int health_clean_runs = 2;
  std::string health_dir = "/etc/berth/health.d";
  std::string health_idle_dir = "/etc/berth/health-idle.d";
  std::string health_idle_interval = "1h";
  std::string health_idle_timeout = "10m";
  std::string nvidia_smi = "nvidia-smi";
  std::string kernel_log;  // "": /dev/kmsg when readable
  std::string xid_ignore = "13,31,43,45,68,69,94";
  std::string xid_node = "74";
  int64_t min_free_disk_mib = 512;
  std::string max_clock_skew = "10s";
  std::string prolog_dir = "/etc/berth/prolog.d";
  std::string epilog_dir = "/etc/berth/epilog.d";
  std::string hook_timeout = "60s";
};

// --- local cluster (local_cmds.cpp) ---
int LocalUp(const LocalClusterOptions& options, const std::string& self_exe);
int LocalDown(const std::string& self_exe);

// The names of the small jobs `berth image ls|rm|prefetch` start ("berth-image-ls"): once they
// ended, `berth queue` leaves them out (--all lists them).
inline constexpr std::string_view kImageJobPrefix = "berth-";
int LocalStatus(bool as_json);

// --- jobs (job_cmds.cpp) ---
struct ExecFlags {
  std::vector<std::string> args;  // a task YAML, or a command
  bool command = false;           // args came after "--": a command, never a task file
  bool detach = false;
  bool as_json = false;
  std::string name;
  std::string idle_ok;  // exempt from the idle policy, saying why
  std::string notify;   // "end,fail,pending>2h": the events its owner is told of
  std::string gpus;
  std::string cpus;
  std::string memory;
  std::string cpu_binding;
  std::vector<std::string> envs;
  std::optional<int> num_jobs;
  std::optional<int> priority;
  std::optional<int> num_nodes;
  std::string workdir;
  std::string pool;
  std::string reservation;  // --reservation
  std::string topology;     // --topology: placement.topology (LEVEL, or required=,preferred=)
  std::string image;        // resources.image_id without "docker:"
  std::string pull;         // container.pull: missing | always | never
  std::vector<std::string> after;  // dependencies, added to the task file's depends_on
  std::optional<int> max_running;
  std::string idempotency_key;  // "": a fresh one
  bool interactive = false;     // -i/-t: on a terminal, attached to once it runs
  std::string time_limit;       // --time: as the YAML's time_limit
  std::optional<int64_t> into;  // --into JOB: run the command inside that running job
  int rank = 0;                 // --rank: which of its nodes
};
int Exec(const GlobalFlags& g, const ExecFlags& flags);
// `berth exec --into JOB [--rank R] [-it] -- CMD` (cli/attach_cmds.cpp): CMD runs inside the
// running job's rank (its user, cgroup, work dir and environment); its exit code.
int ExecInto(const GlobalFlags& g, const ExecFlags& flags);

struct UpdateFlags {
  std::optional<int64_t> group;
  std::string max_running;  // a number, or "none"
};
// Changes a bulk group after submission (its max_running).
int Update(const GlobalFlags& g, const UpdateFlags& flags);

struct WaitFlags {
  std::vector<int64_t> ids;
  std::optional<int64_t> group;
  bool as_json = false;
};
// Waits until the jobs (or every job of the group) have ended, showing their progress: a line
// redrawn in place on a terminal, a line per change otherwise, JSON lines with --json. Returns 0
// when every one SUCCEEDED, 1 otherwise.
int Wait(const GlobalFlags& g, const WaitFlags& flags);

struct TopFlags {
  double interval = 2;  // seconds between frames
  bool once = false;    // print one frame and return
};
// A live full-screen view of the nodes' GPU maps and the queue; `q` quits.
int Top(const GlobalFlags& g, const TopFlags& flags);

struct QueueFlags {
  bool all = false;
  bool active = false;  // only active jobs
  std::string status;   // only these statuses, comma-separated
  bool as_json = false;
  int limit = 50;
  std::optional<int64_t> group;
  std::string user;  // only this user's jobs
  std::string team;  // only this team's jobs ("-": the default team)
};
int Queue(const GlobalFlags& g, const QueueFlags& flags);

struct LogsFlags {
  std::optional<int64_t> id;
  bool no_follow = false;
  bool follow = false;  // -f: the default, said explicitly
  std::optional<int> rank;
  int attempt = 0;
  std::optional<int64_t> tail;   // only the last N lines of what is there, then what comes
  std::optional<int64_t> group;  // every job of a bulk group, one after another
  bool timestamps = false;       // each line prefixed by when it reached the server
};
int Logs(const GlobalFlags& g, const LogsFlags& flags);

struct CancelFlags {
  std::vector<int64_t> ids;
  bool all = false;
  bool all_users = false;
  std::optional<int64_t> group;
  bool as_json = false;
};
int Cancel(const GlobalFlags& g, const CancelFlags& flags);
int Requeue(const GlobalFlags& g, const std::vector<int64_t>& ids);
int Show(const GlobalFlags& g, int64_t id, bool as_json);

// --- nodes (node_cmds.cpp) ---
// `only`: one node's detail (its health and probes); "": all nodes.
int Nodes(const GlobalFlags& g, bool as_json, const std::string& only);
int Drain(const GlobalFlags& g, const std::string& node, bool drain, bool force);

// --- identity and administration (admin_cmds.cpp) ---
int Whoami(const GlobalFlags& g, bool as_json);
// berth status (status_cmds.cpp): each server of the list, its role and health; the leader.
int ServerStatus(const GlobalFlags& g, bool as_json);
// berth dashboard: prints a one-time login link to the web dashboard for the caller.
int Dashboard(const GlobalFlags& g, bool as_json);
// A one-time dashboard login link from the server `conn` reaches (its TCP URL when reached over
// the unix socket).
Result<std::string> DashboardLink(Connection& conn);
struct LoginFlags {
  std::string token_file;
  std::string fingerprint;  // pin this instead of the one the server presents
  bool trust = false;       // pin the presented one without asking
};
int Login(const GlobalFlags& g, const LoginFlags& flags);
struct TokenCreateFlags {
  std::string user;
  std::string name;
  std::string role;
  std::string expires;
  bool as_json = false;
};
int TokenCreate(const GlobalFlags& g, const TokenCreateFlags& flags);
int TokenList(const GlobalFlags& g, bool as_json);
int TokenRevoke(const GlobalFlags& g, const std::string& name);
struct JoinTokenFlags {
  std::string expires = "1h";
  bool reusable = false;
  std::string users;  // whom the nodes may speak for: names separated by ',', or '*'
  bool as_json = false;
};
int NodeJoinToken(const GlobalFlags& g, const JoinTokenFlags& flags);
// `users`: names separated by ',', '*' for any user, '' or '-' for no one.
int NodeUsers(const GlobalFlags& g, const std::string& node, const std::string& users);
int NodeRevoke(const GlobalFlags& g, const std::string& node);
struct UserSetFlags {
  std::string name;
  std::string role;
  std::optional<int> max_priority;
  std::optional<std::string> team;
  std::optional<std::string> max_running_gpus;  // a number, or "none"
  std::optional<std::string> max_pending_jobs;
};
int UserSet(const GlobalFlags& g, const UserSetFlags& flags);
int UserList(const GlobalFlags& g, bool as_json);
int Audit(const GlobalFlags& g, int limit, bool as_json);

// --- fair share (share_cmds.cpp) ---
struct TeamSetFlags {
  std::string name;
  std::optional<std::string> gpus;          // "A100:16,V100:8" ("none": no quota)
  std::optional<std::string> borrow_limit;  // "A100:8" ("none": no limit)
  std::optional<double> weight;
};
int TeamSet(const GlobalFlags& g, const TeamSetFlags& flags);
int TeamList(const GlobalFlags& g, bool as_json);
struct UsageFlags {
  std::string since = "7d";
  std::string until;
  std::string by = "user";
  bool as_json = false;
};
int Usage(const GlobalFlags& g, const UsageFlags& flags);
// The SHA-256 fingerprint of an https server's certificate, unverified (trust on first use).
Result<std::string> ServerFingerprint(const std::string& url);

// Helpers shared by the commands.
// Which output of a job to read, and how.
// Which output of a job to read, and how.
struct LogStream {
  int64_t id = 0;
  int rank = -1;    // -1: every rank, interleaved
  int attempt = 0;  // 0: the latest, following a requeue to the next
  bool follow = true;
  bool timestamps = false;  // each line prefixed by when it reached the server
};
// Follows a job's output from `*from` (the start when null) until the job ends, to stdout or to
// `sink`; the job's final status into `final_status`. Returns false on a connection error
// (logs_cmd.cpp).
bool FollowLogs(Connection& conn, const LogStream& s, std::string* final_status,
                int64_t* from = nullptr, const std::function<void(std::string_view)>& sink = {});
int Fail(const Status& status);  // prints "berth: message", returns 1
// Connects to the server and makes one call (job_cmds.cpp): the shape of the simple commands.
Result<boost::json::value> CallServer(const GlobalFlags& g, const std::string& method,
                                      const std::string& target, const std::string& body = "");
// A job's accelerators as "TYPE:N" ("-" when none), from its JSON.
std::string GpusOf(const boost::json::object& job);
// POST /v1/jobs of `spec` (`num_jobs` copies as a group when set), keyed for resending ("": a
// fresh key). The answer: {"group", "jobs"}.
Result<boost::json::value> SubmitSpec(Connection& conn, const JobSpec& spec,
                                      std::optional<int> num_jobs,
                                      const std::string& idempotency_key = "");
// Prints job `id`'s output until it ends; its exit status: 0 when it SUCCEEDED, else its exit code
// (1 when none), after saying why on stderr. For a job this command `submitted`, Ctrl-C does what
// srun's does: the first says the job's state and how to cancel it, a second within a second
// cancels it; Ctrl-\ stops following and leaves the job running, saying so.
int FollowToEnd(Connection& conn, int64_t id, bool submitted = false);
// Waits until job `id` runs, saying on stderr why it waits (its queue position, its reason);
// Conflict when it ended instead. For a job this command `submitted` (a shell), Ctrl-C while it
// waits cancels it, saying so (as salloc gives up its request), instead of leaving it queued to
// take a node later with nobody attached.
Status WaitUntilRunning(Connection& conn, int64_t id, bool submitted = false);
// Attaches to rank `rank` of interactive job `id` once it runs (cli/attach_cmds.cpp); the job's
// exit code once it ends, 0 when the user detached, 1 (after saying why) otherwise. `submitted`:
// as for WaitUntilRunning and FollowToEnd.
int AttachToJob(Connection& conn, int64_t id, int rank, bool submitted = false);

}  // namespace berth::cli
