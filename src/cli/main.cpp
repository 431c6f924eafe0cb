#include "cli/main.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>

#include "cli/commands.h"

namespace berth::cli {

namespace {

std::string SelfExe(const char* argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

}  // namespace

int Main(int argc, char** argv, const Daemons& daemons) {
  // The job supervisor starts for every job: keep its path free of argument parsing.
  if (argc == 3 && std::strcmp(argv[1], "__supervise") == 0) return daemons.supervise(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "__node") == 0) return daemons.node_supervisor(argv[2]);

  CLI::App app{
      "berth: a job queue and batch scheduler for GPU clusters.\n"
      "User commands find the server in --server, then BERTH_SERVER, then the one saved by\n"
      "`berth login`, then the local cluster of BERTH_HOME (default ~/.berth), which they start\n"
      "if it is not running. Server URLs: http://HOST:PORT, https://HOST:PORT, unix:/PATH."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "berth " BERTH_VERSION);
  GlobalFlags g;
  g.self_exe = SelfExe(argv[0]);
  auto add_global = [&](CLI::App* cmd) {
    cmd->add_option("--server", g.server,
                    "Server URL, or several servers sharing one store, comma-separated (default: "
                    "BERTH_SERVER, `berth login`'s, the local cluster)");
    cmd->add_option("--token", g.token,
                    "Your token (default: BERTH_TOKEN, BERTH_TOKEN_FILE, `berth login`'s); not "
                    "needed on the server's machine, whose unix socket identifies you");
  };
  int rc = 0;
  // Only the table of the command argv names is built: building all of them is most of what a
  // command like `exec -d` spends before it sends its request. Anything else (--help, a typo,
  // --version) gets every command.
  static constexpr std::array kCommands = {
      "server",  "agent",  "local",  "exec",      "update", "queue", "top",
      "wait",    "logs",   "cancel", "requeue",   "show",   "nodes", "drain",
      "undrain", "status", "whoami", "dashboard", "login",  "usage", "admin"};
  const std::string_view named = argc > 1 ? argv[1] : "";
  const bool one = std::find(kCommands.begin(), kCommands.end(), named) != kCommands.end();
  auto wanted = [&](std::string_view name) { return !one || name == named; };

  ServerFlags server_flags;
  AgentFlags agent_flags;
  LocalClusterOptions local_options;
  bool local_json = false;
  ExecFlags exec_flags;
  UpdateFlags update_flags;
  QueueFlags queue_flags;
  TopFlags top_flags;
  WaitFlags wait_flags;
  LogsFlags logs_flags;
  CancelFlags cancel_flags;
  std::vector<int64_t> requeue_ids;
  int64_t show_id = 0;
  bool show_json = false;
  bool nodes_json = false;
  std::string drain_node;
  std::string undrain_node;
  bool status_json = false;
  bool whoami_json = false;
  bool dashboard_json = false;
  LoginFlags login_flags;
  UsageFlags usage_flags;
  TokenCreateFlags token_flags;
  JoinTokenFlags join_flags;
  std::string node_users_list;
  bool token_list_json = false;
  std::string revoke_name;
  UserSetFlags user_flags;
  bool user_list_json = false;
  TeamSetFlags team_flags;
  bool team_list_json = false;
  int audit_limit = 100;
  bool audit_json = false;

