#include "common/json_util.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <iterator>

namespace berth {

Result<json::value> ParseJson(std::string_view text, const std::string& what) {
  boost::system::error_code ec;
  json::parse_options options;
  options.max_depth = kMaxJsonDepth;
  json::value v = json::parse(text, ec, {}, options);
  if (ec == json::error::too_deep) {
    return Status::Invalid(
        fmt::format("{} is nested deeper than {} levels, the limit", what, kMaxJsonDepth));
  }
  if (ec) return Status::Invalid("malformed JSON in " + what + ": " + ec.message());
  return v;
}

std::optional<int64_t> AsInt(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() && v.as_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v.as_uint64());
  if (v.is_double()) {
    double d = v.as_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<double> AsNumber(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.as_int64());
  if (v.is_uint64()) return static_cast<double>(v.as_uint64());
  if (v.is_double() && std::isfinite(v.as_double())) return v.as_double();
  return std::nullopt;
}

Result<std::string> GetString(const json::object& obj, const char* key,
                              const std::string& fallback) {
  auto* v = obj.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_string()) return Status::Invalid(std::string("'") + key + "' must be a string");
  return std::string(v->as_string());
}

Result<int64_t> GetInt(const json::object& obj, const char* key, int64_t fallback) {
  auto* v = obj.if_contains(key);
  if (!v || v->is_null()) return fallback;
  auto i = AsInt(*v);
  if (!i) return Status::Invalid(std::string("'") + key + "' must be an integer");
  return *i;
}

Result<bool> GetBool(const json::object& obj, const char* key, bool fallback) {
  auto* v = obj.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_bool()) return Status::Invalid(std::string("'") + key + "' must be true or false");
  return v->as_bool();
}

Result<double> GetNumber(const json::object& obj, const char* key, double fallback) {
  auto* v = obj.if_contains(key);
  if (!v || v->is_null()) return fallback;
  auto d = AsNumber(*v);
  if (!d) return Status::Invalid(std::string("'") + key + "' must be a number");
  return *d;
}

json::value TimeToJson(std::optional<TimeMs> t) {
  if (!t) return nullptr;
  return json::value(FormatRfc3339(*t));
}

std::optional<TimeMs> TimeFromJson(const json::value& v) {
  if (!v.is_string()) return std::nullopt;
  return ParseRfc3339(std::string(v.as_string()));
}

std::string ErrorJson(const std::string& message) {
  json::object o;
  o["error"] = message;
  return SerializeJson(o);
}

namespace {

// A JSON string, escaped as boost::json::serialize escapes it (the quote, the backslash and the
// control characters; every other byte as it is).
void WriteString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t run = 0;  // where the bytes not yet copied start
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

template <typename Int>
void WriteInt(std::string& out, Int i) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), i);
  out.append(digits, end);
}

// Writes straight into `out` (no string per scalar, as a json::serialize call for each would
// make); a listing page of 1,000 jobs is some 25,000 scalars.
void WriteJson(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      out += "null";
      break;
    case json::kind::bool_:
      out += v.get_bool() ? "true" : "false";
      break;
    case json::kind::int64:
      WriteInt(out, v.get_int64());
      break;
    case json::kind::uint64:
      WriteInt(out, v.get_uint64());
      break;
    case json::kind::double_: {
      double d = v.get_double();
      if (!std::isfinite(d)) {
        out += "null";
      } else {
        fmt::format_to(std::back_inserter(out), "{}", d);
      }
      break;
    }
    case json::kind::string:
      WriteString(out, v.get_string());
      break;
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.get_object()) {
        if (!first) out += ',';
        first = false;
        WriteString(out, key);
        out += ':';
        WriteJson(out, value);
      }
      out += '}';
      break;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& value : v.get_array()) {
        if (!first) out += ',';
        first = false;
        WriteJson(out, value);
      }
      out += ']';
      break;
    }
  }
}

}  // namespace

std::string SerializeJson(const json::value& v) {
  std::string out;
  WriteJson(out, v);
  return out;
}

namespace {

void WriteIndented(std::string& out, const json::value& v, int depth) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(d) * 2, ' ');
  };
  if (v.is_object() && !v.as_object().empty()) {
    out += '{';
    bool first = true;
    for (const auto& [key, e] : v.as_object()) {
      if (!first) out += ',';
      first = false;
      newline(depth + 1);
      out += json::serialize(json::string_view(key));
      out += ": ";
      WriteIndented(out, e, depth + 1);
    }
    newline(depth);
    out += '}';
  } else if (v.is_array() && !v.as_array().empty()) {
    out += '[';
    bool first = true;
    for (const json::value& e : v.as_array()) {
      if (!first) out += ',';
      first = false;
      newline(depth + 1);
      WriteIndented(out, e, depth + 1);
    }
    newline(depth);
    out += ']';
  } else {
    WriteJson(out, v);
  }
}

}  // namespace

std::string SerializeJsonIndented(const json::value& v) {
  std::string out;
  WriteIndented(out, v, 0);
  out += '\n';
  return out;
}

}  // namespace berth
