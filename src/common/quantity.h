// Quantities: resource amounts as integers, and their parsing and printing.
//
// CPUs are counted in milli-CPUs, memory in MiB, GPUs in milli-GPUs (1000 = one whole device). No
// floating-point resource arithmetic happens anywhere in berth; doubles appear only at the edges
// (JSON numbers in CPUs and GiB, YAML values) and are converted here, rounding to the nearest unit.
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace berth {

using MilliCpu = int64_t;
using Mib = int64_t;
using MilliGpu = int64_t;

constexpr MilliCpu kMilliPerCpu = 1000;
constexpr Mib kMibPerGib = 1024;
constexpr MilliGpu kMilliPerGpu = 1000;

// Parses a non-negative decimal such as "8", "0.5", "8+" (the "+" means "at least", which is what a
// request means anyway) into thousandths. Returns nullopt on anything else, including negatives,
// more than three decimals and absurdly large values (> 10^12).
std::optional<int64_t> ParseMilli(const std::string& text);

inline int64_t MilliFromDouble(double v) {
  return static_cast<int64_t>(v * 1000.0 + (v >= 0 ? 0.5 : -0.5));
}
inline Mib MibFromGib(double gib) { return static_cast<Mib>(gib * 1024.0 + 0.5); }
inline double GibFromMib(Mib mib) { return static_cast<double>(mib) / 1024.0; }
inline double CpusFromMilli(MilliCpu m) { return static_cast<double>(m) / 1000.0; }

// "0.5", "8", "1.25": thousandths printed as a short decimal.
std::string FormatMilli(int64_t milli);
// "512M", "32G", "1.5G".
std::string FormatMib(Mib mib);

}  // namespace berth
