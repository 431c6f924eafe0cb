// `berth top`: a live full-screen view of the nodes' GPU maps and the queue (cli/top_view.h draws a
// frame). On a terminal: the alternate screen, redrawn every --interval seconds, `q` (or Ctrl-C)
// quits and restores the terminal. `--once` (or output that is not a terminal) prints one frame.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/top_view.h"
#include "common/clock.h"

namespace berth::cli {
namespace {

std::atomic<bool> g_top_stop{false};

void OnTopStopSignal(int) { g_top_stop = true; }

// The terminal in raw-ish mode (no echo, a key at a time) and on its alternate screen while it
// lives; restored as it was when it dies.
class Screen {
 public:
  Screen() {
    if (::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    std::fputs("\033[?1049h\033[?25l", stdout);
    std::fflush(stdout);
  }
  ~Screen() {
    std::fputs("\033[?25h\033[?1049l", stdout);
    std::fflush(stdout);
    if (restore_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

 private:
  termios saved_{};
  bool restore_ = false;
};

Result<std::string> Frame(Connection& conn, int width, int height) {
  auto nodes = conn.Call("GET", "/v1/nodes?holders=1");
  if (!nodes.ok()) return nodes.status();
  auto queue = conn.Call("GET", fmt::format("/v1/queue?limit={}", std::max(height, 10)));
  if (!queue.ok()) return queue.status();
  return RenderTop({.nodes = &nodes->as_object(),
                    .queue = &queue->as_object(),
                    .server = conn.url(),
                    .width = width,
                    .height = height,
                    .now = SystemClock::Get().Now()});
}

}  // namespace

int Top(const GlobalFlags& g, const TopFlags& f) {
  if (!(f.interval > 0)) return Fail(Status::Invalid("--interval must be above 0 seconds"));
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  const bool tty = ::isatty(STDOUT_FILENO) != 0 && ::isatty(STDIN_FILENO) != 0;
  auto size = [&] {
    winsize ws{};
    if (tty && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      return std::pair<int, int>(ws.ws_col, ws.ws_row);
    }
    return std::pair<int, int>(120, 40);
  };
  if (f.once || !tty) {
    auto [width, height] = size();
    auto frame = Frame(conn, width, height);
    if (!frame.ok()) return Fail(frame.status());
    fmt::print("{}\n", *frame);
    return 0;
  }
  struct sigaction sa {};
  sa.sa_handler = OnTopStopSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  Screen screen;
  while (!g_top_stop) {
    auto [width, height] = size();
    auto frame = Frame(conn, width, height);
    std::string text = frame.ok() ? *frame : "berth top: " + frame.status().message();
    fmt::print("\033[H\033[2J{}", text);
    std::fflush(stdout);
    // Wait for the next frame, or a key.
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(f.interval * 1000));
    while (!g_top_stop && std::chrono::steady_clock::now() < until) {
      pollfd in{STDIN_FILENO, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (::poll(&in, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) > 0) {
        char c = 0;
        if (::read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q' || c == 3)) g_top_stop = true;
        if (c == ' ') break;  // redraw now
      }
    }
  }
  return 0;
}

// --- command line: the registration of each command (cli/command_context.h) ---

void AddTopCommand(CommandContext& c) {
  auto& top_flags = c.Keep<TopFlags>();
  auto* top = c.app.add_subcommand(
      "top",
      "A live full-screen view: each node's GPU map (a letter per job), CPU and memory, and the "
      "queue; q quits");
  top->add_option("--interval", top_flags.interval, "Seconds between redraws")
      ->capture_default_str();
  top->add_flag("--once", top_flags.once,
                "Print one frame and return (also when the output is not a terminal)");
  c.AddGlobal(top);
  top->callback([&] { c.rc = Top(c.g, top_flags); });
}

}  // namespace berth::cli
