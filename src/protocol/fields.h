// The protocol's readers of JSON fields, shared by its .cpp files (agent_protocol.cpp,
// watch_messages.cpp); not for use outside src/protocol/.
//
// Thread-safety: a Fields object is used by one thread; the functions are pure.
#pragma once

#include <charconv>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_util.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace berth::proto::fields {

inline bool FitsInt(int64_t v) {
  return v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max();
}

inline std::string Quoted(const char* key) { return std::string("'") + key + "'"; }

// Reads the fields of one JSON object and keeps the first error, prefixed with the message's name
// ("launch: 'attempt' must be an integer"). After an error, reads return zero values: the caller
// finishes reading and returns status(). A field that is absent or null is given its fallback, or
// is an error ("is missing") when it has none.
class Fields {
 public:
  Fields(const json::object& o, std::string_view what) : o_(o), what_(what) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  void Fail(const std::string& message) {
    if (status_.ok()) status_ = Status::Invalid(std::string(what_) + ": " + message);
  }

  // The value of `key`, or nullptr when it is absent or null.
  const json::value* Find(const char* key) const {
    const json::value* v = o_.if_contains(key);
    return v && !v->is_null() ? v : nullptr;
  }

  int64_t Int64(const char* key, std::optional<int64_t> fallback) {
    const json::value* v = Find(key);
    if (!v) {
      if (!fallback) Fail(Quoted(key) + " is missing");
      return fallback.value_or(0);
    }
    std::optional<int64_t> i = AsInt(*v);
    if (!i) {
      Fail(Quoted(key) + " must be an integer");
      return 0;
    }
    return *i;
  }

  int Int(const char* key, std::optional<int> fallback) {
    std::optional<int64_t> wide;
    if (fallback) wide = *fallback;
    int64_t v = Int64(key, wide);
    if (!FitsInt(v)) {
      Fail(Quoted(key) + " is out of range");
      return 0;
    }
    return static_cast<int>(v);
  }

  std::string String(const char* key, std::optional<std::string> fallback) {
    const json::value* v = Find(key);
    if (!v) {
      if (!fallback) Fail(Quoted(key) + " is missing");
      return fallback.value_or("");
    }
    if (!v->is_string()) {
      Fail(Quoted(key) + " must be a string");
      return "";
    }
    return std::string(v->as_string());
  }

  bool Bool(const char* key, bool fallback) {
    const json::value* v = Find(key);
    if (!v) return fallback;
    if (!v->is_bool()) {
      Fail(Quoted(key) + " must be true or false");
      return false;
    }
    return v->as_bool();
  }

  // The string field "type" must be `expected` (watch messages).
  void Type(std::string_view expected) {
    std::string type = String("type", std::nullopt);
    if (ok() && type != expected) Fail("'type' must be \"" + std::string(expected) + "\"");
  }

 private:
  const json::object& o_;
  std::string_view what_;
  Status status_;
};

// The object in `v`, or an error "WHAT: NOUN must be a JSON object".
inline Result<const json::object*> ObjectOf(const json::value& v, std::string_view what,
                                            std::string_view noun) {
  if (!v.is_object()) {
    return Status::Invalid(std::string(what) + ": " + std::string(noun) + " must be a JSON object");
  }
  return &v.as_object();
}

// Reads job, attempt and rank as far as they can be read (0 where not): names a bad report entry.
inline AttemptRank BestEffortId(const json::value& v) {
  AttemptRank id;
  if (!v.is_object()) return id;
  const json::object& o = v.as_object();
  auto read = [&](const char* key) -> int64_t {
    const json::value* f = o.if_contains(key);
    std::optional<int64_t> i = f ? AsInt(*f) : std::nullopt;
    return i.value_or(0);
  };
  id.job = read("job");
  int64_t attempt = read("attempt");
  int64_t rank = read("rank");
  id.attempt = FitsInt(attempt) ? static_cast<int>(attempt) : 0;
  id.rank = FitsInt(rank) ? static_cast<int>(rank) : 0;
  return id;
}

// A whole decimal integer, nothing else (no sign but '-', no spaces).
inline std::optional<int64_t> ParseDecimal(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace berth::proto::fields
