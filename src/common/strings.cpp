#include "common/strings.h"

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <random>

namespace berth {

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::optional<int64_t> ParseDecimal(std::string_view s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string Trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

bool IsValidName(std::string_view s) {
  if (s.empty() || s.size() > 128 || s[0] == '-') return false;
  for (char c : s) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

bool IsPathUnder(std::string_view path, std::string_view root) {
  return root == "/" || path == root ||
         (path.size() > root.size() && StartsWith(path, root) && path[root.size()] == '/');
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  // getrandom(2): one system call, no file to open (a CLI command makes a key each time).
  // GRND_NONBLOCK: never wait for the pool at early boot (the fallback below does not either).
  bool ok = ::getrandom(raw.data(), bytes, GRND_NONBLOCK) == static_cast<ssize_t>(bytes);
  if (!ok) {
    FILE* f = fopen("/dev/urandom", "rb");
    ok = f && fread(raw.data(), 1, bytes, f) == bytes;
    if (f) fclose(f);
  }
  if (!ok) {
    std::random_device rd;
    for (auto& c : raw) c = static_cast<char>(rd());
  }
  return HexEncode(raw);
}

std::string HexEncode(std::string_view bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string ShellQuote(const std::string& s) {
  bool plain = !s.empty();
  for (char c : s) {
    if (!(isalnum(static_cast<unsigned char>(c)) ||
          std::string("-_./=:,+@%").find(c) != std::string::npos)) {
      plain = false;
    }
  }
  if (plain) return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const bool same = tolower(static_cast<unsigned char>(a[i - 1])) ==
                        tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace berth
