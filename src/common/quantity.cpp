#include "common/quantity.h"

#include <fmt/format.h>

namespace berth {

std::optional<int64_t> ParseMilli(const std::string& raw) {
  std::string text = raw;
  while (!text.empty() && text.back() == ' ') text.pop_back();
  while (!text.empty() && text.front() == ' ') text.erase(text.begin());
  if (!text.empty() && text.back() == '+') text.pop_back();
  if (text.empty()) return std::nullopt;
  int64_t whole = 0;
  int64_t frac = 0;
  size_t i = 0;
  size_t digits = 0;
  while (i < text.size() && isdigit(static_cast<unsigned char>(text[i]))) {
    whole = whole * 10 + (text[i] - '0');
    if (whole > 1'000'000'000'000LL) return std::nullopt;
    ++i;
    ++digits;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    int scale = 100;
    size_t frac_digits = 0;
    while (i < text.size() && isdigit(static_cast<unsigned char>(text[i]))) {
      if (frac_digits >= 3) {
        if (text[i] != '0') return std::nullopt;
      } else {
        frac += (text[i] - '0') * scale;
        scale /= 10;
      }
      ++frac_digits;
      ++i;
    }
    digits += frac_digits;
  }
  if (i != text.size() || digits == 0) return std::nullopt;
  return whole * 1000 + frac;
}

std::string FormatMilli(int64_t milli) {
  if (milli % 1000 == 0) return fmt::format("{}", milli / 1000);
  std::string s = fmt::format("{}.{:03}", milli / 1000, milli % 1000);
  while (s.back() == '0') s.pop_back();
  return s;
}

std::string FormatMib(Mib mib) {
  if (mib % 1024 == 0) return fmt::format("{}G", mib / 1024);
  if (mib >= 1024) {
    std::string s = fmt::format("{:.2f}", static_cast<double>(mib) / 1024.0);
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s + "G";
  }
  return fmt::format("{}M", mib);
}

}  // namespace berth
