// `berth server` and `berth agent`: their command lines. The daemons themselves are wired in
// src/exe (cli/main.h, Daemons): the CLI does not link the server or the agent.
#include "cli/command_context.h"

namespace berth::cli {

// --- command line: the registration of each command (cli/command_context.h) ---

namespace {

// `berth server`'s idle-GPU options (docs/idle.md).
void AddIdleOptions(CLI::App* server, ServerFlags& server_flags) {
  server->add_option(
      "--idle-policy", server_flags.idle_policy,
      "What happens to jobs whose GPUs stay idle, e.g. 'below=5,warn=10m,act=30m,action=requeue': "
      "below this SM % (or with no process) for `warn` a job is warned, for `act` requeued, "
      "cancelled or (action=none) only reported (docs/idle.md); default: none");
  server->add_option("--team-idle-policy", server_flags.team_idle_policies,
                     "A team's own idle policy, TEAM=POLICY (POLICY as --idle-policy's, or none: "
                     "no idle policy for the team); repeatable");
  server->add_option(
      "--pool-idle-policy", server_flags.pool_idle_policies,
      "The idle policy of jobs running in a pool, POOL=POLICY or POOL=none; before a "
      "team's and the cluster's; repeatable");
  server
      ->add_option("--idle-charge", server_flags.idle_charge,
                   "Fair share charges each GPU-second a job's sampled GPUs sat idle this much "
                   "more than its use, e.g. 1: double (docs/idle.md); 0: nothing more")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
}

// `berth server`'s notification options (docs/notifications.md).
void AddNotifyOptions(CLI::App* server, ServerFlags& flags) {
  server->add_option("--smtp", flags.smtp,
                     "The mail relay notifications are sent through, HOST:PORT (needs "
                     "--smtp-from); default: no mail");
  server->add_option("--smtp-from", flags.smtp_from, "The address notifications are mailed from");
  server
      ->add_option("--smtp-starttls", flags.smtp_starttls,
                   "STARTTLS with the relay: auto (when it offers it), require, off")
      ->check(CLI::IsMember({"auto", "require", "off"}))
      ->capture_default_str();
  server->add_option("--smtp-ca-file", flags.smtp_ca_file,
                     "PEM CAs the relay's certificate is checked against (default: the system's)");
  server->add_option("--webhook-ca-file", flags.webhook_ca_file,
                     "PEM CAs https webhooks are checked against (default: the system's)");
  server
      ->add_option("--notify-retry-cap", flags.notify_retry_cap,
                   "The longest wait between tries of a failing delivery (they start at 2s and "
                   "double)")
      ->capture_default_str();
  server
      ->add_option("--notify-give-up", flags.notify_give_up,
                   "A notification still failing this long after its event is marked failed")
      ->capture_default_str();
  server
      ->add_option("--notify-rate", flags.notify_rate,
                   "Notifications delivered a minute per user at most (more wait their turn)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
}

}  // namespace

void AddOpenApiCommand(CommandContext& c) {
  auto& out = c.Keep<std::string>();
  auto* cmd = c.app.add_subcommand(
      "openapi", "Print the HTTP API's OpenAPI 3.1 description (what GET /v1/openapi.json serves)");
  cmd->add_option("--out", out,
                  "Write it to this file instead (left untouched when it says the same already)");
  cmd->callback([&] { c.rc = c.daemons.openapi(out); });
}

void AddServerCommand(CommandContext& c) {
  auto& server_flags = c.Keep<ServerFlags>();
  auto* server = c.app.add_subcommand("server", "Run the control-plane server");
  server->add_option("--listen", server_flags.listen, "HOST:PORT to listen on (port 0 picks one)")
      ->capture_default_str();
  server
      ->add_option("--state-dir", server_flags.state_dir,
                   "Directory for the database, logs and token")
      ->required();
  server->add_option("--store", server_flags.store,
                     "Where jobs are stored: sqlite:PATH (default: sqlite:STATE_DIR/berth.db) or a "
                     "PostgreSQL URL, postgresql://USER@HOST[:PORT]/DB: several servers may then "
                     "share it, one leading at a time (docs/ha.md)");
  server
      ->add_option("--leader-lease", server_flags.leader_lease,
                   "With a PostgreSQL store: how long the leader's lease lasts without renewal, "
                   "i.e. how soon another server takes over from a dead leader")
      ->capture_default_str();
  server
      ->add_option("--log-retention", server_flags.log_retention,
                   "With a PostgreSQL store, which keeps jobs' output: how long after a job ended "
                   "its output is kept (0: forever)")
      ->capture_default_str();
  server
      ->add_option("--upload-retention", server_flags.upload_retention,
                   "Uploaded workdir and file-mount content that no pending or running job uses, "
                   "and nobody uploaded or asked about for this long, is deleted (0: kept)")
      ->capture_default_str();
  server
      ->add_option("--upload-piece-retention", server_flags.upload_piece_retention,
                   "Pieces of a big upload that nobody went on with for this long are deleted")
      ->capture_default_str();
  server
      ->add_option("--upload-quota", server_flags.upload_quota_gib,
                   "GiB of uploads (and pieces of unfinished ones) each user may keep on the "
                   "server (0: no quota); past it an upload is refused (413)")
      ->capture_default_str();
  server
      ->add_option("--upload-min-free", server_flags.upload_min_free_gib,
                   "GiB the upload store's disk keeps free for the server's other state; below "
                   "it uploads are refused (507)")
      ->capture_default_str();
  server
      ->add_option("--max-connections", server_flags.max_connections,
                   "Open connections the server accepts in all (0: from its open-file limit); "
                   "past it a new one is answered 503 and closed")
      ->capture_default_str();
  server
      ->add_option("--max-connections-per-peer", server_flags.max_connections_per_peer,
                   "Open connections from one remote address (loopback and the unix socket "
                   "count only in the total); past it a new one is answered 503 and closed")
      ->capture_default_str();
  server
      ->add_option("--node-retention", server_flags.node_retention,
                   "A node down this long is gone for good: the server forgets it (its record is "
                   "kept) and its name is free for a join (0: never)")
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
      ->add_option("--interactive-time-limit", server_flags.interactive_time_limit,
                   "Time limit of an interactive job (berth shell, exec -it) that sets none; 0: "
                   "none")
      ->capture_default_str();
  server
      ->add_option("--interactive-idle-limit", server_flags.interactive_idle_limit,
                   "End an interactive job that no one has attached to (nor port-forwarded) for "
                   "this long, e.g. 2h; 0: never")
      ->capture_default_str();
  AddIdleOptions(server, server_flags);
  AddNotifyOptions(server, server_flags);
  server
      ->add_option("--interactive-connect-timeout", server_flags.interactive_connect_timeout,
                   "How long a session (attach, exec --into, port-forward) waits for the job's "
                   "node to answer before it is closed (the client dials again)")
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
  server->add_option("--topology-levels", server_flags.topology_levels,
                     "The topology levels across nodes, coarse to fine, each a node label key "
                     "(e.g. block,rack,switch): gangs take as few domains of the finest as can "
                     "be, and may require one domain of a level (docs/topology.md)");
  server->add_option("--threads", server_flags.threads,
                     "HTTP worker threads (default: the CPUs this process may use)");
  server->add_option("--url-file", server_flags.url_file,
                     "Write the server's URL here once it listens");
  server->add_option("--pid-file", server_flags.pid_file, "Write the server's pid here");
  server->callback([&] { c.rc = c.daemons.server(server_flags); });
}

namespace {

// The agent's node-health flags (docs/operators.md "Node health").
void AddAgentHealthOptions(CLI::App& agent, AgentFlags& flags) {
  const char* group = "Node health";
  agent
      .add_option("--health", flags.health,
                  "on: run health probes, drain the node or fence a GPU on a fault; off: none")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str()
      ->group(group);
  agent.add_option("--health-interval", flags.health_interval, "How often the light probes run")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--health-timeout", flags.health_timeout,
                  "Each probe's hard limit; a probe still running then is killed (its process "
                  "group) and counts as failed")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--health-clean-runs", flags.health_clean_runs,
                  "Clean runs in a row of a failed probe before its GPU or node is taken back")
      ->check(CLI::Range(1, 100))
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--health-dir", flags.health_dir,
                  "Admin probe scripts, run every interval (exit 0: healthy; else the first line "
                  "of output is the reason; 'gpu N: ...' names a GPU)")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--health-idle-dir", flags.health_idle_dir,
                  "Heavy probe scripts (a GPU diagnostic), run only while no job runs on the node")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--health-idle-interval", flags.health_idle_interval,
                  "How often the heavy probes run, when the node is idle")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--health-idle-timeout", flags.health_idle_timeout,
                  "Each heavy probe's hard limit")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--nvidia-smi", flags.nvidia_smi,
                  "nvidia-smi for the GPU probes ('' or not found: no GPU probes)")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--kernel-log", flags.kernel_log,
                  "Where XID errors are read (default: /dev/kmsg when readable; '-': nowhere)")
      ->group(group);
  agent
      .add_option("--xid-ignore", flags.xid_ignore,
                  "XIDs that are application errors and never fence a GPU")
      ->capture_default_str()
      ->group(group);
  agent.add_option("--xid-node", flags.xid_node, "XIDs that drain the whole node, not one GPU")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--min-free-disk", flags.min_free_disk_mib,
                  "MiB that must stay free in the state directory")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--max-clock-skew", flags.max_clock_skew,
                  "Largest difference from the server's clock before the node drains")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--prolog-dir", flags.prolog_dir,
                  "Scripts run as root before each job rank; one failing requeues the job and "
                  "drains the node")
      ->capture_default_str()
      ->group(group);
  agent
      .add_option("--epilog-dir", flags.epilog_dir,
                  "Scripts run as root after each job rank; one failing drains the node")
      ->capture_default_str()
      ->group(group);
  agent.add_option("--hook-timeout", flags.hook_timeout, "Each prolog and epilog script's limit")
      ->capture_default_str()
      ->group(group);
}

}  // namespace

