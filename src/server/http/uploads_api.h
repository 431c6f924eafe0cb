// UploadsApi: users' uploads of their code and file mounts (server/uploads.h, docs/api.md
// "Uploads"); upload_api.cpp.
//
// Each handler group holds the control plane's parts it reaches (ApiContext, api_context.h) and
// adds its own routes to the server's table; its handlers run where their route says (routes.h).
// Thread-safety: after AddRoutes, its handlers may run on any thread at once.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http/api_context.h"

namespace berth {

class UploadsApi {
 public:
  explicit UploadsApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, UploadsApi* self);

 private:
  net::HttpResponse HandleUploadMissing(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleUploadBlobs(const net::HttpRequest& req, const Principal& by);
  net::HttpResponse HandleUploadPiece(const std::string& digest, const net::HttpRequest& req,
                                      const Principal& by);
  net::HttpResponse HandleUploadReceived(const std::string& digest, const Principal& by);
  net::HttpResponse HandleUploadManifest(const net::HttpRequest& req, const Principal& by);

  ApiContext& c_;
};

}  // namespace berth
