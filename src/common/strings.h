// Small string helpers shared by every module. Pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace berth {

std::vector<std::string> Split(std::string_view s, char sep);
std::string Trim(std::string_view s);
bool StartsWith(std::string_view s, std::string_view prefix);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
// A non-negative decimal integer: digits only (no sign, no spaces), within int64; else nullopt.
std::optional<int64_t> ParseDecimal(std::string_view s);
// A valid name for a job, node, pool or label: 1-128 chars of [A-Za-z0-9._-], not starting with
// '-'.
bool IsValidName(std::string_view s);
// Whether `path` is `root` or below it ("/data/x" is under "/data", "/database" is not; everything
// is under "/"). Plain text: neither is resolved.
bool IsPathUnder(std::string_view path, std::string_view root);
// Generates a random token of `bytes` random bytes, hex-encoded (from /dev/urandom).
std::string RandomHex(size_t bytes);
// Lower-case hex of `bytes` ("\x01\xab" -> "01ab").
std::string HexEncode(std::string_view bytes);
// Percent-encodes all but the unreserved characters of RFC 3986 (A-Z a-z 0-9 - _ . ~), for URL
// query values.
std::string PercentEncode(std::string_view s);
// `s` as one shell word: as it is when it holds only safe characters ([A-Za-z0-9] and -_./=:,+@%),
// else single-quoted.
std::string ShellQuote(const std::string& s);
// The Levenshtein distance of `a` and `b`, ignoring case: for "did you mean" suggestions of short
// names (O(|a|*|b|)).
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace berth
