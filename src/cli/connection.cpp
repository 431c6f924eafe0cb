#include "cli/connection.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/files.h"
#include "common/strings.h"

namespace berth::cli {

namespace {

std::string LocalStatePath() { return BerthHome() + "/local.json"; }
std::string ConfigPath() { return BerthHome() + "/config"; }
std::string LocalSocketPath() { return BerthHome() + "/server/berth.sock"; }

// A zombie counts as gone: the daemons are re-parented to init, and an init that reaps lazily (or
// never, as a container's PID 1 may) would otherwise make `local down` wait out its whole timeout.
bool Alive(int pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::string stat = ReadFileOr("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Starts `argv` detached from this terminal (own session), output appended to `log_path`.
Result<int> SpawnDaemon(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::Internal("cannot open " + log_path + ": " + strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) return Status::Internal(std::string("fork failed: ") + strerror(errno));
  if (pid == 0) {
    ::setsid();
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    // Double fork: the daemon is re-parented to init and never becomes our zombie.
    pid_t inner = ::fork();
    if (inner != 0) _exit(inner < 0 ? 1 : 0);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(log_fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status::Internal("could not start " + args[0]);
  return 0;
}

int ReadPidFile(const std::string& path) {
  std::string s = Trim(ReadFileOr(path));
  return s.empty() ? 0 : std::atoi(s.c_str());
}

bool WaitFor(const std::function<bool()>& done, DurationMs timeout_ms) {
  int64_t deadline = MonotonicMs() + timeout_ms;
  while (MonotonicMs() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

bool Healthy(const std::string& url) {
  net::HttpClient client(url, "");
  auto res = client.Request("GET", "/v1/health", "", 2000);
  return res.ok() && (res->status == 200 || res->status == 401);
}

void TerminateAndWait(const std::vector<int>& pids, DurationMs timeout_ms) {
  for (int pid : pids) {
    if (Alive(pid)) ::kill(pid, SIGTERM);
  }
  bool gone = WaitFor(
      [&] {
        for (int pid : pids) {
          if (Alive(pid)) return false;
        }
        return true;
      },
      timeout_ms);
  if (!gone) {
    for (int pid : pids) {
      if (Alive(pid)) ::kill(pid, SIGKILL);
    }
  }
}

}  // namespace

std::string BerthHome() {
  const char* home = std::getenv("BERTH_HOME");
  if (home && *home) return home;
  const char* user_home = std::getenv("HOME");
  return std::string(user_home && *user_home ? user_home : "/tmp") + "/.berth";
}

Result<LocalCluster> FindLocalCluster() {
  std::string text = ReadFileOr(LocalStatePath());
  if (text.empty()) return Status::NotFound("no local cluster under " + BerthHome());
  auto v = ParseJson(text, LocalStatePath());
  if (!v.ok() || !v->is_object()) return Status::NotFound("no local cluster under " + BerthHome());
  const json::object& o = v->as_object();
  LocalCluster c;
  c.server = GetString(o, "server").value();
  c.server_pid = static_cast<int>(GetInt(o, "server_pid", 0).value());
  if (const auto* n = o.if_contains("nodes"); n && n->is_array()) {
    for (const auto& x : n->as_array()) {
      if (x.is_string()) c.nodes.emplace_back(x.as_string());
    }
  }
  if (const auto* p = o.if_contains("agent_pids"); p && p->is_array()) {
    for (const auto& x : p->as_array())
      c.agent_pids.push_back(static_cast<int>(AsInt(x).value_or(0)));
  }
  if (::access(LocalSocketPath().c_str(), F_OK) == 0) c.unix_socket = "unix:" + LocalSocketPath();
  // Asked through its unix socket where there is one: no name resolution, no TCP handshake.
  if (c.server.empty() || !Healthy(c.unix_socket.empty() ? c.server : c.unix_socket))
    return Status::NotFound("the local cluster under " + BerthHome() + " is not running");
  return c;
}

Result<LoginConfig> ReadLoginConfig() {
  std::string text = ReadFileOr(ConfigPath());
  if (text.empty()) return Status::NotFound("no login config at " + ConfigPath());
  auto v = ParseJson(text, ConfigPath());
  if (!v.ok()) return v.status();
  if (!v->is_object()) return Status::Invalid(ConfigPath() + ": expected a JSON object");
  const json::object& o = v->as_object();
  LoginConfig c;
  c.server = GetString(o, "server").value();
  c.token = GetString(o, "token").value();
  c.tls_fingerprint = GetString(o, "tls_fingerprint").value();
  return c;
}

Status WriteLoginConfig(const LoginConfig& config) {
  std::error_code ec;
  std::filesystem::create_directories(BerthHome(), ec);
  if (ec) return Status::Internal("cannot create " + BerthHome() + ": " + ec.message());
  json::object o{{"server", config.server},
                 {"token", config.token},
                 {"tls_fingerprint", config.tls_fingerprint}};
  if (!WriteFileAtomic(ConfigPath(), SerializeJson(o) + "\n", /*sync=*/true, 0600)) {
    return Status::Internal("cannot write " + ConfigPath() + ": " + strerror(errno));
  }
  return Status::Ok();
}

Result<LocalCluster> StartLocalCluster(const std::string& self_exe,
                                       const LocalClusterOptions& options) {
  std::string home = BerthHome();
  std::error_code ec;
  std::filesystem::create_directories(home + "/logs", ec);
  if (ec) return Status::Internal("cannot create " + home + ": " + ec.message());
  if (options.nodes < 1 || options.nodes > 256)
    return Status::Invalid("--nodes must be between 1 and 256");

  // Reuse the previous port when there was one, so that jobs' agents and users' BERTH_SERVER keep
  // working.
  std::string listen = "127.0.0.1:0";
  if (auto old = ParseJson(ReadFileOr(LocalStatePath()), "local.json");
      old.ok() && old->is_object()) {
    const json::object& o = old->as_object();
    auto url = net::ParseUrl(GetString(o, "server").value());
    if (url.ok()) listen = fmt::format("127.0.0.1:{}", url->port);
    // What is left of the previous cluster (its server died or hangs; its agents outlive it,
    // retrying) goes first: an old agent would hold its state dir against the new one and serve the
    // new server.
    std::vector<int> stale = {static_cast<int>(GetInt(o, "server_pid", 0).value())};
    if (const auto* p = o.if_contains("agent_pids"); p && p->is_array()) {
      for (const auto& x : p->as_array()) stale.push_back(static_cast<int>(AsInt(x).value_or(0)));
    }
    std::erase_if(stale, [&](int pid) {
      return !Alive(pid) || ReadFileOr("/proc/" + std::to_string(pid) + "/cmdline").find(home) ==
                                std::string::npos;
    });
    TerminateAndWait(stale, 5000);
  }
  std::string state = home + "/server";
  std::string url_file = state + "/server.url";
  std::filesystem::create_directories(state, ec);
  std::filesystem::remove(url_file, ec);
  auto start_server = [&](const std::string& addr) {
    std::vector<std::string> args = {
        self_exe, "server",     "--listen", addr,         "--state-dir",
        state,    "--url-file", url_file,   "--pid-file", state + "/server.pid"};
    // The local cluster is its user's own, and only theirs: when that is root, its jobs are
    // root's.
    args.push_back("--owner-only");
    if (::geteuid() == 0) args.push_back("--allow-root-jobs");
    return SpawnDaemon(args, home + "/logs/server.log");
  };
  auto started = start_server(listen);
  if (!started.ok()) return started.status();
  bool up = WaitFor([&] { return !Trim(ReadFileOr(url_file)).empty(); }, 10'000);
  if (!up && listen != "127.0.0.1:0") {
    started = start_server("127.0.0.1:0");  // the old port is taken: take any
    if (!started.ok()) return started.status();
    up = WaitFor([&] { return !Trim(ReadFileOr(url_file)).empty(); }, 10'000);
  }
  if (!up)
    return Status::Unavailable("the local server did not start; see " + home + "/logs/server.log");
  LocalCluster c;
  c.server = Trim(ReadFileOr(url_file));
  c.unix_socket = "unix:" + LocalSocketPath();
  c.server_pid = ReadPidFile(state + "/server.pid");
  TimeMs agents_started = SystemClock::Get().Now();
  for (int i = 0; i < options.nodes; ++i) {
    std::string name = fmt::format("local-{}", i);
    std::string dir = home + "/agents/" + name;
    std::filesystem::create_directories(dir, ec);
    // The agents present the cluster token like any node's (the server made it before listening).
    std::vector<std::string> args = {
        self_exe,      "agent", "--server",   c.server,           "--name",       name,
        "--state-dir", dir,     "--pid-file", dir + "/agent.pid", "--token-file", state + "/token"};
    if (!options.gpus.empty()) args.insert(args.end(), {"--gpus", options.gpus});
    if (!options.cpus.empty()) args.insert(args.end(), {"--cpus", options.cpus});
    if (!options.memory.empty()) args.insert(args.end(), {"--memory", options.memory});
    if (options.isolation != "auto") args.insert(args.end(), {"--isolation", options.isolation});
    std::filesystem::remove(dir + "/agent.pid", ec);
    auto agent = SpawnDaemon(args, home + "/logs/agent-" + name + ".log");
    if (!agent.ok()) return agent.status();
    c.nodes.push_back(name);
  }
  // Ready when every node is UP and was seen since its agent started: a restarted server lists the
  // nodes it knew as UP for a lease period before any agent is back, and the agents' pid files
  // (recorded below for `local down`) may not be written yet.
  net::HttpClient client(c.unix_socket, "");
  bool ready = WaitFor(
      [&] {
        auto res = client.Request("GET", "/v1/nodes", "", 2000);
        if (!res.ok() || res->status != 200) return false;
        auto v = ParseJson(res->body);
        if (!v.ok()) return false;
        size_t up_count = 0;
        for (const auto& n : v->as_object().at("nodes").as_array()) {
          const auto& o = n.as_object();
          std::string name(o.at("name").as_string());
          auto seen = TimeFromJson(o.at("last_seen"));
          if (o.at("state").as_string() == "UP" && seen && *seen >= agents_started &&
              std::find(c.nodes.begin(), c.nodes.end(), name) != c.nodes.end()) {
            ++up_count;
          }
        }
        if (up_count != c.nodes.size()) return false;
        for (const auto& name : c.nodes) {
          if (ReadPidFile(home + "/agents/" + name + "/agent.pid") <= 0) return false;
        }
        return true;
      },
      15'000);
  for (const auto& name : c.nodes)
    c.agent_pids.push_back(ReadPidFile(home + "/agents/" + name + "/agent.pid"));
  json::array nodes;
  for (const auto& n : c.nodes) nodes.push_back(json::value(n));
  json::array pids;
  for (int p : c.agent_pids) pids.push_back(p);
  json::object record{{"server", c.server},
                      {"server_pid", c.server_pid},
                      {"nodes", std::move(nodes)},
                      {"agent_pids", std::move(pids)}};
  std::ofstream(LocalStatePath()) << SerializeJson(record) << "\n";
  if (!ready) {
    return Status::Unavailable("the local agents did not come up; see " + home +
                               "/logs/agent-*.log");
  }
  return c;
}

namespace {

// Mount points (field 5 of /proc/self/mountinfo, octal escapes undone) at or below one of `roots`,
// deepest first.
std::vector<std::string> MountsUnder(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& line : Split(ReadFileOr("/proc/self/mountinfo"), '\n')) {
    const std::vector<std::string> fields = Split(line, ' ');
    if (fields.size() < 5) continue;
    std::string point;
    const std::string& raw = fields[4];
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 3 < raw.size()) {
        point += static_cast<char>(std::stoi(raw.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        point += raw[i];
      }
    }
    for (const std::string& root : roots) {
      if (!root.empty() && (point == root || StartsWith(point, root + "/"))) {
        out.push_back(point);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

// What podman leaves after the local cluster's container jobs: each user's pause process (it
// holds their rootless namespace and the mounts in it), and as root the storage's own mounts
// below BERTH_HOME and the run dirs. Returns how many mounts went.
int CleanUpAfterPodman(const std::string& home, const std::vector<std::string>& agent_dirs) {
  std::vector<std::string> roots = {home};
  for (const std::string& agent : agent_dirs) {
    const std::string run_dir = Trim(ReadFileOr(agent + "/container-run-dir"));
    if (run_dir.empty() || run_dir[0] != '/') continue;
    roots.push_back(run_dir);
    DIR* d = opendir(run_dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      const int pid = ReadPidFile(run_dir + "/" + e->d_name + "/xdg/libpod/tmp/pause.pid");
      const std::string cmdline = ReadFileOr("/proc/" + std::to_string(pid) + "/cmdline");
      if (pid > 0 && (cmdline.find("catatonit") != std::string::npos ||
                      cmdline.find("podman") != std::string::npos)) {
        ::kill(pid, SIGKILL);
      }
    }
    closedir(d);
  }
  int unmounted = 0;
  if (::geteuid() != 0) return 0;  // a user's own mounts live in their namespace, gone with it
  for (const std::string& point : MountsUnder(roots)) {
    if (::umount2(point.c_str(), MNT_DETACH) == 0) ++unmounted;
  }
  return unmounted;
}

}  // namespace

std::optional<NodeAgentHere> FindNodeAgent(const std::string& proc) {
  DIR* d = opendir(proc.c_str());
  if (d == nullptr) return std::nullopt;
  std::optional<NodeAgentHere> found;
  while (dirent* e = readdir(d)) {
    if (found) break;
    const std::string name = e->d_name;
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const std::string cmdline = ReadFileOr(proc + "/" + name + "/cmdline");
    std::vector<std::string> argv = Split(cmdline, '\0');
    while (!argv.empty() && argv.back().empty()) argv.pop_back();
    if (argv.size() < 2 || argv[1] != "agent") continue;
    const std::string exe = std::filesystem::path(argv[0]).filename().string();
    if (exe != "berth" && exe != "berth-daemon") continue;
    auto flag = [&](const std::string& f) -> std::string {
      for (size_t i = 2; i < argv.size(); ++i) {
        if (argv[i] == f && i + 1 < argv.size()) return argv[i + 1];
        if (StartsWith(argv[i], f + "=")) return argv[i].substr(f.size() + 1);
      }
      return "";
    };
    NodeAgentHere agent{.pid = std::atoi(name.c_str()),
                        .state_dir = flag("--state-dir"),
                        .server = flag("--server")};
    // A local cluster's own agents (any user's): BERTH_HOME/agents/local-N.
    const std::filesystem::path dir(agent.state_dir);
    if (dir.parent_path().filename() == "agents" && StartsWith(dir.filename().string(), "local-")) {
      continue;
    }
    const std::string socket = flag("--user-socket");
    if (socket != "-") {
      agent.user_socket =
          socket.empty() && !agent.state_dir.empty() ? agent.state_dir + "/berth.sock" : socket;
    }
    found = agent;
  }
  closedir(d);
  return found;
}

Status StopLocalCluster(const std::function<void(const std::string&)>& say_fn) {
  auto say = [&](const std::string& what) {
    if (say_fn) say_fn(what);
  };
  std::string text = ReadFileOr(LocalStatePath());
  std::string home = BerthHome();
  std::vector<int> agents;
  int server_pid = 0;
  if (auto v = ParseJson(text, "local.json"); v.ok() && v->is_object()) {
    server_pid = static_cast<int>(GetInt(v->as_object(), "server_pid", 0).value());
    if (const auto* p = v->as_object().if_contains("agent_pids"); p && p->is_array()) {
      for (const auto& x : p->as_array()) agents.push_back(static_cast<int>(AsInt(x).value_or(0)));
    }
  }
  // Agents first (they stop taking work), then the jobs' supervisors (each stops its job's
  // processes and records the exit, reported when the cluster comes back), then the server.
  if (!agents.empty()) say(fmt::format("Stopping {} node agent(s)", agents.size()));
  TerminateAndWait(agents, 5000);
  std::vector<std::string> agent_dirs;
  std::vector<int> supervisors;
  // A supervisor runs every job of its node (`berth __node STATE_DIR`) or one (`berth __supervise
  // DIR`, the agent's fallback); the pid files say which processes they are.
  auto add_supervisor = [&](const std::string& pid_file) {
    int pid = ReadPidFile(pid_file);
    std::string cmdline = ReadFileOr("/proc/" + std::to_string(pid) + "/cmdline");
    if (pid > 0 &&
        (cmdline.find("__supervise") != std::string::npos ||
         cmdline.find("__node") != std::string::npos) &&
        std::find(supervisors.begin(), supervisors.end(), pid) == supervisors.end()) {
      supervisors.push_back(pid);
    }
  };
  std::string agents_dir = home + "/agents";
  if (DIR* d = opendir(agents_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      agent_dirs.push_back(agents_dir + "/" + e->d_name);
      add_supervisor(agents_dir + "/" + e->d_name + "/supervisor.pid");
      std::string jobs = agents_dir + "/" + e->d_name + "/jobs";
      DIR* j = opendir(jobs.c_str());
      if (!j) continue;
      while (dirent* f = readdir(j)) {
        add_supervisor(jobs + "/" + f->d_name + "/supervisor.pid");
      }
      closedir(j);
    }
    closedir(d);
  }
  if (!supervisors.empty()) {
    say(fmt::format("Stopping the jobs' supervisor(s) and what still runs (up to 15 s)"));
  }
  TerminateAndWait(supervisors, 15'000);
  if (server_pid > 0) {
    say("Stopping the server");
    TerminateAndWait({server_pid}, 5000);
  }
  if (const int n = CleanUpAfterPodman(home, agent_dirs); n > 0) {
    say(fmt::format("Unmounted {} mount(s) podman left below {}", n, home));
  }
  if (agents.empty() && server_pid == 0) return Status::NotFound("no local cluster under " + home);
  return Status::Ok();
}

Connection::Connection(std::string server_flag, std::string token_flag, std::string self_exe)
    : server_flag_(std::move(server_flag)),
      token_(std::move(token_flag)),
      self_exe_(std::move(self_exe)) {}

Status Connection::Connect() {
  if (token_.empty()) {
    if (const char* t = std::getenv("BERTH_TOKEN"); t && *t) token_ = t;
  }
  if (token_.empty()) {
    if (const char* f = std::getenv("BERTH_TOKEN_FILE"); f && *f) token_ = Trim(ReadFileOr(f));
  }
  url_ = server_flag_;
  if (url_.empty()) {
    if (const char* s = std::getenv("BERTH_SERVER"); s && *s) url_ = s;
  }
  auto login = ReadLoginConfig();
  if (login.ok() && !login->server.empty() && (url_.empty() || url_ == login->server)) {
    url_ = login->server;
    tls_fingerprint_ = login->tls_fingerprint;
    if (token_.empty()) token_ = login->token;
  }
  if (url_.empty()) {
    // The local cluster, through its unix socket: the kernel tells the server who we are. Where the
    // socket is there, the first call finds out whether the server still listens (and starts the
    // cluster if not): a command then costs one round trip, not two.
    if (::access(LocalSocketPath().c_str(), F_OK) == 0 &&
        ::access(LocalStatePath().c_str(), F_OK) == 0) {
      url_ = "unix:" + LocalSocketPath();
      local_unverified_ = true;
    } else if (auto agent = std::getenv("BERTH_HOME") ? std::nullopt : FindNodeAgent(); agent) {
      // A node of a real cluster: a private cluster here would be one nobody meant (and would
      // declare this machine's GPUs a second time). BERTH_HOME set says a local cluster there is
      // meant.
      const std::string where =
          !agent->user_socket.empty() ? "unix:" + agent->user_socket : agent->server;
      return Status::Invalid(fmt::format(
          "this machine runs a berth agent (pid {}, state dir {}): its cluster is reached with "
          "--server {} (or export BERTH_SERVER={}); `berth local up` starts a private cluster "
          "here anyway",
          agent->pid, agent->state_dir.empty() ? "-" : agent->state_dir, where, where));
    } else {
      Result<std::string> local = FindOrStartLocalCluster();
      if (!local.ok()) return local.status();
      url_ = *local;
    }
  }
  for (const std::string& url : Split(url_, ',')) {
    if (!Trim(url).empty()) urls_.push_back(Trim(url));
  }
  if (urls_.empty()) return Status::Invalid("--server: no URL given");
  // A token never crosses a network in the clear.
  for (const std::string& each : urls_) {
    if (!token_.empty() && StartsWith(each, "http://")) {
      auto url = net::ParseUrl(each);
      if (url.ok() && !net::IsLoopbackHost(url->host)) {
        return Status::Invalid("refusing to send your token over plain HTTP to " + url->host +
                               ": use the server's https:// URL");
      }
    }
  }
  // BERTH_TLS_FINGERPRINT, when set, pins over the login's.
  if (const char* fp = std::getenv("BERTH_TLS_FINGERPRINT"); fp && *fp) tls_fingerprint_ = fp;
  UseServer(urls_.front());
  return Status::Ok();
}

Result<std::string> Connection::FindOrStartLocalCluster() {
  auto local = FindLocalCluster();
  if (!local.ok()) {
    fmt::print(stderr,
               "berth: no server configured and no local cluster running; starting one under {}\n",
               BerthHome());
    auto started = StartLocalCluster(self_exe_, LocalClusterOptions{});
    if (!started.ok()) return started.status();
    fmt::print(stderr, "berth: local cluster up at {} (stop it with `berth local down`)\n",
               started->server);
    local = started;
  }
  return local->unix_socket.empty() ? local->server : local->unix_socket;
}

Status Connection::VerifyLocal() {
  if (!local_unverified_) return Status::Ok();
  local_unverified_ = false;
  Result<std::string> url = FindOrStartLocalCluster();
  if (!url.ok()) return url.status();
  urls_ = {*url};
  UseServer(*url);
  return Status::Ok();
}

net::HttpClient& Connection::http() {
  // Streaming callers send through the client directly: make sure it reaches a running server.
  if (Status st = VerifyLocal(); !st.ok()) fmt::print(stderr, "berth: {}\n", st.message());
  return *client_;
}

void Connection::UseServer(const std::string& url) {
  url_ = url;
  client_ = std::make_unique<net::HttpClient>(
      url_,
      net::HttpClientOptions{.token = token_, .tls_fingerprint = tls_fingerprint_, .ca_file = ""});
}

std::string NewIdempotencyKey() { return RandomHex(16); }

std::unique_ptr<Connection> Connection::Another() const {
  auto other = std::make_unique<Connection>(url_, token_, self_exe_);
  other->tls_fingerprint_ = tls_fingerprint_;
  other->url_ = url_;
  other->urls_ = {url_};
  other->client_ = std::make_unique<net::HttpClient>(
      url_,
      net::HttpClientOptions{.token = token_, .tls_fingerprint = tls_fingerprint_, .ca_file = ""});
  return other;
}

Result<json::value> Connection::Call(const std::string& method, const std::string& target,
                                     const std::string& body, DurationMs timeout_ms) {
  return Decode(Send(method, target, body, timeout_ms, {}, /*repeatable=*/false), method, target);
}

Result<json::value> Connection::CallIdempotent(const std::string& method, const std::string& target,
                                               const std::string& body, const std::string& key,
                                               DurationMs timeout_ms) {
  bool maybe_delivered = true;
  Result<net::HttpResponse> res = Send(method, target, body, timeout_ms, {{"Idempotency-Key", key}},
                                       /*repeatable=*/true, &maybe_delivered);
  if (!res.ok() || res->status >= 500) {
    Status failed = res.ok() ? Decode(std::move(res), method, target).status() : res.status();
    if (!maybe_delivered) {
      return Status(failed.code(),
                    failed.message() +
                        "\nberth: nothing was submitted (no server was reached); the same command "
                        "with --idempotency-key " +
                        key + " is safe to run again (it never submits twice)");
    }
    return Status(failed.code(),
                  failed.message() +
                      "\nberth: it may or may not have been recorded; the same command with "
                      "--idempotency-key " +
                      key + " finds out (it never submits twice)");
  }
  return Decode(std::move(res), method, target);
}

Result<net::HttpResponse> Connection::Send(const std::string& method, const std::string& target,
                                           const std::string& body, DurationMs timeout_ms,
                                           const net::HttpHeaders& headers, bool repeatable,
                                           bool* maybe_delivered) {
  // Whether some attempt may have reached a server: any that got past connecting.
  bool ignored = false;
  bool& delivered = maybe_delivered ? *maybe_delivered : ignored;
  delivered = false;
  auto request = [&] {
    Result<net::HttpResponse> sent = client_->Request(method, target, body, timeout_ms, headers);
    if (!NeverSent(sent)) delivered = true;
    return sent;
  };
  Result<net::HttpResponse> res = request();
  if (local_unverified_) {
    // The local server's socket was there but nothing listens on it: the request reached no
    // server, so it goes again once the cluster runs. A server that took the request and never
    // answered (it hangs) is replaced too, but only a request that is safe to repeat goes again.
    const bool refused = !res.ok() && StartsWith(res.status().message(), "cannot connect");
    const bool hung =
        !res.ok() && res.status().message().find("did not answer") != std::string::npos;
    if (refused || hung) {
      if (Status st = VerifyLocal(); !st.ok()) return st;
      if (refused || method == "GET" || repeatable) {
        res = request();
      }
    }
    local_unverified_ = false;
  }
  const int64_t started = MonotonicMs();
  const int64_t give_up = started + kFailoverWaitMs;
  bool announced = false;
  for (size_t tried = 1; urls_.size() > 1 || repeatable; ++tried) {
    // Another server is worth asking only when this one surely did nothing with the request: it
    // could not be reached, or it is a follower.
    const bool unreachable = NeverSent(res);
    const bool follower = res.ok() && res->status == 503 && !res->Header("X-Berth-Leader").empty();
    const bool no_leader = res.ok() && res->status == 503 &&
                           res->Header("X-Berth-Leader").empty() &&
                           !res->Header("Retry-After").empty();
    // A deposed leader that has not noticed yet: its store refused the write (the fence), so
    // nothing was written.
    const bool fenced =
        res.ok() && res->status == 503 && res->body.find("no longer leads") != std::string::npos;
    // A repeatable request is sent again whatever became of it: the answer was lost, or the
    // server could not commit (it may have).
    const bool unknown =
        repeatable && (!res.ok() || res->status == 502 || res->status == 503 || res->status == 504);
    if (!unreachable && !follower && !no_leader && !fenced && !unknown) break;
    const int64_t now = MonotonicMs();
    if (now >= give_up) break;
    if (!announced && now - started >= kAnnounceWaitMs) {
      // A restart or a failover is ridden out, but not in silence.
      announced = true;
      fmt::print(
          stderr, "berth: {}; trying again for up to {} s\n",
          res.ok() ? fmt::format("{} answered {}", url_, res->status) : res.status().message(),
          (give_up - now + 999) / 1000);
    }
    std::string next =
        urls_[(std::find(urls_.begin(), urls_.end(), url_) - urls_.begin() + 1) % urls_.size()];
    if (follower) {
      const std::string leader = res->Header("X-Berth-Leader");
      if (std::find(urls_.begin(), urls_.end(), leader) != urls_.end()) next = leader;
    }
    // Once around the list without a leader: a failover is under way; wait a little.
    if (tried % urls_.size() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    UseServer(next);
    res = request();
  }
  return res;
}

bool Connection::NeverSent(const Result<net::HttpResponse>& res) {
  return !res.ok() && (StartsWith(res.status().message(), "cannot connect") ||
                       StartsWith(res.status().message(), "cannot resolve"));
}

Result<json::value> Connection::Decode(Result<net::HttpResponse> res, const std::string& method,
                                       const std::string& target) const {
  if (!res.ok()) return res.status();
  auto v = ParseJson(res->body, "server answer");
  // Something other than a berth server (a web page, a proxy's error) answers without berth's
  // {"error": ...}: say so, rather than print its HTML or nothing.
  const std::string path = target.substr(0, target.find('?'));
  const std::string not_berth =
      fmt::format("{} answered {} to {} {}: is it a berth server? (--server, BERTH_SERVER)",
                  url_.empty() ? "the server" : url_, res->status, method, path);
  if (res->status >= 200 && res->status < 300) {
    if (!v.ok() || !v->is_object()) return Status::Internal(not_berth);
    return v;
  }
  std::string message;
  if (v.ok() && v->is_object()) {
    if (auto error = GetString(v->as_object(), "error"); error.ok()) message = *error;
  }
  if (message.empty()) message = not_berth;
  Code code = res->status == 404   ? Code::kNotFound
              : res->status == 401 ? Code::kUnauthorized
              : res->status == 403 ? Code::kForbidden
              : res->status == 409 ? Code::kConflict
              : res->status == 422 ? Code::kInfeasible
              : res->status >= 500 ? Code::kInternal
                                   : Code::kInvalidArgument;
  return Status(code, message);
}

}  // namespace berth::cli
