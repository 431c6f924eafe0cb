#include "server/http/openapi.h"

#include <fmt/format.h>

#include <set>

#include "common/strings.h"
#include "server/http/api_docs.h"

namespace berth {

namespace {

using namespace schema;

const char* const kIdentity =
    "Who you are (docs/security.md): on the server's machine its unix socket or a TCP connection "
    "from loopback (the kernel says who); on a node the agent's socket; anywhere your own token as "
    "`Authorization: Bearer TOKEN`; in a browser the dashboard's session cookie (with the "
    "`X-Berth-CSRF` header on changes). Every error is `{\"error\": \"what is wrong\"}`.";

json::value ErrorAnswer(const std::string& description) {
  return json::object{
      {"description", description},
      {"content", json::object{{"application/json", json::object{{"schema", Ref("Error")}}}}}};
}

// "/v1/jobs/{id}/requeue" + POST: "postJobsIdRequeue".
std::string OperationId(const RouteTable::Route& route) {
  std::string id;
  for (char c : route.method) id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string& segment : route.segments) {
    if (segment.empty() || segment == "v1") continue;
    bool upper = true;
    for (char c : segment) {
      if (c == '{' || c == '}') continue;
      if (c == '-' || c == '.' || c == '_') {
        upper = true;
        continue;
      }
      id += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
  }
  return id;
}

// The group a route is listed under: its first segment after /v1.
std::string Tag(const RouteTable::Route& route) {
  const auto& s = route.segments;
  if (s.size() >= 3 && s[1] == "v1") return s[2] == "specs" ? "agent" : s[2];
  return s.size() >= 2 && s[1] == "login" ? "dashboard" : "server";
}

json::array Parameters(const RouteTable::Route& route) {
  json::array out;
  for (const std::string& segment : route.segments) {
    if (!RouteTable::IsParameter(segment)) continue;
    const std::string name = segment.substr(1, segment.size() - 2);
    json::value s = name == "id" ? Described(Int(), "a positive integer") : Str();
    out.push_back(json::object{{"name", name}, {"in", "path"}, {"required", true}, {"schema", s}});
  }
  for (const QueryDoc& q : route.doc.query) {
    out.push_back(json::object{{"name", q.name},
                               {"in", "query"},
                               {"required", false},
                               {"description", q.description},
                               {"schema", q.schema}});
  }
  return out;
}

json::value Success(const RouteDoc& doc) {
  json::object answer{{"description", doc.summary}};
  if (!doc.response.is_null()) {
    answer["content"] = json::object{{doc.response_type, json::object{{"schema", doc.response}}}};
  }
  return answer;
}

// Every answer the route may give: its success, and the errors that follow from its shape.
json::object Responses(const RouteTable::Route& route) {
  const RouteDoc& doc = route.doc;
  json::object out;
  if (doc.websocket) {
    out["101"] = json::object{{"description", "Switching Protocols: the WebSocket"}};
    if (!doc.response.is_null()) out["200"] = Success(doc);
    out["400"] = ErrorAnswer("no `Upgrade: websocket`, or a bad parameter");
  } else {
    out[std::to_string(doc.ok_status)] = Success(doc);
  }
  bool has_id = false;
  bool names_something = false;
  for (const std::string& s : route.segments) {
    has_id = has_id || s == "{id}";
    names_something = names_something || RouteTable::IsParameter(s);
  }
  if (route.method == "GET" && route.runs_on != RunsOn::kIoThread &&
      doc.response_type == "application/json") {
    out["304"] = json::object{{"description", "Not Modified: the If-None-Match ETag is current"}};
  }
  if (has_id || !doc.request.is_null() || !doc.query.empty()) {
    out["400"] = ErrorAnswer(doc.websocket ? "no `Upgrade: websocket`, or bad input" : "bad input");
  }
  if (route.callers != Callers::kAnyone) {
    out["401"] = ErrorAnswer("the server does not know who you are (or the token is not valid)");
    out["403"] = ErrorAnswer("you may not do that: the message names the right you lack");
  }
  if (names_something) out["404"] = ErrorAnswer("no such one");
  if (route.method != "GET") out["413"] = ErrorAnswer("the body is over the limit");
  for (const StatusDoc& e : doc.errors) {
    if (e.status == doc.ok_status) continue;  // (the success answer is the route's own)
    json::value answer = ErrorAnswer(e.description);
    if (!e.content_type.empty()) {
      answer.as_object()["content"] =
          json::object{{e.content_type, json::object{{"schema", Str()}}}};
    }
    out[std::to_string(e.status)] = std::move(answer);
  }
  if (route.runs_on != RunsOn::kIoThread) {
    out["503"] = ErrorAnswer(
        "the server is busy (Retry-After) or could not record the change: nothing changed, "
        "retry");
  }
  return out;
}

json::array Security(Callers callers) {
  switch (callers) {
    case Callers::kAnyone:
      return json::array{};
    case Callers::kJoinToken:
      return json::array{json::object{{"joinToken", json::array{}}}};
    case Callers::kIdentified:
      break;
  }
  // A token, the dashboard's cookie, or none (the unix socket or loopback: the kernel says who).
  return json::array{json::object{{"token", json::array{}}},
                     json::object{{"session", json::array{}}}, json::object{}};
}

json::object Operation(const RouteTable::Route& route) {
  const RouteDoc& doc = route.doc;
  json::object op{{"operationId", OperationId(route)},
                  {"summary", doc.summary},
                  {"tags", json::array{json::value(Tag(route))}},
                  {"security", Security(route.callers)},
                  {"responses", Responses(route)}};
  if (!doc.description.empty()) op["description"] = doc.description;
  json::array params = Parameters(route);
  if (!params.empty()) op["parameters"] = std::move(params);
  if (!doc.request.is_null()) {
    op["requestBody"] = json::object{
        {"required", true},
        {"content", json::object{{"application/json", json::object{{"schema", doc.request}}}}}};
  }
  op["x-berth-runs-on"] = route.runs_on == RunsOn::kIoThread ? "io"
                          : route.runs_on == RunsOn::kState  ? "state"
                                                             : "read";
  return op;
}

}  // namespace

json::object OpenApiDocument(const RouteTable& table) {
  json::object paths;
  std::set<std::string> tags;
  std::set<std::string> ids;  // operationIds are unique in a document: a clash gets a number
  for (const RouteTable::Route& route : table.routes()) {
    json::value& item = paths[route.path];
    if (!item.is_object()) item = json::object{};
    std::string method = route.method;
    for (char& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    json::object op = Operation(route);
    std::string id(op["operationId"].as_string());
    for (int n = 2; !ids.insert(id).second; ++n)
      id = std::string(op["operationId"].as_string()) + std::to_string(n);
    op["operationId"] = id;
    item.as_object()[method] = std::move(op);
    tags.insert(Tag(route));
  }
  json::array tag_list;
  for (const std::string& t : tags) tag_list.push_back(json::object{{"name", t}});
  json::object security{
      {"token", json::object{{"type", "http"},
                             {"scheme", "bearer"},
                             {"description",
                              "a user's token (berth login), a node's credential "
                              "or the cluster token (agents' routes only)"}}},
      {"session",
       json::object{{"type", "apiKey"},
                    {"in", "cookie"},
                    {"name", "berth_session_PORT"},
                    {"description", "the dashboard's session cookie, named after the port"}}},
      {"joinToken", json::object{{"type", "http"},
                                 {"scheme", "bearer"},
                                 {"description", "a join token (berth admin node join-token)"}}}};
  return json::object{
      {"openapi", "3.1.0"},
      {"info",
       json::object{{"title", "berth"}, {"version", BERTH_VERSION}, {"description", kIdentity}}},
      {"jsonSchemaDialect", "https://json-schema.org/draft/2020-12/schema"},
      {"tags", std::move(tag_list)},
      {"paths", std::move(paths)},
      {"components",
       json::object{{"schemas", api_docs::Schemas()}, {"securitySchemes", std::move(security)}}}};
}

}  // namespace berth
