// Helpers for reading Boost.JSON values with clear errors, and for berth's JSON conventions (times
// as RFC 3339 strings or null, CPUs and GiB as numbers). Pure and thread-safe.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

namespace json = boost::json;

// JSON nested deeper than this is refused (a request is a few levels deep; a deep one is an attack
// on the stack of whatever walks it).
constexpr int kMaxJsonDepth = 64;
// Parses text as JSON; InvalidArgument naming `what` on malformed input or beyond kMaxJsonDepth.
Result<json::value> ParseJson(std::string_view text, const std::string& what = "request body");

// Typed reads of obj[key]. Missing keys give `fallback` (or nullopt); wrong types give
// InvalidArgument naming the key.
Result<std::string> GetString(const json::object& obj, const char* key,
                              const std::string& fallback = "");
Result<int64_t> GetInt(const json::object& obj, const char* key, int64_t fallback = 0);
Result<bool> GetBool(const json::object& obj, const char* key, bool fallback = false);
Result<double> GetNumber(const json::object& obj, const char* key, double fallback = 0);
std::optional<int64_t> AsInt(const json::value& v);  // integers, and doubles with no fraction
std::optional<double> AsNumber(const json::value& v);

json::value TimeToJson(std::optional<TimeMs> t);  // RFC 3339 string or null
std::optional<TimeMs> TimeFromJson(const json::value& v);

std::string ErrorJson(const std::string& message);  // {"error": message}

// Like json::serialize, but numbers with a fraction print as people write them ("0.5", not Boost's
// "5E-1"), which is what scripts and humans reading `--json` output expect.
std::string SerializeJson(const json::value& v);
// The same, indented by two spaces a level, one member or element a line (a document people diff).
std::string SerializeJsonIndented(const json::value& v);

}  // namespace berth
