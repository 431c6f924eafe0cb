// TerminalsApi: the users' end of interactive sessions — a rank's terminal, a command run into it,
// a forwarded port (server/http/terminal_bridges.h); terminal_api.cpp.
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

class TerminalsApi {
 public:
  explicit TerminalsApi(ApiContext& c) : c_(c) {}
  // Adds this group's routes, each calling `self`; with `self` null the routes are only described
  // (server/http/openapi.h), never called.
  static void AddRoutes(RouteTable& t, TerminalsApi* self);

 private:
  void HandleAttach(int64_t id, const net::HttpRequest& req, const Principal& by,
                    std::shared_ptr<net::Responder> res);
  void HandlePortForward(int64_t id, const net::HttpRequest& req, const Principal& by,
                         std::shared_ptr<net::Responder> res);
  void HandleExecInto(int64_t id, const net::HttpRequest& req, const Principal& by,
                      std::shared_ptr<net::Responder> res);
  // Who reaches rank `rank` of job `id` (its terminal, a command run into it, a port): its owner,
  // or an operator (on the audit record first, when `audit`); an error when `by` may not, or has
  // too many sessions open. Only an interactive job has a terminal; any running job the others.
  enum class SessionKind { kAttach, kExec, kPort };
  Result<TerminalBridges::Target> SessionTarget(int64_t id, int rank, SessionKind kind,
                                                const Principal& by, bool audit);

  ApiContext& c_;
};

}  // namespace berth
