// `berth port-forward JOB [LOCAL:]REMOTE [--rank R]`: a local port that reaches a port a running
// job listens on (Jupyter, TensorBoard, a debugger), through the server (docs/user-guide.md
// "Interactive work"; docs/api.md "Port forwarding"). Each connection accepted on the local port
// becomes a WebSocket (GET /v1/jobs/{id}/port-forward) that the server relays to the rank's agent,
// which connects to the port on its node, once it has checked that the rank itself listens there.
// It runs until Ctrl-C or the job's end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/connection.h"
#include "common/json_util.h"
#include "common/mutex.h"
#include "net/ws_stream.h"

namespace berth::cli {

namespace {

// Connections relayed at once; more wait in the listen backlog.
constexpr int kMaxConnections = 64;
// How often the job's status is checked while nothing else happens.
constexpr int kCheckJobMs = 2'000;

int g_stop_pipe[2] = {-1, -1};

void OnStopSignal(int) {
  const char byte = 1;
  (void)!::write(g_stop_pipe[1], &byte, 1);
}

struct ForwardFlags {
  int64_t id = 0;
  std::string ports;  // [LOCAL:]REMOTE
  int rank = 0;
  std::string address = "127.0.0.1";
};

// What the connection threads share with the command.
struct Relays {
  std::atomic<bool> stop{false};
  Mutex mu;
  CondVar cv;
  int running GUARDED_BY(mu) = 0;
};

// "8888" (the same port here), "9000:8888", ":8888" or "0:8888" (any free port here).
Status ParsePorts(const std::string& text, int* local, int* remote) {
  const size_t colon = text.find(':');
  auto port = [](const std::string& s, int min, int* out) {
    try {
      size_t used = 0;
      const int p = std::stoi(s, &used);
      if (used != s.size() || p < min || p > 65535) return false;
      *out = p;
      return true;
    } catch (...) {
      return false;
    }
  };
  const std::string remote_text = colon == std::string::npos ? text : text.substr(colon + 1);
  const std::string local_text = colon == std::string::npos ? text : text.substr(0, colon);
  if (!port(remote_text, 1, remote) || (!local_text.empty() && !port(local_text, 0, local))) {
    return Status::Invalid(fmt::format(
        "'{}' is not [LOCAL:]REMOTE (ports, e.g. 8888 or 9000:8888; LOCAL 0 or empty: any)", text));
  }
  if (local_text.empty()) *local = 0;
  return Status::Ok();
}

Result<int> Listen(const std::string& address, int port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* sin = reinterpret_cast<sockaddr_in*>(&addr);
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (::inet_pton(AF_INET, address.c_str(), &sin->sin_addr) == 1) {
    sin->sin_family = AF_INET;
    sin->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, address.c_str(), &sin6->sin6_addr) == 1) {
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return Status::Invalid(fmt::format("--address '{}' is not an IP address", address));
  }
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 128) != 0) {
    Status failed = Status::Unavailable(
        fmt::format("cannot listen on {} port {}: {}", address, port, std::strerror(errno)));
    ::close(fd);
    return failed;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                         : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

// Relays one accepted connection `fd` to the job's port (on a thread of its own; closes `fd`).
void RelayConnection(const GlobalFlags& g, const ForwardFlags& f, int remote, int fd,
                     Relays& relays) {
  Connection conn(g.server, g.token, g.self_exe);
  std::unique_ptr<net::WebSocketClient> ws;
  Status failed = conn.Connect();
  if (failed.ok()) {
    auto opened = conn.http().OpenWebSocket(
        fmt::format("/v1/jobs/{}/port-forward?port={}&rank={}", f.id, remote, f.rank),
        net::kStreamSubprotocol, 30'000, &ws, 1 << 20);
    if (!opened.ok()) {
      failed = opened.status();
    } else if (!ws) {
      failed = conn.Decode(*opened, "GET", fmt::format("/v1/jobs/{}/port-forward", f.id)).status();
    }
  }
  if (ws) {
    Status relayed = net::RelayStream(*ws, fd, relays.stop);
    if (ws->close_code() == net::kStreamRefusedCode) {
      failed = Status::Conflict(ws->close_reason());
    } else if (!relayed.ok() && !relays.stop) {
      failed = relayed;
    }
  }
  ::close(fd);
  if (!failed.ok()) {
    fmt::print(stderr, "berth: port-forward to job {} port {}: {}\n", f.id, remote,
               failed.message());
  }
}

// The job's status, or "" when it cannot be read now.
std::string StatusOf(Connection& conn, int64_t id) {
  auto job = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!job.ok()) return "";
  auto status = GetString(job->as_object(), "status");
  return status.ok() ? *status : "";
}

int PortForward(const GlobalFlags& g, const ForwardFlags& f) {
  int local = 0, remote = 0;
  if (Status st = ParsePorts(f.ports, &local, &remote); !st.ok()) return Fail(st);
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  if (Status st = WaitUntilRunning(conn, f.id); !st.ok()) return Fail(st);
  // The server's checks (whose job, which rank) before anything listens here.
  auto allowed = conn.Call(
      "GET", fmt::format("/v1/jobs/{}/port-forward?port={}&rank={}", f.id, remote, f.rank));
  if (!allowed.ok()) return Fail(allowed.status());
  auto listener = Listen(f.address, local);
  if (!listener.ok()) return Fail(listener.status());
  if (::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Fail(Status::Internal("cannot make a pipe for signals"));
  }
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  ::sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
  fmt::print("Forwarding {}:{} -> job {} rank {} port {} (Ctrl-C to stop)\n", f.address,
             BoundPort(*listener), f.id, f.rank, remote);
  std::fflush(stdout);

  auto relays = std::make_shared<Relays>();
  while (true) {
    pollfd fds[2] = {{*listener, 0, 0}, {g_stop_pipe[0], POLLIN, 0}};
    {
      MutexLock lock(relays->mu);
      if (relays->running < kMaxConnections) fds[0].events = POLLIN;
    }
    const int ready = ::poll(fds, 2, kCheckJobMs);
    if (ready < 0 && errno != EINTR) break;
    if (fds[1].revents) break;  // Ctrl-C
    if (ready == 0) {
      const std::string status = StatusOf(conn, f.id);
      if (!status.empty() && status != "RUNNING") {
        fmt::print(stderr, "berth: job {} is {}: port-forward ends\n", f.id, status);
        break;
      }
      continue;
    }
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(*listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      MutexLock lock(relays->mu);
      ++relays->running;
    }
    std::thread([g, f, remote, fd, relays] {
      RelayConnection(g, f, remote, fd, *relays);
      MutexLock lock(relays->mu);
      --relays->running;
      relays->cv.SignalAll();
    }).detach();
  }
  ::close(*listener);
  relays->stop = true;
  {
    MutexLock lock(relays->mu);
    for (int i = 0; i < 30 && relays->running > 0; ++i) relays->cv.WaitFor(relays->mu, 100);
  }
  // The relays are detached threads: one still connecting (its dial does not watch the stop), or
  // one that has counted itself out but not yet ended (its thread-local TLS library state is freed
  // only as the thread ends), must not see the process's statics destroyed under it, as returning
  // from main would (the ASan pass of test_readme_tour saw both as leaks): end here, output
  // flushed.
  std::fflush(nullptr);
  ::_exit(0);
}

}  // namespace

void AddPortForwardCommand(CommandContext& c) {
  auto& flags = c.Keep<ForwardFlags>();
  auto* cmd = c.app.add_subcommand(
      "port-forward",
      "Reach a port that a running job listens on (Jupyter, TensorBoard) from a port here: each "
      "connection to LOCAL goes through the server to REMOTE on the job's node. Only a port the "
      "job itself listens on; the job's owner or an operator. Runs until Ctrl-C or the job's end");
  cmd->add_option("id", flags.id, "Job id")->required();
  cmd->add_option("ports", flags.ports,
                  "[LOCAL:]REMOTE: e.g. 8888 (the same port here), 9000:8888, or :8888 (any free "
                  "port here, printed)")
      ->required();
  cmd->add_option("--rank", flags.rank, "Which node of a multi-node job (default 0)");
  cmd->add_option("--address", flags.address, "Local address to listen on (default 127.0.0.1)");
  c.AddGlobal(cmd);
  cmd->callback([&] { c.rc = PortForward(c.g, flags); });
}

}  // namespace berth::cli
