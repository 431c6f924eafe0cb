// RouteDoc: what a route of the HTTP API takes and answers, as the OpenAPI description
// (server/http/openapi.h) states it: a summary, the query parameters, the JSON body's schema and
// the success answer's. Every RouteTable::Add takes one, so a route cannot exist without its
// contract; the error answers (`{"error": ...}`) and the statuses that follow from the route's
// shape (its callers, its {id}, its executor) are added by the generator. The `schema` helpers
// build JSON Schema (2020-12, the dialect of OpenAPI 3.1) values tersely.
//
// Thread-safety: plain values; the helpers are pure.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/json_util.h"

namespace berth {

// One query parameter.
struct QueryDoc {
  std::string name;
  json::value schema;
  std::string description;
};

// What an answer other than the success carries beyond the generated ones (e.g. 409, 422).
struct StatusDoc {
  int status = 0;
  std::string description;
  std::string content_type;  // "": the JSON error object; else a text of this type (a page)
};

struct RouteDoc {
  std::string summary;
  std::string description;  // more: who may call it, what it changes
  std::vector<QueryDoc> query;
  json::value request;  // the JSON body's schema; null: the route takes no body
  int ok_status = 200;
  // The success answer: `response` is its JSON schema, under `response_type`. A WebSocket route
  // says so (`websocket`: the 101 upgrade; its 200 answer, where it has one, is `response`).
  std::string response_type = "application/json";
  json::value response;
  bool websocket = false;
  std::vector<StatusDoc> errors;
};

namespace schema {

inline json::value Str() { return json::object{{"type", "string"}}; }
inline json::value Int() { return json::object{{"type", "integer"}}; }
inline json::value Num() { return json::object{{"type", "number"}}; }
inline json::value Bool() { return json::object{{"type", "boolean"}}; }
inline json::value Any() { return json::object{}; }
// An RFC 3339 time (common/json_util.h TimeToJson).
inline json::value Time() { return json::object{{"type", "string"}, {"format", "date-time"}}; }
// A schema under components/schemas.
inline json::value Ref(const std::string& name) {
  return json::object{{"$ref", "#/components/schemas/" + name}};
}
inline json::value Nullable(json::value s) {
  return json::object{{"anyOf", json::array{std::move(s), json::object{{"type", "null"}}}}};
}
inline json::value Arr(json::value items) {
  return json::object{{"type", "array"}, {"items", std::move(items)}};
}
// An object whose keys are names (GPU types, nodes, statuses) and values `values`.
inline json::value Map(json::value values) {
  return json::object{{"type", "object"}, {"additionalProperties", std::move(values)}};
}
inline json::value Enum(std::initializer_list<const char*> values) {
  json::array a;
  for (const char* v : values) a.emplace_back(v);
  return json::object{{"type", "string"}, {"enum", std::move(a)}};
}
inline json::value Described(json::value s, std::string_view description) {
  s.as_object()["description"] = description;
  return s;
}
// An object with these properties, of which `required` must be present. Answers may carry more
// (clients ignore what they do not know); a request's unknown field is refused by the server,
// which `Closed` says.
json::value Obj(std::initializer_list<std::pair<const char*, json::value>> props,
                std::initializer_list<const char*> required = {});
json::value Closed(json::value object_schema);

}  // namespace schema
}  // namespace berth
