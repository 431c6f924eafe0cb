// Users' uploads over HTTP (docs/api.md "Uploads"): blobs in, manifests registered. The logic is
// in server/uploads.h; the nodes' fetch is in agent_api.cpp.
#include <fmt/format.h>

#include "common/strings.h"
#include "server/http/api_docs.h"
#include "server/http/responses.h"
#include "server/http/uploads_api.h"

namespace berth {
namespace {

// A JSON list of strings at body[key], each a digest.
Result<std::vector<std::string>> StringList(const json::object& body, const char* key) {
  const json::value* v = body.if_contains(key);
  if (!v || !v->is_array()) return Status::Invalid(fmt::format("'{}' must be a list", key));
  std::vector<std::string> out;
  out.reserve(v->as_array().size());
  for (const json::value& item : v->as_array()) {
    if (!item.is_string()) return Status::Invalid(fmt::format("'{}' must hold strings", key));
    out.emplace_back(item.as_string());
  }
  return out;
}

}  // namespace

void UploadsApi::AddRoutes(RouteTable& t, UploadsApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  // Uploads (docs/api.md "Uploads"): blob and manifest I/O, off the state executor.
  t.Add(
      "POST", "/v1/uploads/missing", R::kRead,
      [self](const RouteCall& c) { return self->HandleUploadMissing(*c.req, *c.by); },
      UploadMissing());
  t.Add(
      "POST", "/v1/uploads/blobs", R::kRead,
      [self](const RouteCall& c) { return self->HandleUploadBlobs(*c.req, *c.by); }, UploadBlobs());
  t.Add(
      "PUT", "/v1/uploads/blobs/{digest}", R::kRead,
      [self](const RouteCall& c) { return self->HandleUploadPiece(c.params[0], *c.req, *c.by); },
      UploadPiece());
  t.Add(
      "GET", "/v1/uploads/blobs/{digest}/received", R::kRead,
      [self](const RouteCall& c) { return self->HandleUploadReceived(c.params[0], *c.by); },
      UploadReceived());
  t.Add(
      "POST", "/v1/uploads/manifests", R::kRead,
      [self](const RouteCall& c) { return self->HandleUploadManifest(*c.req, *c.by); },
      UploadManifest());
}

net::HttpResponse UploadsApi::HandleUploadMissing(const net::HttpRequest& req,
                                                  const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(Status::Invalid("missing: body must be {\"digests\": [...]}"));
  }
  auto digests = StringList(body->as_object(), "digests");
  if (!digests.ok()) return ErrorResponse(digests.status());
  auto missing = c_.uploads.Missing(by.user, *digests);
  if (!missing.ok()) return ErrorResponse(missing.status());
  json::array out(missing->begin(), missing->end());
  return JsonResponse(200, json::object{{"missing", std::move(out)}});
}

net::HttpResponse UploadsApi::HandleUploadBlobs(const net::HttpRequest& req, const Principal& by) {
  auto stored = c_.uploads.PutFrames(by.user, req.body);
  if (!stored.ok()) return ErrorResponse(stored.status());
  return JsonResponse(200, json::object{{"stored", *stored}});
}

net::HttpResponse UploadsApi::HandleUploadPiece(const std::string& digest,
                                                const net::HttpRequest& req, const Principal& by) {
  auto offset = ParseDecimal(req.Query("offset"));
  auto size = ParseDecimal(req.Query("size"));
  if (!offset || !size) {
    return ErrorResponse(Status::Invalid("a piece says where it goes: ?offset=N&size=TOTAL"));
  }
  bool last = req.Query("last") == "1";
  auto received = c_.uploads.PutPiece(by.user, digest, *offset, req.body, last, *size);
  if (!received.ok()) {
    net::HttpResponse r = ErrorResponse(received.status());
    if (received.status().code() == Code::kConflict && !last) {
      auto now = c_.uploads.Received(by.user, digest);
      r = JsonResponse(409, json::object{{"error", received.status().message()},
                                         {"received", now.ok() ? *now : 0}});
    }
    return r;
  }
  return JsonResponse(200, json::object{{"received", *received}});
}

net::HttpResponse UploadsApi::HandleUploadReceived(const std::string& digest, const Principal& by) {
  auto received = c_.uploads.Received(by.user, digest);
  if (!received.ok()) return ErrorResponse(received.status());
  return JsonResponse(200, json::object{{"received", *received}});
}

net::HttpResponse UploadsApi::HandleUploadManifest(const net::HttpRequest& req,
                                                   const Principal& by) {
  auto registered = c_.uploads.RegisterManifest(by.user, req.body);
  if (!registered.ok()) return ErrorResponse(registered.status());
  return JsonResponse(200, json::object{{"manifest", registered->digest},
                                        {"files", registered->files},
                                        {"bytes", registered->bytes}});
}

}  // namespace berth
