// Minimal leveled logging to stderr for the daemons. Thread-safe (one write(2) per line).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace berth {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };

void SetLogLevel(LogLevel level);
void SetLogPrefix(std::string prefix);  // e.g. "server", "agent local-0"
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, std::string_view message);

template <typename... Args>
void LogInfo(fmt::format_string<Args...> f, Args&&... args) {
  if (LogEnabled(LogLevel::kInfo))
    LogLine(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogWarn(fmt::format_string<Args...> f, Args&&... args) {
  if (LogEnabled(LogLevel::kWarn))
    LogLine(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogError(fmt::format_string<Args...> f, Args&&... args) {
  if (LogEnabled(LogLevel::kError))
    LogLine(LogLevel::kError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogDebug(fmt::format_string<Args...> f, Args&&... args) {
  if (LogEnabled(LogLevel::kDebug))
    LogLine(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace berth
