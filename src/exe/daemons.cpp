// `berth server`, `berth agent` and the hidden `berth __supervise` / `berth __node`: the
// long-running processes, wired from their parts (the store the server uses, its clock, the agent's
// options). The command line parses their flags (cli/commands.h) and calls these (exe/daemons.h).
#include "exe/daemons.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/agent.h"
#include "agent/connection.h"
#include "agent/hollow.h"
#include "agent/job_account.h"
#include "agent/launcher.h"
#include "agent/node_credential.h"
#include "agent/user_socket.h"
#include "cli/commands.h"
#include "common/files.h"
#include "common/heap.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/unix_user.h"
#include "exe/ha_server.h"
#include "net/smtp_client.h"
#include "protocol/job_env.h"
#include "server/http/openapi.h"
#include "server/http/server.h"
#include "store/store.h"
#include "supervise/node_supervisor.h"
#include "supervise/supervisor.h"

extern char** environ;

namespace berth::exe {

using cli::AgentFlags;
using cli::Fail;
using cli::ServerFlags;

namespace {

// Blocks SIGTERM/SIGINT in every thread (call before starting any) and returns a waiter for them.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return set;
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

// pid and URL files: replaced atomically, so a reader never sees half of one.
bool WriteSmallFile(const std::string& path, const std::string& text) {
  return path.empty() || WriteFileAtomic(path, text + "\n", /*sync=*/false);
}

std::string ReadToken(const std::string& flag, const std::string& file) {
  if (!flag.empty()) {
    LogWarn(
        "--token is visible to every local user in the process list (and to jobs): prefer "
        "--token-file or BERTH_TOKEN");
    return flag;
  }
  if (!file.empty()) {
    std::ifstream in(file);
    std::string t;
    std::getline(in, t);
    return Trim(t);
  }
  if (const char* env = std::getenv("BERTH_TOKEN"); env && *env) return env;
  return "";
}

}  // namespace

namespace {

// The server's options from its command line; an error names the flag.
// The notifications' relay, trust and retries (docs/notifications.md).
Status ParseNotifyFlags(const ServerFlags& flags, ServerOptions& options) {
  if (!flags.smtp.empty()) {
    BERTH_RETURN_IF_ERROR(net::ParseSmtpRelay(flags.smtp, &options.notify_relay.smtp));
    if (flags.smtp_from.find('@') == std::string::npos ||
        flags.smtp_from.find_first_of(" <>\r\n") != std::string::npos) {
      return Status::Invalid("--smtp needs --smtp-from ADDR, the address mail comes from");
    }
  }
  options.notify_relay.smtp.from = flags.smtp_from;
  options.notify_relay.smtp.starttls = flags.smtp_starttls;
  options.notify_relay.smtp.ca_file = flags.smtp_ca_file;
  options.notify_relay.webhook_ca_file = flags.webhook_ca_file;
  auto cap = ParseDuration(flags.notify_retry_cap);
  auto give_up = ParseDuration(flags.notify_give_up);
  if (!cap || *cap < 1000) {
    return Status::Invalid("--notify-retry-cap: expected a duration of at least 1s, like 10m");
  }
  if (!give_up || *give_up <= 0) {
    return Status::Invalid("--notify-give-up: expected a positive duration like 24h");
  }
  options.notify.retry_cap_ms = *cap;
  options.notify.give_up_ms = *give_up;
  options.notify.per_user_per_minute = flags.notify_rate;
  return Status::Ok();
}

Result<ServerOptions> ServerOptionsOf(const ServerFlags& flags) {
  ServerOptions options;
  auto colon = flags.listen.rfind(':');
  if (colon == std::string::npos)
    return Status::Invalid("--listen must be HOST:PORT, got '" + flags.listen + "'");
  options.host = flags.listen.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[')
    options.host = options.host.substr(1, options.host.size() - 2);
  try {
    options.port = std::stoi(flags.listen.substr(colon + 1));
  } catch (...) {
    return Status::Invalid("--listen: bad port in '" + flags.listen + "'");
  }
  options.state_dir = flags.state_dir;
  options.token = ReadToken(flags.token, flags.token_file);
  options.require_token = flags.require_token;
  options.allow_root_jobs = flags.allow_root_jobs;
  options.owner_only = flags.owner_only;
  options.unix_socket = flags.unix_socket;
  options.tls = flags.tls;
  options.tls_cert = flags.tls_cert;
  options.tls_key = flags.tls_key;
  options.threads = flags.threads;
  auto lease = ParseDuration(flags.lease);
  auto grace = ParseDuration(flags.kill_grace);
  auto starvation = ParseDuration(flags.starvation);
  if (!lease || *lease < 300)
    return Status::Invalid("--lease: expected a duration of at least 300ms, like 30s");
  if (!grace) return Status::Invalid("--kill-grace: expected a duration like 10s");
  if (!starvation) return Status::Invalid("--starvation: expected a duration like 10m");
  options.core.lease_ms = *lease;
  options.core.kill_grace_ms = *grace;
  auto interactive_limit = ParseDuration(flags.interactive_time_limit);
  if (!interactive_limit || *interactive_limit < 0) {
    return Status::Invalid("--interactive-time-limit: expected a duration like 8h (0: none)");
  }
  options.core.interactive_time_limit_ms = *interactive_limit;
  auto idle_limit = ParseDuration(flags.interactive_idle_limit);
  if (!idle_limit || *idle_limit < 0) {
    return Status::Invalid("--interactive-idle-limit: expected a duration like 2h (0: none)");
  }
  options.core.interactive_idle_limit_ms = *idle_limit;
  if (!flags.idle_policy.empty()) {
    // Windows are checked against the agents' default sampling interval (agent/gpu_watch.h).
    Result<IdlePolicy> policy = ParseIdlePolicy(flags.idle_policy, 10'000);
    if (!policy.ok()) return policy.status();
    options.core.idle_policies.cluster = *policy;
  }
  for (const std::string& p : flags.team_idle_policies) {
    BERTH_RETURN_IF_ERROR(
        AddScopedIdlePolicy(p, "--team-idle-policy", 10'000, options.core.idle_policies.teams));
  }
  for (const std::string& p : flags.pool_idle_policies) {
    BERTH_RETURN_IF_ERROR(
        AddScopedIdlePolicy(p, "--pool-idle-policy", 10'000, options.core.idle_policies.pools));
  }
  auto connect_timeout = ParseDuration(flags.interactive_connect_timeout);
  if (!connect_timeout || *connect_timeout <= 0) {
    return Status::Invalid("--interactive-connect-timeout: expected a duration like 10s (above 0)");
  }
  options.interactive_connect_ms = *connect_timeout;
  options.core.starvation_ms = *starvation;
  auto upload_retention = ParseDuration(flags.upload_retention);
  if (!upload_retention || *upload_retention < 0) {
    return Status::Invalid("--upload-retention: expected a duration like 7d (0: keep for ever)");
  }
  options.upload_retention_ms = *upload_retention;
  auto piece_retention = ParseDuration(flags.upload_piece_retention);
  if (!piece_retention || *piece_retention <= 0) {
    return Status::Invalid("--upload-piece-retention: expected a positive duration like 6h");
  }
  options.upload_piece_retention_ms = *piece_retention;
  if (flags.upload_quota_gib < 0 || flags.upload_min_free_gib < 0) {
    return Status::Invalid("--upload-quota and --upload-min-free: expected GiB, at least 0");
  }
  options.upload_quota.per_user_bytes = static_cast<int64_t>(flags.upload_quota_gib * (1 << 30));
  options.upload_quota.min_free_bytes = static_cast<int64_t>(flags.upload_min_free_gib * (1 << 30));
  if (flags.max_connections < 0 || flags.max_connections_per_peer < 1) {
    return Status::Invalid(
        "--max-connections (0: from the open-file limit) and --max-connections-per-peer (at "
        "least 1): expected counts");
  }
  auto node_retention = ParseDuration(flags.node_retention);
  if (!node_retention || *node_retention < 0) {
    return Status::Invalid("--node-retention: expected a duration like 7d (0: never)");
  }
  options.core.node_retention_ms = *node_retention;
  options.max_connections = static_cast<size_t>(flags.max_connections);
  options.max_connections_per_peer = static_cast<size_t>(flags.max_connections_per_peer);
  auto half_life = ParseDuration(flags.fair_share_half_life);
  auto charge = ParseDuration(flags.admission_charge);
  auto window = ParseDuration(flags.reclaim_window);
  if (!half_life || *half_life <= 0) {
    return Status::Invalid(
        "--fair-share-half-life: expected a positive duration like 7d (a half-life of 0 would "
        "forget all usage at once, so fair share would do nothing)");
  }
  if (!charge) return Status::Invalid("--admission-charge: expected a duration like 1h");
  if (!window || *window <= 0) {
    return Status::Invalid("--reclaim-window: expected a positive duration like 1m");
  }
  if (flags.reclaim_limit < 0) return Status::Invalid("--reclaim-limit must be >= 0");
  options.core.usage.half_life_ms = *half_life;
  options.core.admission_charge_s = static_cast<double>(*charge) / 1000;
  options.core.reclaim_limit = flags.reclaim_limit;
  options.core.reclaim_window = *window;
  for (const std::string& level : Split(flags.topology_levels, ',')) {
    const std::string name = Trim(level);
    if (name.empty()) continue;
    if (std::find(options.core.topology_levels.begin(), options.core.topology_levels.end(), name) !=
        options.core.topology_levels.end()) {
      return Status::Invalid("--topology-levels: '" + name + "' is named twice");
    }
    if (!IsValidName(name)) {
      return Status::Invalid("--topology-levels: '" + name + "' is not a node label key");
    }
    options.core.topology_levels.push_back(name);
  }
  for (const std::string& item : Split(flags.gpu_weights, ',')) {
    if (Trim(item).empty()) continue;
    const size_t eq = item.find('=');
    char* end = nullptr;
    const std::string number = eq == std::string::npos ? "" : item.substr(eq + 1);
    const double weight = number.empty() ? -1 : std::strtod(number.c_str(), &end);
    if (eq == std::string::npos || eq == 0 || end == nullptr || *end != '\0' || weight < 0) {
      return Status::Invalid(
          "--gpu-weights: expected TYPE=WEIGHT[,TYPE=WEIGHT], like "
          "A100=2,T4=0.5; got '" +
          item + "'");
    }
    options.core.usage.gpu_weights[Trim(item.substr(0, eq))] = weight;
  }
  options.core.usage.idle_charge = flags.idle_charge;
  BERTH_RETURN_IF_ERROR(ParseNotifyFlags(flags, options));
  return options;
}

// Whether the store is PostgreSQL: several servers share it, one leading at a time (docs/ha.md).
bool IsHaStore(const std::string& store) {
  return store.starts_with("postgresql://") || store.starts_with("postgres://");
}

// The options of a server on a PostgreSQL store.
Result<HaOptions> HaOptionsOf(const ServerFlags& flags, const ServerOptions& options) {
  HaOptions ha_options{
      .store = flags.store, .lease_ms = 0, .advertise_url = flags.advertise, .log_retention_ms = 0};
  auto lease = ParseDuration(flags.leader_lease);
  if (!lease || *lease < 300) {
    return Status::Invalid("--leader-lease: expected a duration of at least 300ms, like 3s");
  }
  ha_options.lease_ms = *lease;
  auto retention = ParseDuration(flags.log_retention);
  if (!retention || *retention < 0) {
    return Status::Invalid("--log-retention: expected a duration like 30d (0: forever)");
  }
  ha_options.log_retention_ms = *retention;
  if ((options.tls || !net::IsLoopbackHost(options.host)) &&
      (options.tls_cert.empty() || options.tls_key.empty())) {
    return Status::Invalid(
        "several servers on one store need one TLS certificate that agents and users can "
        "trust for all of them: give --tls-cert and --tls-key (docs/ha.md)");
  }
  return ha_options;
}

}  // namespace

int RunOpenApi(const std::string& out) {
  const std::string text = SerializeJsonIndented(OpenApiDocument(Server::DescribeRoutes()));
  if (out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (ReadFile(out) == text) return 0;  // the build runs this on every build
  if (!WriteFileAtomic(out, text, /*sync=*/false)) {
    std::fprintf(stderr, "berth: cannot write %s\n", out.c_str());
    return 1;
  }
  return 0;
}

int RunServer(const ServerFlags& flags) {
  SetLogPrefix("server");
  heap::KeepFreedMemory();
  Result<ServerOptions> parsed = ServerOptionsOf(flags);
  if (!parsed.ok()) return Fail(parsed.status());
  ServerOptions options = std::move(*parsed);
  const bool ha = IsHaStore(flags.store);
  HaOptions ha_options;
  if (ha) {
    Result<HaOptions> ha_parsed = HaOptionsOf(flags, options);
    if (!ha_parsed.ok()) return Fail(ha_parsed.status());
    ha_options = std::move(*ha_parsed);
  }

  sigset_t signals = BlockStopSignals();
  int64_t t0 = MonotonicMs();
  // Everything the server writes (database, logs, token) is its own to read.
  ::umask(077);
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec)
    return Fail(
        Status::Internal("cannot create state dir " + options.state_dir + ": " + ec.message()));
  if (ha) {
    WriteSmallFile(flags.pid_file, std::to_string(::getpid()));
    return RunHaServer(options, ha_options, signals, [&](const std::string& url) {
      if (!WriteSmallFile(flags.url_file, url)) LogWarn("cannot write {}", flags.url_file);
      fmt::print("berth server listening on {}\n", url);
      std::fflush(stdout);
    });
  }
  auto store =
      OpenStore(flags.store.empty() ? "sqlite:" + options.state_dir + "/berth.db" : flags.store);
  if (!store.ok()) return Fail(store.status());
  Server server(options, SystemClock::Get(), std::move(*store));
  Status st = server.Start();
  if (!st.ok()) return Fail(st);
  LogInfo("ready in {} ms", MonotonicMs() - t0);
  WriteSmallFile(flags.pid_file, std::to_string(::getpid()));
  if (!WriteSmallFile(flags.url_file, server.url())) LogWarn("cannot write {}", flags.url_file);
  fmt::print("berth server listening on {}\n", server.url());
  if (!server.tls_fingerprint().empty()) {
    fmt::print("tls certificate fingerprint {}\n", server.tls_fingerprint());
  }
  std::fflush(stdout);
  int sig = WaitForStopSignal(signals);
  LogInfo("received signal {}; shutting down", sig);
  server.Stop();
  return 0;
}

namespace {

// The agent's options from its command line; an error names the flag.
// The agent's health flags (cli/daemon_cmds.cpp AddAgentHealthOptions) as settings.
Result<HealthSettings> HealthSettingsOf(const AgentFlags& flags) {
  HealthSettings h;
  h.enabled = flags.health != "off";
  auto duration = [](const std::string& flag, const std::string& text, int64_t* out) -> Status {
    auto d = ParseDuration(text);
    if (!d || *d <= 0) {
      return Status::Invalid(flag + ": expected a duration such as 30s or 2m, got '" + text + "'");
    }
    *out = *d;
    return Status::Ok();
  };
  BERTH_RETURN_IF_ERROR(duration("--health-interval", flags.health_interval, &h.interval_ms));
  BERTH_RETURN_IF_ERROR(duration("--health-timeout", flags.health_timeout, &h.timeout_ms));
  BERTH_RETURN_IF_ERROR(
      duration("--health-idle-interval", flags.health_idle_interval, &h.idle_interval_ms));
  BERTH_RETURN_IF_ERROR(
      duration("--health-idle-timeout", flags.health_idle_timeout, &h.idle_timeout_ms));
  BERTH_RETURN_IF_ERROR(duration("--max-clock-skew", flags.max_clock_skew, &h.max_clock_skew_ms));
  BERTH_RETURN_IF_ERROR(duration("--hook-timeout", flags.hook_timeout, &h.hook_timeout_ms));
  h.clean_runs = flags.health_clean_runs;
  h.scripts_dir = flags.health_dir;
  h.idle_dir = flags.health_idle_dir;
  h.nvidia_smi = flags.nvidia_smi;
  if (flags.kernel_log == "-") {
    h.kernel_log.clear();
  } else if (!flags.kernel_log.empty()) {
    h.kernel_log = flags.kernel_log;
  } else if (::access("/dev/kmsg", R_OK) == 0) {
    h.kernel_log = "/dev/kmsg";
  }
  auto ignore = ParseXidList(flags.xid_ignore);
  if (!ignore.ok()) return Status::Invalid("--xid-ignore: " + ignore.status().message());
  h.xid_ignore = std::move(*ignore);
  auto node = ParseXidList(flags.xid_node);
  if (!node.ok()) return Status::Invalid("--xid-node: " + node.status().message());
  h.xid_node = std::move(*node);
  h.min_free_mib = flags.min_free_disk_mib;
  h.prolog_dir = flags.prolog_dir;
  h.epilog_dir = flags.epilog_dir;
  return h;
}

Result<AgentOptions> AgentOptionsOf(const AgentFlags& flags, const std::string& self_exe) {
  AgentOptions options;
  options.server_url = flags.server.empty()
                           ? (std::getenv("BERTH_SERVER") ? std::getenv("BERTH_SERVER") : "")
                           : flags.server;
  if (options.server_url.empty())
    return Status::Invalid("the agent needs --server URL (or BERTH_SERVER)");
  options.token = ReadToken(flags.token, flags.token_file);
  options.tls_fingerprint = flags.tls_fingerprint;
  if (options.tls_fingerprint.empty()) {
    const char* fp = std::getenv("BERTH_TLS_FINGERPRINT");
    if (fp && *fp) options.tls_fingerprint = fp;
  }
  options.name = flags.name;
  options.state_dir = flags.state_dir;
  options.gpus = flags.gpus;
  options.mig = flags.mig;
  options.mig_reconfigure = flags.mig_reconfigure;
  options.gpu_topology = flags.gpu_topology;
  if (std::optional<DurationMs> every = ParseDuration(flags.gpu_sample_interval);
      every && *every >= 0) {
    options.gpu_sample_interval = *every;  // ("0" reads as 0 minutes: never)
  } else {
    return Status::Invalid("--gpu-sample-interval " + flags.gpu_sample_interval +
                           ": not a duration (10s, 1m; 0: never)");
  }
  if (!flags.cpus.empty()) {
    auto cpus = ParseMilli(flags.cpus);
    if (!cpus || *cpus <= 0)
      return Status::Invalid("--cpus: expected a positive number, got '" + flags.cpus + "'");
    options.cpus = *cpus;
  }
  if (!flags.memory.empty()) {
    auto gib = ParseMilli(flags.memory);
    if (!gib)
      return Status::Invalid("--memory: expected GiB as a number, got '" + flags.memory + "'");
    options.memory = *gib * kMibPerGib / 1000;
  }
  options.pool = flags.pool;
  if (!options.pool.empty() && !IsValidName(options.pool))
    return Status::Invalid("--pool: invalid name");
  for (const auto& l : flags.labels) {
    auto eq = l.find('=');
    if (eq == std::string::npos || !IsValidName(l.substr(0, eq)) ||
        !IsValidName(l.substr(eq + 1))) {
      return Status::Invalid("--label: expected key=value, got '" + l + "'");
    }
    options.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  options.address = flags.address;
  options.self_exe = self_exe;
  options.isolation = flags.isolation != "off";
  options.require_isolation = flags.require_isolation;
  options.job_pids_max = flags.job_pids_max;
  options.gpu_device_dir = flags.gpu_device_dir;
  options.containers = flags.containers != "off";
  options.podman = flags.podman;
  options.insecure_registries = flags.insecure_registries;
  for (std::string path : flags.container_mounts) {
    if (path.empty() || path[0] != '/' || path.find(':') != std::string::npos) {
      return Status::Invalid("--container-mount: expected an absolute path, got '" + path + "'");
    }
    while (path.size() > 1 && path.back() == '/') path.pop_back();  // "/datasets/" is "/datasets"
    options.container_mounts.push_back(std::move(path));
  }
  options.pull_retries = flags.pull_retries;
  options.image_tag_ttl_s = flags.image_tag_ttl;
  if (!flags.job_memory_default.empty()) {
    auto gib = ParseMilli(flags.job_memory_default);
    if (!gib || *gib <= 0) {
      return Status::Invalid("--job-memory-default: expected GiB as a positive number, got '" +
                             flags.job_memory_default + "'");
    }
    options.job_memory_default = *gib * kMibPerGib / 1000;
  }
  auto health = HealthSettingsOf(flags);
  if (!health.ok()) return health.status();
  options.health = std::move(*health);
  return options;
}

// The node's users reach the server through the agent's socket, the kernel vouching for them;
// null with --user-socket -, or when it cannot be made (another agent holds it: Run() says so).
std::unique_ptr<UserSocket> StartUserSocket(const AgentFlags& flags, const AgentOptions& options,
                                            FailoverAgentConnection& connection) {
  if (flags.user_socket == "-") return nullptr;
  std::string path =
      flags.user_socket.empty() ? options.state_dir + "/berth.sock" : flags.user_socket;
  auto user_socket = std::make_unique<UserSocket>(
      path, [&connection] { return connection.current_url(); },
      net::HttpClientOptions{
          .token = options.token, .tls_fingerprint = options.tls_fingerprint, .ca_file = ""});
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  Status st = user_socket->Start();
  if (!st.ok()) {  // e.g. another agent holds it: Run() says so, more clearly
    LogWarn("no user socket: {}", st.message());
    return nullptr;
  }
  LogInfo("users of this node reach the server through unix:{}", path);
  return user_socket;
}

}  // namespace

int RunAgent(const AgentFlags& flags, const std::string& self_exe) {
  SetLogPrefix("agent " + flags.name);
  Result<AgentOptions> parsed = AgentOptionsOf(flags, self_exe);
  if (!parsed.ok()) return Fail(parsed.status());
  AgentOptions options = std::move(*parsed);
  if (flags.hollow > 0) {
    sigset_t signals = BlockStopSignals();
    HollowNodes hollow(options, flags.hollow, SystemClock::Get());
    std::thread waiter([&] {
      WaitForStopSignal(signals);
      hollow.RequestStop();
    });
    WriteSmallFile(flags.pid_file, std::to_string(::getpid()));
    Status st = hollow.Run();
    ::kill(::getpid(), SIGTERM);
    waiter.join();
    return st.ok() ? 0 : Fail(st);
  }
  if (flags.state_dir.empty())
    return Fail(Status::Invalid("the agent needs --state-dir (unless --hollow)"));
  sigset_t signals = BlockStopSignals();
  options.base_environment = proto::FilterBaseEnvironment(proto::EnvironmentFromArray(environ));
  if (::geteuid() == 0) {
    options.lookup_account = LookupJobAccount;
    LogInfo("running as root: each job runs as its user");
  } else {
    std::string self = UserNameOf(::geteuid()).value_or("uid " + std::to_string(::geteuid()));
    options.only_user = self;
    LogInfo("not running as root: only {}'s jobs run here (as {}); other users' jobs fail", self,
            self);
  }
  // --server may list several servers sharing one store (docs/ha.md): the agent follows the leader.
  const std::vector<std::string> server_urls = SplitServerUrls(options.server_url);
  if (server_urls.empty()) return Fail(Status::Invalid("--server: no URL given"));
  // The node's own credential, kept in its state dir (obtained with a join token at the first
  // start), wins over the cluster token.
  const std::string join_token =
      flags.join_token_file.empty() ? "" : ReadToken("", flags.join_token_file);
  if (!flags.join_token_file.empty() && join_token.empty()) {
    return Fail(
        Status::Invalid("--join-token-file: cannot read a token from " + flags.join_token_file));
  }
  auto credential =
      ObtainNodeCredential(options.state_dir, join_token, options.name,
                           [&](const std::string& token, const std::string& node) {
                             return JoinCluster(server_urls, options.tls_fingerprint, token, node);
                           });
  if (!credential.ok()) return Fail(credential.status());
  if (!credential->empty()) options.token = *credential;
  FailoverAgentConnection connection(server_urls, options.token, options.tls_fingerprint);
  SupervisorLauncher launcher(options.self_exe, options.state_dir);
  Agent agent(options, SystemClock::Get(), connection, launcher);
  std::unique_ptr<UserSocket> user_socket = StartUserSocket(flags, options, connection);
  std::thread waiter([&] {
    WaitForStopSignal(signals);
    agent.RequestStop();
  });
  WriteSmallFile(flags.pid_file, std::to_string(::getpid()));
  Status st = agent.Run();
  if (!st.ok()) {
    // Wake the waiter so it can exit, then report.
    ::kill(::getpid(), SIGTERM);
    waiter.join();
    return Fail(st);
  }
  ::kill(::getpid(), SIGTERM);
  waiter.join();
  return 0;
}

int RunSupervisor(const std::string& dir) { return SupervisorMain(dir); }

int RunNodeSupervisor(const std::string& state_dir) { return NodeSupervisorMain(3, state_dir); }

}  // namespace berth::exe