  // --- daemons ---
  if (wanted("server")) {
    auto* server = app.add_subcommand("server", "Run the control-plane server");
    server->add_option("--listen", server_flags.listen, "HOST:PORT to listen on (port 0 picks one)")
        ->capture_default_str();
    server
        ->add_option("--state-dir", server_flags.state_dir,
                     "Directory for the database, logs and token")
        ->required();
    server->add_option(
        "--store", server_flags.store,
        "Where jobs are stored: sqlite:PATH (default: sqlite:STATE_DIR/berth.db) or a "
        "PostgreSQL URL, postgresql://USER@HOST[:PORT]/DB: several servers may then "
        "share it, one leading at a time (docs/ha.md)");
    server
        ->add_option("--leader-lease", server_flags.leader_lease,
                     "With a PostgreSQL store: how long the leader's lease lasts without renewal, "
                     "i.e. how soon another server takes over from a dead leader")
        ->capture_default_str();
    server
        ->add_option(
            "--log-retention", server_flags.log_retention,
            "With a PostgreSQL store, which keeps jobs' output: how long after a job ended "
            "its output is kept (0: forever)")
        ->capture_default_str();
    server->add_option("--advertise", server_flags.advertise,
                       "With a PostgreSQL store: the URL other servers' followers send clients to "
                       "(default: this server's listener)");
    server->add_option("--token", server_flags.token,
                       "Cluster token, the agents' credential (default: STATE_DIR/token, made at "
                       "first start)");
    server->add_option("--token-file", server_flags.token_file, "File holding the cluster token");
    server->add_flag("--require-token", server_flags.require_token,
                     "TCP clients must present a token even from loopback (always so on other "
                     "addresses); the unix socket identifies local users either way");
    server->add_option("--unix-socket", server_flags.unix_socket,
                       "Unix socket for local users (default: STATE_DIR/berth.sock; '-': none)");
    server->add_flag("--owner-only", server_flags.owner_only,
                     "A private server: only the user running it (and root) may use it (the local "
                     "cluster's)");
    server->add_flag("--allow-root-jobs", server_flags.allow_root_jobs,
                     "Accept jobs of root (refused by default: they would run as root)");
    server->add_option("--tls-cert", server_flags.tls_cert,
                       "TLS certificate (PEM) for a non-loopback listener (default: a self-signed "
                       "one made in STATE_DIR at first start)");
    server->add_option("--tls-key", server_flags.tls_key, "TLS private key (PEM)");
    server->add_flag("--tls", server_flags.tls,
                     "Speak TLS on a loopback listener too (always on other addresses)");
    server->add_option("--lease", server_flags.lease, "Node lease: a node silent this long is down")
        ->capture_default_str();
    server
        ->add_option("--kill-grace", server_flags.kill_grace,
                     "Default SIGTERM-to-SIGKILL grace for stopping jobs")
        ->capture_default_str();
    server
        ->add_option("--starvation", server_flags.starvation,
                     "Wait after which a job gets a reservation")
        ->capture_default_str();
    server
        ->add_option("--fair-share-half-life", server_flags.fair_share_half_life,
                     "Half-life of the usage fair share counts (0 is refused: it would do nothing)")
        ->capture_default_str();
    server->add_option("--gpu-weights", server_flags.gpu_weights,
                       "What a GPU-second of each type costs in fair share and usage, like "
                       "A100=2,T4=0.5 (default 1 each)");
    server
        ->add_option("--admission-charge", server_flags.admission_charge,
                     "Fair share counts each weighted GPU a job holds as this much use in advance")
        ->capture_default_str();
    server
        ->add_option("--reclaim-limit", server_flags.reclaim_limit,
                     "Reclaims of borrowed GPUs a team may decide per --reclaim-window (0: none)")
        ->capture_default_str();
    server->add_option("--reclaim-window", server_flags.reclaim_window, "See --reclaim-limit")
        ->capture_default_str();
    server->add_option("--threads", server_flags.threads,
                       "HTTP worker threads (default: the CPUs this process may use)");
    server->add_option("--url-file", server_flags.url_file,
                       "Write the server's URL here once it listens");
    server->add_option("--pid-file", server_flags.pid_file, "Write the server's pid here");
    server->callback([&] { rc = daemons.server(server_flags); });
  }

