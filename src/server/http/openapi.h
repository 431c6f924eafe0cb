// The OpenAPI 3.1 description of berth's HTTP API, generated from the route table: each route's
// method, path template, callers and executor (server/http/routes.h) and its RouteDoc (the request
// and success schemas, server/http/api_docs.h), plus what follows from them: path parameters, the
// error answers (`{"error": ...}`: 400 for a bad {id} or body, 401/403 for identified routes, 404
// for a route naming something, 413 for a body, 503 when the route's executor is busy or the store
// failed, 304 for a GET's ETag) and who may call (security). Served at GET /v1/openapi.json and
// written to docs/openapi.json by the build (`berth openapi`).
//
// Thread-safety: pure; the table is only read.
#pragma once

#include "common/json_util.h"
#include "server/http/routes.h"

namespace berth {

json::object OpenApiDocument(const RouteTable& table);

}  // namespace berth
