#include "server/http/responses.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace berth {

int HttpStatusOf(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kUnauthorized:
      return 401;
    case Code::kForbidden:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kConflict:
      return 409;
    case Code::kTooLarge:
      return 413;
    case Code::kNoSpace:
      return 507;
    case Code::kInfeasible:
      return 422;
    case Code::kUnavailable:
      return 503;
    case Code::kInternal:
      return 500;
  }
  return 500;
}

net::HttpResponse JsonResponse(int status, const json::value& v) {
  net::HttpResponse r;
  r.status = status;
  r.body = SerializeJson(v) + "\n";
  return r;
}

net::HttpResponse ErrorResponse(int status, const std::string& message) {
  net::HttpResponse r;
  r.status = status;
  r.body = ErrorJson(message) + "\n";
  return r;
}

}  // namespace berth

namespace berth {

void AnswerWithEtag(const net::HttpRequest& req, net::HttpResponse& out) {
  // JSON only: /metrics (a megabyte at scale) is never polled with If-None-Match.
  if (out.status != 200 || out.body.empty() || out.content_type != "application/json") return;
  // FNV-1a's step over 8-byte words, each product's high half folded back into its low half (a
  // multiplication carries only upwards, so a word's high bits would otherwise reach only the top
  // of the hash); the tail zero-padded, the size in the tag. A listing page is ~0.5 MB, and a byte
  // at a time took ~0.7 ms of it.
  auto step = [](uint64_t h, uint64_t word) {
    h = (h ^ word) * 1099511628211ull;
    return h ^ (h >> 32);
  };
  uint64_t h = 1469598103934665603ull;
  const std::string& body = out.body;
  size_t at = 0;
  for (; at + 8 <= body.size(); at += 8) {
    uint64_t word;
    std::memcpy(&word, body.data() + at, 8);
    h = step(h, word);
  }
  if (at < body.size()) {
    uint64_t word = 0;
    std::memcpy(&word, body.data() + at, body.size() - at);
    h = step(h, word);
  }
  // A last avalanche (MurmurHash3's fmix64): every bit of the last word reaches every bit.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  std::string tag = fmt::format("\"{:016x}-{}\"", h, out.body.size());
  if (req.Header("if-none-match") == tag) {
    out.status = 304;
    out.body.clear();
  }
  out.headers.push_back({"ETag", std::move(tag)});
}

Result<json::object> BodyObject(const net::HttpRequest& req) {
  auto body = ParseJson(req.body.empty() ? "{}" : req.body);
  if (!body.ok()) return body.status();
  if (!body->is_object()) return Status::Invalid("request body must be a JSON object");
  return body->as_object();
}

Status OnlyFields(const json::object& o, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : o) {
    if (std::find(known.begin(), known.end(), std::string_view(key)) == known.end()) {
      return Status::Invalid("unknown field '" + std::string(key) + "'");
    }
  }
  return Status::Ok();
}

}  // namespace berth