  if (wanted("agent")) {
    auto* agent = app.add_subcommand("agent", "Run a node agent");
    agent->add_option(
        "--server", agent_flags.server,
        "Server URL, or several servers sharing one store, comma-separated: the agent "
        "follows the leader (default: BERTH_SERVER)");
    agent->add_option("--token", agent_flags.token, "Cluster token (default: BERTH_TOKEN)");
    agent->add_option("--token-file", agent_flags.token_file, "File holding the cluster token");
    agent->add_option("--join-token-file", agent_flags.join_token_file,
                      "File holding a join token (berth admin node join-token): at the first "
                      "start the agent exchanges it for the node's own credential, kept in "
                      "STATE_DIR/node-credential and used from then on instead of the cluster "
                      "token");
    agent->add_option(
        "--user-socket", agent_flags.user_socket,
        "Unix socket through which this node's users reach the server without a token "
        "(default: STATE_DIR/berth.sock; '-': none)");
    agent->add_option("--tls-fingerprint", agent_flags.tls_fingerprint,
                      "Pin the https server's certificate (sha256:..., as the server logs it; "
                      "default: BERTH_TLS_FINGERPRINT, else verify with the system's CAs)");
    agent->add_option("--name", agent_flags.name, "Node name (with --hollow: the name prefix)")
        ->required();
    agent->add_option("--state-dir", agent_flags.state_dir,
                      "Directory for the node's identity and its jobs (required "
                      "unless --hollow)");
    agent->add_option(
        "--hollow", agent_flags.hollow,
        "Simulate N nodes named NAME-0..NAME-(N-1) that run jobs without processes (a job lasts "
        "BERTH_HOLLOW_SECONDS from its envs, or until cancelled); for scale tests");
    agent->add_option("--gpus", agent_flags.gpus,
                      "Declare GPUs TYPE:N instead of asking nvidia-smi");
    agent->add_option("--cpus", agent_flags.cpus,
                      "CPUs to offer (default: what this process may use)");
    agent->add_option("--memory", agent_flags.memory, "Memory to offer in GiB (default: MemTotal)");
    agent->add_option("--pool", agent_flags.pool, "Pool this node belongs to");
    // Repeatable flags take one value each, so that `--label a=1 task.yaml` leaves task.yaml alone.
    agent->add_option("--label", agent_flags.labels, "Node label key=value (repeatable)")
        ->allow_extra_args(false);
    agent->add_option("--address", agent_flags.address,
                      "Address other nodes reach this one at (default: as the server sees it)");
    agent->add_option("--pid-file", agent_flags.pid_file, "Write the agent's pid here");
    agent
        ->add_option("--isolation", agent_flags.isolation,
                     "auto: run each job rank in a cgroup of its own with its memory, CPU, pids "
                     "and GPU device limits, where this host allows (root, a writable "
                     "cgroupfs); off: no limits")
        ->check(CLI::IsMember({"auto", "off"}))
        ->capture_default_str();
    agent->add_flag("--require-isolation", agent_flags.require_isolation,
                    "Refuse to start where job ranks cannot be put in cgroups");
    agent
        ->add_option("--job-pids-max", agent_flags.job_pids_max,
                     "Most processes and threads one job rank may have")
        ->check(CLI::Range(int64_t{16}, int64_t{4'194'304}))
        ->capture_default_str();
    agent->add_option("--job-memory-default", agent_flags.job_memory_default,
                      "Memory limit in GiB of a job that asks for none (default: the node's "
                      "memory)");
    agent
        ->add_option("--gpu-device-dir", agent_flags.gpu_device_dir,
                     "Where the GPUs' device files nvidia0, nvidia1, ... are")
        ->capture_default_str();
    agent->callback([&] { rc = daemons.agent(agent_flags, g.self_exe); });
  }

  if (wanted("local")) {
    auto* local = app.add_subcommand("local", "Manage the local cluster under BERTH_HOME");
    local->require_subcommand(1);
    auto* up = local->add_subcommand("up", "Start a server and agents on this machine");
    up->add_option("--nodes", local_options.nodes, "Number of agents (local-0 ... local-K-1)")
        ->capture_default_str();
    up->add_option("--gpus", local_options.gpus,
                   "GPUs per node, TYPE:N (default: discover with nvidia-smi)");
    up->add_option("--cpus", local_options.cpus, "CPUs per node (default: this machine's)");
    up->add_option("--memory", local_options.memory,
                   "Memory per node in GiB (default: this machine's)");
    up->add_option("--isolation", local_options.isolation,
                   "auto: jobs in cgroups with their limits where the agents may (as root); off: "
                   "no limits")
        ->check(CLI::IsMember({"auto", "off"}))
        ->capture_default_str();
    up->callback([&] { rc = LocalUp(local_options, g.self_exe); });
    local->add_subcommand("down", "Stop the local cluster and its jobs")->callback([&] {
      rc = LocalDown();
    });
    auto* status = local->add_subcommand("status", "Show the local cluster");
    status->add_flag("--json", local_json, "Machine-readable output");
    status->callback([&] { rc = LocalStatus(local_json); });
  }

