// RouteTable: the HTTP API's routes (docs/api.md), each a method, a path template, who may call it
// and where its handler runs. A template's segments are literals or parameters in braces:
// `{id}` is a positive integer, named in errors after the segment before it ("/v1/jobs/{id}": "job
// id must be a positive integer, got 'x'"); any other (`{node}`, `{name}`) is the segment as sent.
// Of the routes whose shape fits a path, those with a literal where another has a parameter come
// first, so /v1/jobs/cancel is never job "cancel". The template is also the request's `route` label
// in the HTTP metrics (server/http/http_metrics.h), so ids and names never make a series each.
//
// Each route carries its contract (RouteDoc, server/http/route_doc.h), from which the OpenAPI
// description is generated (server/http/openapi.h).
//
// Thread-safety: built before serving (Add), then only read (Match, Label) from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/http.h"
#include "server/http/identity.h"
#include "server/http/route_doc.h"

namespace berth {

// Where a route's handler runs: on the I/O thread (it must never wait for anything), or queued on
// one of the server's executors (the state executor for changes, the read one for reads).
enum class RunsOn { kIoThread, kState, kRead };

// Who may call a route: anyone (before identification: health, the dashboard's login), a join token
// (and only it), or the identified (users, or nodes for the agents' protocol).
enum class Callers { kAnyone, kJoinToken, kIdentified };

// A matched request, as its handler gets it.
// What a handler that answers through its Responder (a stream, a WebSocket) returns: no answer
// for the dispatcher to send.
inline net::HttpResponse StreamedAnswer() { return net::HttpResponse{.status = 0}; }

struct RouteCall {
  std::shared_ptr<net::HttpRequest> req;
  std::shared_ptr<Principal> by;  // null for Callers::kAnyone
  std::shared_ptr<net::Responder> res;
  std::vector<std::string> params;  // each parameter's segment, in template order
  int64_t id = 0;                   // the {id} parameter's value, where there is one
};

class RouteTable {
 public:
  // What the handler answers; status 0: it answered (or streams) through `res` itself.
  using Handler = std::function<net::HttpResponse(const RouteCall&)>;
  struct Route {
    std::string method;
    std::string path;                   // the template
    std::vector<std::string> segments;  // of the template, split at '/'
    RunsOn runs_on = RunsOn::kRead;
    Callers callers = Callers::kIdentified;
    Handler handler;
    RouteDoc doc;  // its contract (server/http/openapi.h describes the table)
  };
  struct Match {
    const Route* route = nullptr;  // none: no route has this method and path (404)
    Status error;                  // the route's {id} is not a positive integer (400)
    std::vector<std::string> params;
    int64_t id = 0;
  };

  // Every route comes with its contract (server/http/api_docs.h).
  void Add(std::string method, std::string path, RunsOn runs_on, Handler handler, RouteDoc doc,
           Callers callers = Callers::kIdentified);
  // The route of `method` for `parts` (a path split at '/': "", "v1", ...).
  Match Find(const std::string& method, const std::vector<std::string>& parts) const;
  // The template of the routes that fit `parts` whatever the method; "/{asset}" for a top-level
  // path (the dashboard's files) and "other" for paths berth does not serve.
  std::string Label(const std::vector<std::string>& parts) const;
  const std::vector<Route>& routes() const { return routes_; }
  // Whether a template's segment is a parameter ("{id}", "{node}").
  static bool IsParameter(const std::string& segment) {
    return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
  }

 private:
  // Whether `route`'s template fits `parts`, segment by segment.
  static bool Fits(const Route& route, const std::vector<std::string>& parts);
  std::vector<Route> routes_;  // literal-first order (Add keeps it)
};

}  // namespace berth
