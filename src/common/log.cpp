#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

#include "common/clock.h"

namespace berth {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_prefix_mu;
std::string g_prefix = "berth";  // guarded by g_prefix_mu
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

void SetLogPrefix(std::string prefix) {
  std::lock_guard lock(g_prefix_mu);
  g_prefix = std::move(prefix);
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void LogLine(LogLevel level, std::string_view message) {
  static const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  std::string prefix;
  {
    std::lock_guard lock(g_prefix_mu);
    prefix = g_prefix;
  }
  std::string line = fmt::format("{} {} {}: {}\n", FormatRfc3339(SystemClock::Get().Now()),
                                 kNames[static_cast<int>(level)], prefix, message);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace berth