  // --- user commands ---
  if (wanted("exec")) {
    auto* exec = app.add_subcommand("exec", "Submit a job: a task YAML, or a command after --");
    exec->add_option("args", exec_flags.args, "task.yaml, or the command to run (put it after --)");
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
                     "Working directory on the nodes (default: the current one)");
    exec->add_option("--pool", exec_flags.pool,
                     "Run only on nodes of this pool (as the YAML's pool:)");
    exec->add_option(
            "--after", exec_flags.after,
            "Start only once a dependency holds: ok:ID[,ID] (all succeeded), notok:ID (all "
            "ended, one failed), any:ID (all ended); ok:group:G for every job of a group. "
            "Repeatable (all must hold); added to the task file's depends_on")
        ->allow_extra_args(false);
    exec->add_option("--max-running", exec_flags.max_running,
                     "With --num-jobs: at most N jobs of the group run at once");
    exec->add_flag("--json", exec_flags.as_json, "Print {\"group\": G, \"jobs\": [ids]}");
    exec->add_option("--idempotency-key", exec_flags.idempotency_key,
                     "Submit at most once under this key: sent again with it, the same submission "
                     "gets the jobs it made the first time (default: a fresh key per command, "
                     "which the command itself reuses when it retries)");
    add_global(exec);
    exec->callback([&] {
      // What follows "--" is a command even when it names a file (`berth exec -- ./train.sh`).
      for (int i = 1; i < argc; ++i)
        exec_flags.command = exec_flags.command || std::strcmp(argv[i], "--") == 0;
      rc = Exec(g, exec_flags);
    });
  }

  if (wanted("update")) {
    auto* update = app.add_subcommand(
        "update", "Change a bulk group after submission: berth update --group G --max-running N");
    update->add_option("--group", update_flags.group, "The group to change")->required();
    update->add_option("--max-running", update_flags.max_running,
                       "At most N of its jobs run at once ('none': no limit); the owner or an "
                       "operator");
    add_global(update);
    update->callback([&] { rc = Update(g, update_flags); });
  }

  if (wanted("queue")) {
    auto* queue = app.add_subcommand(
        "queue",
        "List every active job (each bulk group as one row with counts per status) and the most "
        "recent finished ones, newest first");
    queue->add_flag("-a,--all", queue_flags.all, "Every job, finished ones included");
    queue
        ->add_option("--limit", queue_flags.limit,
                     "Finished jobs shown (with --json: rows per page, active and finished)")
        ->capture_default_str();
    queue->add_option("--group", queue_flags.group, "Only the jobs of this group, one row each");
    queue->add_option("--user", queue_flags.user, "Only this user's jobs");
    queue->add_option("--team", queue_flags.team, "Only this team's jobs ('-': the default team)");
    queue->add_flag("--json", queue_flags.as_json,
                    "Machine-readable output (a JSON array of jobs)");
    add_global(queue);
    queue->callback([&] { rc = Queue(g, queue_flags); });
  }

  if (wanted("top")) {
    auto* top = app.add_subcommand(
        "top",
        "A live full-screen view: each node's GPU map (a letter per job), CPU and memory, and the "
        "queue; q quits");
    top->add_option("--interval", top_flags.interval, "Seconds between redraws")
        ->capture_default_str();
    top->add_flag("--once", top_flags.once,
                  "Print one frame and return (also when the output is not a terminal)");
    add_global(top);
    top->callback([&] { rc = Top(g, top_flags); });
  }

