// JSON answers of the server's handlers: a value, or {"error": message} with the HTTP status of a
// Status code (docs/api.md). Pure; thread-safe.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/json_util.h"
#include "common/status.h"
#include "net/http.h"

namespace berth {

int HttpStatusOf(Code code);
net::HttpResponse JsonResponse(int status, const json::value& v);
net::HttpResponse ErrorResponse(int status, const std::string& message);
// Returns the error response of a failed Status from a handler.
#define BERTH_RESPOND_IF_ERROR(expr)                                              \
  do {                                                                            \
    ::berth::Status berth_respond_status_ = (expr);                               \
    if (!berth_respond_status_.ok()) return ErrorResponse(berth_respond_status_); \
  } while (0)

inline net::HttpResponse ErrorResponse(const Status& st) {
  return ErrorResponse(HttpStatusOf(st.code()), st.message());
}

// A request's body as a JSON object ("" is {}); Invalid otherwise.
Result<json::object> BodyObject(const net::HttpRequest& req);
// Invalid naming the first field of `o` not in `known`.
Status OnlyFields(const json::object& o, std::initializer_list<std::string_view> known);

}  // namespace berth

namespace berth {

// Gives a 200 JSON answer an ETag (a hash of its body) and turns it into a bodiless 304 when the
// request's If-None-Match names that tag: a poller (the dashboard) hears "nothing changed" for a
// few bytes instead of the whole answer again.
void AnswerWithEtag(const net::HttpRequest& req, net::HttpResponse& out);

}  // namespace berth