void AddAgentCommand(CommandContext& c) {
  auto& agent_flags = c.Keep<AgentFlags>();
  auto* agent = c.app.add_subcommand("agent", "Run a node agent");
  agent->add_option("--server", agent_flags.server,
                    "Server URL, or several servers sharing one store, comma-separated: the agent "
                    "follows the leader (default: BERTH_SERVER)");
  agent->add_option("--token", agent_flags.token, "Cluster token (default: BERTH_TOKEN)");
  agent->add_option("--token-file", agent_flags.token_file, "File holding the cluster token");
  agent->add_option("--join-token-file", agent_flags.join_token_file,
                    "File holding a join token (berth admin node join-token): at the first "
                    "start the agent exchanges it for the node's own credential, kept in "
                    "STATE_DIR/node-credential and used from then on instead of the cluster "
                    "token");
  agent->add_option("--user-socket", agent_flags.user_socket,
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
  agent->add_option("--gpus", agent_flags.gpus, "Declare GPUs TYPE:N instead of asking nvidia-smi");
  agent->add_option("--mig", agent_flags.mig,
                    "Declare MIG slices of the declared GPUs: GPU=PROFILE,PROFILE...;GPU=... "
                    "(e.g. '0=3g.40gb,3g.40gb;1=1g.10gb*7'; a GPU not named stays whole; "
                    "docs/gpus.md)");
  agent->add_flag(
      "--mig-reconfigure", agent_flags.mig_reconfigure,
      "Let the server change the MIG layout of this node's idle GPUs in MIG mode to fit "
      "the queue (nvidia-smi mig; a declared layout is simulated; docs/gpus.md)");
  agent->add_option("--gpu-topology", agent_flags.gpu_topology,
                    "A file holding the GPUs' interconnect matrix in `nvidia-smi topo -m`'s "
                    "format (default: ask nvidia-smi where the GPUs are discovered); jobs get "
                    "the best-connected free GPUs (docs/topology.md)");
  agent
      ->add_option("--gpu-sample-interval", agent_flags.gpu_sample_interval,
                   "How often to sample the GPUs' utilisation with nvidia-smi, where it is on "
                   "PATH, for each job's GPU use and idle time (0: never; docs/idle.md)")
      ->capture_default_str();
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
  agent
      ->add_option("--containers", agent_flags.containers,
                   "auto: run jobs that name an image (resources.image_id: docker:...) with "
                   "rootless podman, as their user, where podman is installed; off: this node "
                   "runs no container jobs")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  agent->add_option("--podman", agent_flags.podman, "podman to use (default: podman on PATH)");
  agent->add_option("--insecure-registry", agent_flags.insecure_registries,
                    "A registry HOST:PORT reached over plain HTTP (repeatable)");
  agent->add_option("--container-mount", agent_flags.container_mounts,
                    "A host path (and what is below it) that jobs' container.mounts may name "
                    "(repeatable; default: none)");
  agent
      ->add_option("--pull-retries", agent_flags.pull_retries,
                   "How often a pull whose registry cannot be reached is tried again (2 s, 4 s, "
                   "8 s, ... apart) before the job fails")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
  agent
      ->add_option("--image-tag-ttl", agent_flags.image_tag_ttl,
                   "Seconds a tag's answer from its registry is trusted: a job of an image tag "
                   "asked about less long ago starts without asking again (0: ask every time)")
      ->check(CLI::Range(0, 86'400))
      ->capture_default_str();
  AddAgentHealthOptions(*agent, agent_flags);
  agent->callback([&] { c.rc = c.daemons.agent(agent_flags, c.g.self_exe); });
}

}  // namespace berth::cli