  if (wanted("wait")) {
    auto* wait = app.add_subcommand(
        "wait",
        "Wait until jobs end, showing progress (pending, running, succeeded, failed, rate, ETA); "
        "exits 0 only if every one succeeded");
    wait->add_option("ids", wait_flags.ids, "Job ids");
    wait->add_option("--group", wait_flags.group, "Every job of this bulk group");
    wait->add_flag("--json", wait_flags.as_json,
                   "One JSON object per line each time the counts change, for scripts");
    add_global(wait);
    wait->callback([&] { rc = Wait(g, wait_flags); });
  }

  if (wanted("logs")) {
    auto* logs =
        app.add_subcommand("logs", "Print a job's output, following it until the job ends");
    logs->add_option("id", logs_flags.id, "Job id")->required();
    logs->add_flag("--no-follow", logs_flags.no_follow, "Print what is there and return");
    logs->add_option("--rank", logs_flags.rank, "Node rank of a multi-node job");
    logs->add_option("--attempt", logs_flags.attempt, "Attempt (default: the latest)");
    add_global(logs);
    logs->callback([&] { rc = Logs(g, logs_flags); });
  }

  if (wanted("cancel")) {
    auto* cancel = app.add_subcommand("cancel", "Cancel jobs");
    cancel->add_option("ids", cancel_flags.ids, "Job ids");
    cancel->add_flag("-a,--all", cancel_flags.all, "All of your active jobs");
    cancel->add_flag("--all-users", cancel_flags.all_users,
                     "Every active job of every user (operators)");
    cancel->add_option("--group", cancel_flags.group, "Every job of this group");
    cancel->add_flag("--json", cancel_flags.as_json, "Machine-readable output");
    add_global(cancel);
    cancel->callback([&] { rc = Cancel(g, cancel_flags); });
  }

  if (wanted("requeue")) {
    auto* requeue = app.add_subcommand(
        "requeue",
        "Stop jobs' running attempts and put them back in the queue (yours; operators: any)");
    requeue->add_option("ids", requeue_ids, "Job ids")->required();
    add_global(requeue);
    requeue->callback([&] { rc = Requeue(g, requeue_ids); });
  }

  if (wanted("show")) {
    auto* show = app.add_subcommand(
        "show", "One job in full: spec, placement, attempts, events, why pending");
    show->add_option("id", show_id, "Job id")->required();
    show->add_flag("--json", show_json, "Print the job object");
    add_global(show);
    show->callback([&] { rc = Show(g, show_id, show_json); });
  }

  if (wanted("nodes")) {
    auto* nodes =
        app.add_subcommand("nodes", "List nodes: state, pool, labels, resources total and free");
    nodes->add_flag("--json", nodes_json, "Machine-readable output (a JSON array of nodes)");
    add_global(nodes);
    nodes->callback([&] { rc = Nodes(g, nodes_json); });
  }

  if (wanted("drain")) {
    auto* drain =
        app.add_subcommand("drain", "Let a node finish its jobs and take no new ones (operators)");
    drain->add_option("node", drain_node, "Node name")->required();
    add_global(drain);
    drain->callback([&] { rc = Drain(g, drain_node, true); });
  }
  if (wanted("undrain")) {
    auto* undrain = app.add_subcommand("undrain", "Let a drained node take jobs again (operators)");
    undrain->add_option("node", undrain_node, "Node name")->required();
    add_global(undrain);
    undrain->callback([&] { rc = Drain(g, undrain_node, false); });
  }

  // --- identity and administration ---
  if (wanted("status")) {
    auto* status_cmd = app.add_subcommand(
        "status", "The servers: which leads, since when, on which store, and whether each answers");
    status_cmd->add_flag("--json", status_json, "Machine-readable output");
    add_global(status_cmd);
    status_cmd->callback([&] { rc = ServerStatus(g, status_json); });
  }

