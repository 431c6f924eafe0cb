// `berth attach JOB [--rank R]`: the terminal of a running interactive job (docs/user-guide.md
// "Interactive work"), through the server's WebSocket (GET /v1/jobs/{id}/attach; docs/api.md
// "Interactive sessions"). The keys go to the job (in raw mode when stdin is a terminal, so
// Ctrl-C reaches the job through its own terminal), its output comes back, the window's size
// follows, and the command exits with the job's exit code once it ends. Ctrl-] detaches and
// leaves the job running; so does a lost connection.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/connection.h"
#include "cli/interrupts.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "common/term_channel.h"
#include "net/http.h"
#include "net/ws_client.h"

namespace berth::cli {

namespace {

constexpr char kDetachKey = 0x1d;  // Ctrl-]
constexpr size_t kMaxUnsent = 256 << 10;
// How long a lost session is dialled again, with nothing coming, before the client gives up.
constexpr int64_t kRedialMs = 60'000;
// Without a raw terminal, a second Ctrl-C this soon after the first ends the job (srun's rule).
constexpr int64_t kDoubleInterruptMs = 1'000;

int g_signal_pipe[2] = {-1, -1};  // SIGWINCH and SIGINT arrive here, a byte each

void OnSignal(int sig) {
  const char byte = static_cast<char>(sig);
  const int saved = errno;
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

// stdin in raw mode (every byte as typed, no echo, no signals from keys: Ctrl-C is a byte for
// the job's terminal) while it lives, when stdin is a terminal.
class RawInput {
 public:
  // Raw mode when `wanted` and stdin is a terminal.
  explicit RawInput(bool wanted = true) {
    if (wanted && ::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      ::cfmakeraw(&raw);
      raw_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
  }
  ~RawInput() { Restore(); }
  RawInput(const RawInput&) = delete;
  RawInput& operator=(const RawInput&) = delete;
  bool raw() const { return raw_; }
  void Restore() {
    if (raw_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    raw_ = false;
  }

 private:
  termios saved_{};
  bool raw_ = false;
};

std::string Message(TermChannel channel, std::string_view payload) {
  std::string m(1, static_cast<char>(channel));
  m += payload;
  return m;
}

std::string ResizeMessage() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0 &&
      ::ioctl(STDIN_FILENO, TIOCGWINSZ, &size) != 0) {
    return "";
  }
  if (size.ws_row == 0 || size.ws_col == 0) return "";
  return Message(TermChannel::kControl,
                 fmt::format(R"({{"resize":[{},{}]}})", size.ws_row, size.ws_col));
}

bool WriteAllOut(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{STDOUT_FILENO, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Waits until job `id` runs (saying once on stderr why it waits), or says why it never will.
struct AttachFlags {
  int64_t id = 0;
  int rank = 0;
};

// What a session said about its end.
struct Ending {
  bool received = false;  // the session carried anything at all
  bool exited = false;
  int exit_code = 0;
  std::string reason;
  std::string error;
  bool detached = false;
  bool interrupted_twice = false;  // no raw terminal: Ctrl-C twice within kDoubleInterruptMs
};

// What the user typed: whether stdin is still open, and what was read of it but not sent yet. It
// outlives a session: typing read while a session waits for its node is sent once the node has
// joined, to this session or to the next one if this one is closed unanswered.
struct Typing {
  bool open = true;
  std::string held;
};

// `offset`: where the output printed so far ends, in the rank's output (what a session dialled
// again asks for).
void OnControl(const std::string& text, Ending& ending, int64_t* offset) {
  auto v = ParseJson(text, "session control");
  if (!v.ok() || !v->is_object()) return;
  const json::object& o = v->as_object();
  if (auto from = GetInt(o, "from", -1); from.ok() && *from >= 0) *offset = *from;
  if (o.contains("exit")) {
    ending.exited = true;
    auto code = GetInt(o, "exit", 1);
    ending.exit_code = code.ok() ? static_cast<int>(*code) : 1;
    auto reason = GetString(o, "reason");
    ending.reason = reason.ok() ? *reason : "";
  } else if (auto error = GetString(o, "error"); error.ok() && !error->empty()) {
    ending.error = *error;
  }
}

// Sends what was typed, in messages of at most 4 KiB, once the node's side has joined.
void SendTyping(net::WebSocketClient& ws, const Ending& ending, Typing* typing) {
  if (!ending.received) return;
  for (size_t at = 0; at < typing->held.size(); at += 4096) {
    ws.Send(Message(TermChannel::kStdin, std::string_view(typing->held).substr(at, 4096)));
  }
  typing->held.clear();
}

// Relays stdin, the window's size and stray SIGINTs to the session and its output to stdout
// until the job ends, the session closes, or the user detaches. Typing is sent only once the
// node's side has joined (its first message: every leg starts with {"from":N}); until then it is
// held in `typing` (the detach key acts at once), so nothing typed is lost with a session that is
// closed unanswered (the node did not answer in time, the server restarted).
Ending Relay(net::WebSocketClient& ws, RawInput& input, Typing* typing, int64_t* offset) {
  Ending ending;
  if (input.raw()) {
    if (std::string resize = ResizeMessage(); !resize.empty()) ws.Send(resize);
  }
  int64_t last_interrupt = -kDoubleInterruptMs - 1;
  while (!ws.closed() && !ending.detached && !ending.interrupted_twice) {
    const bool want_input =
        typing->open && typing->held.size() < kMaxUnsent && ws.unsent() < kMaxUnsent;
    // Not polled at all when not wanted: a pipe whose writer closed reports POLLHUP whatever the
    // events asked.
    pollfd fds[3] = {{ws.fd(), ws.events(), 0},
                     {want_input ? STDIN_FILENO : -1, POLLIN, 0},
                     {g_signal_pipe[0], POLLIN, 0}};
    if (::poll(fds, 3, 1000) < 0 && errno != EINTR) break;
    if (fds[2].revents & POLLIN) {
      char sigs[16];
      ssize_t n = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
      for (ssize_t i = 0; i < n; ++i) {
        if (sigs[i] == SIGWINCH) {
          if (std::string resize = ResizeMessage(); !resize.empty()) ws.Send(resize);
        } else if (sigs[i] == SIGINT) {  // no raw terminal: Ctrl-C goes to the job as a signal
          const int64_t now = MonotonicMs();
          if (now - last_interrupt <= kDoubleInterruptMs) {
            ending.interrupted_twice = true;
            break;
          }
          last_interrupt = now;
          ws.Send(Message(TermChannel::kControl, R"({"signal":2})"));
          fmt::print(stderr, "berth: interrupt sent (Ctrl-C again within 1s to end the job)\n");
        } else {  // SIGTERM, SIGHUP: leave, with the terminal restored and the job running
          ending.detached = true;
        }
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
      if (n > 0) {
        std::string_view typed(buf, static_cast<size_t>(n));
        if (input.raw()) {
          if (size_t at = typed.find(kDetachKey); at != std::string_view::npos) {
            typed = typed.substr(0, at);
            ending.detached = true;
          }
        }
        typing->held += typed;
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        typing->open = false;
        if (input.raw()) {
          ending.detached = true;  // our terminal hung up: the job goes on without us
        } else {
          // A pipe ended: the job's terminal reads an end of file (Ctrl-D) once, and the session
          // goes on until the job ends.
          typing->held += '\x04';
        }
      }
    }
    if (Status pumped = ws.Pump(); !pumped.ok()) {
      // A connection that broke (the server or the network went away) is a lost session, dialled
      // again by the caller; only a broken protocol is an error.
      const bool lost = pumped.code() == Code::kUnavailable && ws.closed();
      if (!lost && ending.error.empty() && !ending.exited) ending.error = pumped.message();
      break;
    }
    while (auto message = ws.TakeMessage()) {
      ending.received = true;
      if (message->empty()) continue;
      const auto channel = static_cast<TermChannel>(static_cast<uint8_t>((*message)[0]));
      const std::string_view payload = std::string_view(*message).substr(1);
      if (channel == TermChannel::kOutput) {
        *offset += static_cast<int64_t>(payload.size());
        if (!WriteAllOut(payload)) ending.detached = true;
      } else if (channel == TermChannel::kControl) {
        OnControl(std::string(payload), ending, offset);
      }
    }
    SendTyping(ws, ending, typing);  // sent with the next Pump
    if (ending.exited) break;
  }
  if (ending.detached || ending.interrupted_twice) (void)ws.CloseAndWait(1000, "detached", 1'000);
  return ending;
}

int Attach(const GlobalFlags& g, const AttachFlags& f) {
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  return AttachToJob(conn, f.id, f.rank);
}

struct ShellFlags {
  std::string name = "shell";
  std::string gpus;
  std::string cpus;
  std::string memory;
  std::string time_limit;
  std::string pool;
  std::string image;
};

// `berth shell`: an interactive job running a login shell, attached to as soon as it runs.
int Shell(const GlobalFlags& g, const ShellFlags& f) {
  ExecFlags exec;
  std::error_code ec;
  const std::string here = std::filesystem::current_path(ec).string();
  // In this directory where the node has it (a shared file system), else in the user's home.
  // bash where there is one (an image may have only sh).
  exec.args = {"cd -- " + ShellQuote(here) +
               " 2>/dev/null || cd; if command -v bash >/dev/null 2>&1; then exec bash -l; fi; "
               "exec sh -l"};
  exec.command = true;
  exec.interactive = true;
  exec.name = f.name;
  exec.gpus = f.gpus;
  exec.cpus = f.cpus;
  exec.memory = f.memory;
  exec.time_limit = f.time_limit;
  exec.pool = f.pool;
  exec.image = f.image;
  // The run step moves on from / (above); a container mounts its work dir at the same path, so one
  // in an image starts in this directory, which the node must have (as a batch job's default).
  if (f.image.empty()) exec.workdir = "node:/";
  return Exec(g, exec);
}

// The exit status of job `id` that ended while no session could say so: 0 when it SUCCEEDED, else
// its exit code (1 when none), after saying why on stderr.
int EndedWith(Connection& conn, int64_t id) {
  auto job = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!job.ok()) return Fail(job.status());
  const json::object& o = job->as_object();
  const std::string status = GetString(o, "status").value();
  if (status == "SUCCEEDED") return 0;
  auto reason = GetString(o, "reason");
  fmt::print(stderr, "berth: job {} is {}{}\n", id, status,
             reason.ok() && !reason->empty() ? ": " + *reason : "");
  auto code = GetInt(o, "exit_code", 1);
  return code.ok() && *code > 0 ? static_cast<int>(*code) : 1;
}

// Signals arrive on g_signal_pipe from now on: SIGWINCH, SIGTERM, SIGHUP, and SIGINT unless the
// terminal is `raw` (then Ctrl-C is a key for the job's terminal).
Status CatchSignals(bool raw) {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::Internal("cannot make a pipe for signals");
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  ::sigemptyset(&action.sa_mask);
  for (int sig : {SIGWINCH, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
  if (!raw) ::sigaction(SIGINT, &action, nullptr);
  return Status::Ok();
}

// Opens a session to rank `rank` of job `id` from byte `offset` of its output: the WebSocket, or
// null with the exit status to return in *rc (-1 while `retrying`: try again later).
std::unique_ptr<net::WebSocketClient> OpenSession(Connection& conn, int64_t id, int rank,
                                                  int64_t offset, bool retrying, int* rc) {
  std::unique_ptr<net::WebSocketClient> ws;
  auto opened = conn.http().OpenWebSocket(
      fmt::format("/v1/jobs/{}/attach?rank={}&offset={}", id, rank, offset), kSessionSubprotocol,
      30'000, &ws, 1 << 20);
  if (!opened.ok()) {
    *rc = retrying ? -1 : Fail(opened.status());
    return nullptr;
  }
  if (ws) return ws;
  Status refused = conn.Decode(*opened, "GET", fmt::format("/v1/jobs/{}/attach", id)).status();
  if (retrying && refused.code() == Code::kNotFound) {
    *rc = EndedWith(conn, id);  // it ended meanwhile; its exit was in the session that was lost
  } else if (retrying && refused.code() == Code::kUnavailable) {
    *rc = -1;
  } else {
    *rc = Fail(refused);
  }
  return nullptr;
}

}  // namespace

Status WaitUntilRunning(Connection& conn, int64_t id, bool submitted) {
  std::string said;
  std::unique_ptr<Connection> side;
  std::optional<Interrupts> interrupts;
  if (submitted) {
    side = conn.Another();
    interrupts.emplace([&side, id](int sig, bool) {
      if (sig != SIGINT) return;
      auto cancelled = side->Call("POST", "/v1/jobs/cancel",
                                  SerializeJson(json::object{{"ids", json::array{id}}}));
      if (!cancelled.ok()) {
        fmt::print(stderr, "\nberth: could not cancel job {}: {}\n", id,
                   cancelled.status().message());
        return;
      }
      fmt::print(stderr, "\nberth: cancelled job {}: it had not started (Ctrl-C while waiting)\n",
                 id);
      ::_exit(130);
    });
  }
  while (true) {
    auto job = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
    if (!job.ok()) return job.status();
    const json::object& o = job->as_object();
    const std::string status = GetString(o, "status").value();
    if (status == "RUNNING") {
      if (!said.empty()) fmt::print(stderr, "berth: job {} runs\n", id);
      return Status::Ok();
    }
    if (status != "PENDING" && status != "STARTING") {
      return Status::Conflict(fmt::format("job {} is {}: it no longer runs", id, status));
    }
    std::string why = status;
    if (const json::value* waiting = o.if_contains("waiting"); waiting && waiting->is_object()) {
      auto position = GetInt(waiting->as_object(), "position", 0);
      if (position.ok() && *position > 0)
        why += fmt::format(", position {} in the queue", *position);
    }
    if (auto reason = GetString(o, "reason"); reason.ok() && !reason->empty()) {
      why += ": " + *reason;
    }
    if (why != said) {
      fmt::print(stderr, "berth: job {} is {} (Ctrl-C {})\n", id, why,
                 submitted ? "cancels it" : "stops waiting");
      said = why;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int AttachToJob(Connection& conn, int64_t id, int rank, bool submitted) {
  auto job = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!job.ok()) return Fail(job.status());
  const json::value* spec = job->as_object().if_contains("spec");
  const json::value* interactive =
      spec && spec->is_object() ? spec->as_object().if_contains("interactive") : nullptr;
  if (!interactive || !interactive->is_bool() || !interactive->as_bool()) {
    // A batch job has no terminal: its output, as berth logs -f shows it.
    fmt::print(stderr, "berth: job {} is not interactive: following its output\n", id);
    return FollowToEnd(conn, id, submitted);
  }
  if (Status st = WaitUntilRunning(conn, id, submitted); !st.ok()) return Fail(st);
  int rc = 0;
  int64_t offset = 0;
  auto ws = OpenSession(conn, id, rank, offset, false, &rc);
  if (!ws) return rc;
  RawInput input;
  if (Status st = CatchSignals(input.raw()); !st.ok()) return Fail(st);
  Typing typing;
  int64_t lost_at = -1;  // when the session was lost, with nothing come since
  while (true) {
    Ending ending = Relay(*ws, input, &typing, &offset);
    if (ending.detached) {
      input.Restore();
      fmt::print(stderr, "\r\nberth: detached; job {} goes on (berth attach {} to come back)\n", id,
                 id);
      return 0;
    }
    if (ending.interrupted_twice) {
      auto cancelled = conn.Call("POST", "/v1/jobs/cancel",
                                 SerializeJson(json::object{{"ids", json::array{id}}}));
      if (!cancelled.ok()) return Fail(cancelled.status());
      fmt::print(stderr, "berth: job {} cancelled (Ctrl-C twice)\n", id);
      return 130;
    }
    if (!ending.error.empty()) {
      input.Restore();
      fmt::print(stderr, "berth: {}\n", ending.error);
      return 1;
    }
    if (ending.exited) {
      input.Restore();
      if (!ending.reason.empty()) {
        fmt::print(stderr, "berth: job {} ended: {} (exit {})\n", id, ending.reason,
                   ending.exit_code);
      }
      return ending.exit_code;
    }
    // The session was lost (the server, the agent or the network went away; the job goes on):
    // dial again from what was printed, for up to kRedialMs with nothing coming.
    if (ending.received || lost_at < 0) {
      lost_at = MonotonicMs();
      fmt::print(stderr, "\r\nberth: the session to job {} was lost ({} {}); attaching again\r\n",
                 id, ws->close_code(), ws->close_reason());
    }
    ws.reset();
    while (!ws) {
      if (MonotonicMs() - lost_at > kRedialMs) {
        input.Restore();
        fmt::print(stderr,
                   "berth: job {} could not be reached for {}; it goes on: berth attach {}\n", id,
                   FormatDuration(kRedialMs), id);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      // A call first: with several servers it finds the leader (a failover) for the dial to use.
      (void)conn.Call("GET", fmt::format("/v1/jobs/{}", id));
      ws = OpenSession(conn, id, rank, offset, true, &rc);
      if (!ws && rc != -1) {
        input.Restore();
        return rc;
      }
    }
  }
}

int ExecInto(const GlobalFlags& g, const ExecFlags& f) {
  if (f.args.empty()) {
    return Fail(
        Status::Invalid("exec --into: give the command after -- (berth exec --into 12 -- "
                        "nvidia-smi)"));
  }
  std::vector<std::string> quoted;
  for (const auto& a : f.args) quoted.push_back(f.args.size() == 1 ? a : ShellQuote(a));
  const std::string command = Join(quoted, " ");
  const int64_t id = *f.into;
  Connection conn(g.server, g.token, g.self_exe);
  if (Status st = conn.Connect(); !st.ok()) return Fail(st);
  if (Status st = WaitUntilRunning(conn, id); !st.ok()) return Fail(st);
  // A terminal with -t when this is one; else the command's output, its stdin empty.
  const bool tty = f.interactive && ::isatty(STDIN_FILENO);
  winsize size{};
  if (!tty || ::ioctl(STDIN_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_row == 0) {
    size.ws_row = 24;
    size.ws_col = 80;
  }
  std::unique_ptr<net::WebSocketClient> ws;
  auto opened = conn.http().OpenWebSocket(
      fmt::format("/v1/jobs/{}/exec?rank={}&tty={}&rows={}&cols={}&command={}", id, f.rank,
                  tty ? 1 : 0, size.ws_row, size.ws_col, net::UrlEncode(command)),
      kSessionSubprotocol, 30'000, &ws, 1 << 20);
  if (!opened.ok()) return Fail(opened.status());
  if (!ws) return Fail(conn.Decode(*opened, "GET", fmt::format("/v1/jobs/{}/exec", id)).status());
  RawInput input(tty);
  if (Status st = CatchSignals(input.raw()); !st.ok()) return Fail(st);
  Typing typing{.open = tty};
  int64_t offset = 0;
  Ending ending = Relay(*ws, input, &typing, &offset);
  input.Restore();
  if (ending.detached || ending.interrupted_twice) {
    fmt::print(stderr, "\r\nberth: {}; the command was hung up (SIGHUP)\n",
               ending.detached ? "detached" : "Ctrl-C twice");
    return ending.detached ? 129 : 130;
  }
  if (!ending.error.empty()) {
    fmt::print(stderr, "berth: {}\n", ending.error);
    return 1;
  }
  if (!ending.exited) {
    fmt::print(stderr, "berth: the session to job {} was lost ({} {}); the command was hung up\n",
               id, ws->close_code(), ws->close_reason());
    return 1;
  }
  return ending.exit_code;
}

void AddAttachCommand(CommandContext& c) {
  auto& flags = c.Keep<AttachFlags>();
  auto* attach = c.app.add_subcommand(
      "attach",
      "Attach to the terminal of a running interactive job (`interactive: true`): your keys go to "
      "it, its output comes back, and the command exits with the job's exit code when it ends. "
      "Ctrl-] detaches and leaves the job running");
  attach->add_option("id", flags.id, "Job id")->required();
  attach->add_option("--rank", flags.rank, "Which node of a multi-node job (default 0)");
  c.AddGlobal(attach);
  attach->callback([&] { c.rc = Attach(c.g, flags); });
}

void AddShellCommand(CommandContext& c) {
  auto& flags = c.Keep<ShellFlags>();
  auto* shell = c.app.add_subcommand(
      "shell",
      "A login shell on a node with the resources asked for: submits an interactive job, says "
      "why it waits while it is pending, and attaches once it runs (Ctrl-] detaches; berth "
      "attach ID comes back). The job ends when the shell exits");
  shell->add_option("--gpus", flags.gpus, "Accelerators, TYPE:N (e.g. V100:1)");
  shell->add_option("--cpus", flags.cpus, "CPUs (default 0.5)");
  shell->add_option("--memory", flags.memory, "Memory in GiB (default: none reserved)");
  shell->add_option("--time", flags.time_limit, "Time limit, e.g. 4h (default: none)");
  shell->add_option("--pool", flags.pool, "Only on nodes of this pool");
  shell->add_option("--image", flags.image,
                    "The shell runs in this container image (as the YAML's resources.image_id: "
                    "docker:IMAGE), on nodes that run containers");
  shell->add_option("-n,--name", flags.name, "Job name (default shell)");
  c.AddGlobal(shell);
  shell->callback([&] { c.rc = Shell(c.g, flags); });
}

}  // namespace berth::cli