  if (wanted("whoami")) {
    auto* whoami = app.add_subcommand("whoami", "Who the server takes you for, and your rights");
    whoami->add_flag("--json", whoami_json, "Machine-readable output");
    add_global(whoami);
    whoami->callback([&] { rc = Whoami(g, whoami_json); });
  }

  if (wanted("dashboard")) {
    auto* dashboard = app.add_subcommand(
        "dashboard",
        "Print a link that opens the web dashboard logged in as you (once, within 5 minutes)");
    dashboard->add_flag("--json", dashboard_json, "Machine-readable output");
    add_global(dashboard);
    dashboard->callback([&] { rc = Dashboard(g, dashboard_json); });
  }

  if (wanted("login")) {
    auto* login = app.add_subcommand(
        "login",
        "Save a server and your token in BERTH_HOME/config (mode 0600) for later commands");
    login->add_option("--token-file", login_flags.token_file, "File holding your token");
    login->add_option("--fingerprint", login_flags.fingerprint,
                      "Pin this certificate fingerprint (sha256:...), as your admin gave it");
    login->add_flag("--trust", login_flags.trust,
                    "Pin the fingerprint the server presents without asking (trust on first use)");
    add_global(login);
    login->callback([&] { rc = Login(g, login_flags); });
  }

  if (wanted("usage")) {
    auto* usage = app.add_subcommand(
        "usage",
        "GPU-hours by type, CPU-hours, CPU and memory efficiency, jobs, mean wait and preemptions, "
        "per user or team");
    usage
        ->add_option("--since", usage_flags.since,
                     "Start of the window: a duration back from now (7d, 12h) or a time "
                     "(2026-11-01T00:00:00Z); rounded down to the hour")
        ->capture_default_str();
    usage->add_option("--until", usage_flags.until, "End of the window (default: now)");
    usage->add_option("--by", usage_flags.by, "user or team")->capture_default_str();
    usage->add_flag("--json", usage_flags.as_json, "Machine-readable output");
    add_global(usage);
    usage->callback([&] { rc = Usage(g, usage_flags); });
  }

  if (wanted("admin")) {
    auto* admin = app.add_subcommand(
        "admin", "Users, teams, tokens, node credentials and the audit log (admins only)");
    admin->require_subcommand(1);
    auto* token = admin->add_subcommand("token", "Users' bearer tokens");
    token->require_subcommand(1);
    auto* token_create =
        token->add_subcommand("create", "Issue a token for a user; it is printed only once");
    token_create->add_option("--user", token_flags.user, "Whose token")->required();
    token_create->add_option("--name", token_flags.name, "Token name (default: USER-xxxxxx)");
    token_create->add_option("--role", token_flags.role,
                             "Also set the user's role: user, operator or admin");
    token_create->add_option("--expires", token_flags.expires,
                             "Lifetime, like 90d or 12h (default: never expires)");
    token_create->add_flag("--json", token_flags.as_json, "Machine-readable output");
    add_global(token_create);
    token_create->callback([&] { rc = TokenCreate(g, token_flags); });
    auto* token_list = token->add_subcommand("list", "Every token, without its secret");
    token_list->add_flag("--json", token_list_json, "Machine-readable output");
    add_global(token_list);
    token_list->callback([&] { rc = TokenList(g, token_list_json); });
    auto* token_revoke = token->add_subcommand("revoke", "Revoke a token at once");
    token_revoke->add_option("name", revoke_name, "Token name")->required();
    add_global(token_revoke);
    token_revoke->callback([&] { rc = TokenRevoke(g, revoke_name); });

    auto* node = admin->add_subcommand(
        "node", "Nodes' own credentials: join tokens, whom they speak for, revocation");
    node->require_subcommand(1);
    auto* join_token = node->add_subcommand(
        "join-token",
        "Make a join token: an agent started with --join-token-file exchanges it for its node's "
        "own credential; printed only once");
    join_token->add_option("--expires", join_flags.expires,
                           "Lifetime, like 1h or 30m, or never (default: 1h)");
    join_token->add_flag("--reusable", join_flags.reusable,
                         "Let it join any number of nodes (default: one node, then it is used up)");
    join_token->add_option(
        "--users", join_flags.users,
        "The local users its nodes may speak for through their user socket: names separated by "
        "',', or '*' for any user but an admin (default: no one; change later with berth admin "
        "node users)");
    join_token->add_flag("--json", join_flags.as_json, "Machine-readable output");
    add_global(join_token);
    join_token->callback([&] { rc = NodeJoinToken(g, join_flags); });
    auto* node_users = node->add_subcommand(
        "users", "Set whom a node may speak for through its user socket (replaces the list)");
    node_users->add_option("node", revoke_name, "Node name")->required();
    node_users
        ->add_option("users", node_users_list,
                     "Names separated by ',', '*' for any user but an admin, '-' for no one")
        ->required();
    add_global(node_users);
    node_users->callback([&] { rc = NodeUsers(g, revoke_name, node_users_list); });
    auto* node_revoke =
        node->add_subcommand("revoke", "Revoke a node's credential and end its session at once");
    node_revoke->add_option("node", revoke_name, "Node name")->required();
    add_global(node_revoke);
    node_revoke->callback([&] { rc = NodeRevoke(g, revoke_name); });

    auto* user = admin->add_subcommand("user", "Users' rights");
    user->require_subcommand(1);
    auto* user_set = user->add_subcommand("set", "Set a user's role, highest priority or team");
    user_set->add_option("name", user_flags.name, "User name")->required();
    user_set->add_option("--role", user_flags.role, "user, operator or admin");
    user_set->add_option("--max-priority", user_flags.max_priority,
                         "Highest priority the user may submit at (default 0)");
    user_set->add_option("--team", user_flags.team, "Team (\"\" for none)");
    user_set->add_option("--max-running-gpus", user_flags.max_running_gpus,
                         "GPUs (any type) the user's running jobs may hold at once; more wait "
                         "('none': no limit)");
    user_set->add_option("--max-pending-jobs", user_flags.max_pending_jobs,
                         "Jobs the user may have waiting; submissions beyond it are refused "
                         "('none': no limit)");
    add_global(user_set);
    user_set->callback([&] { rc = UserSet(g, user_flags); });
    auto* user_list = user->add_subcommand("list", "Users with rights set");
    user_list->add_flag("--json", user_list_json, "Machine-readable output");
    add_global(user_list);
    user_list->callback([&] { rc = UserList(g, user_list_json); });

    auto* team = admin->add_subcommand("team", "Teams: GPU quotas, borrowing, fair-share weight");
    team->require_subcommand(1);
    auto* team_set = team->add_subcommand(
        "set", "Create or change a team (docs/fair-share.md); unset options stay as they are");
    team_set->add_option("name", team_flags.name, "Team name")->required();
    team_set->add_option("--gpus", team_flags.gpus,
                         "Guaranteed (nominal) quota per GPU type, like A100:16,V100:8 ('none': "
                         "no quota)");
    team_set->add_option("--borrow-limit", team_flags.borrow_limit,
                         "How many idle GPUs beyond the quota it may borrow, per type, like A100:8 "
                         "(a type not named: no limit; A100:0 forbids borrowing; 'none': no "
                         "limits)");
    team_set->add_option("--weight", team_flags.weight,
                         "Fair-share weight: usage is divided by it (default 1)");
    add_global(team_set);
    team_set->callback([&] { rc = TeamSet(g, team_flags); });
    auto* team_list = team->add_subcommand("list", "Teams, their quotas and what they use now");
    team_list->add_flag("--json", team_list_json, "Machine-readable output");
    add_global(team_list);
    team_list->callback([&] { rc = TeamList(g, team_list_json); });

    auto* audit = admin->add_subcommand("audit", "Administrative actions: who did what, when");
    audit->add_option("--limit", audit_limit, "How many of the newest")->capture_default_str();
    audit->add_flag("--json", audit_json, "Machine-readable output");
    add_global(audit);
    audit->callback([&] { rc = Audit(g, audit_limit, audit_json); });
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return rc;
}

}  // namespace berth::cli
