// The user's end of interactive sessions (docs/api.md "Interactive sessions", "Port forwarding"):
// GET /v1/jobs/{id}/attach and GET /v1/jobs/{id}/port-forward, WebSockets that
// server/http/terminal_bridges.h relays to the one the rank's node opens (HandleAgentSession,
// agent_api.cpp).
#include <fmt/format.h>

#include <limits>
#include <stdexcept>

#include "common/term_channel.h"
#include "net/ws_stream.h"
#include "protocol/agent_protocol.h"
#include "server/accounts.h"
#include "server/http/api_docs.h"
#include "server/http/responses.h"
#include "server/http/terminals_api.h"

namespace berth {

namespace {

// The integer query parameter `name` (`fallback` when absent), at least `min` and at most `max`.
Result<int64_t> QueryInt(const net::HttpRequest& req, const std::string& name,
                         const std::string& fallback, int64_t min, int64_t max) {
  const std::string text = req.Query(name, fallback);
  int64_t value = 0;
  try {
    size_t used = 0;
    value = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (...) {
    return Status::Invalid(fmt::format("{} must be an integer, not '{}'", name, text));
  }
  if (value < min || value > max) {
    return Status::Invalid(fmt::format("{} must be {} to {}, not {}", name, min, max, value));
  }
  return value;
}

}  // namespace

void TerminalsApi::AddRoutes(RouteTable& t, TerminalsApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  t.Add(
      "GET", "/v1/jobs/{id}/attach", R::kRead,
      [self](const RouteCall& c) {
        self->HandleAttach(c.id, *c.req, *c.by, c.res);
        return StreamedAnswer();
      },
      Attach());
  t.Add(
      "GET", "/v1/jobs/{id}/exec", R::kRead,
      [self](const RouteCall& c) {
        self->HandleExecInto(c.id, *c.req, *c.by, c.res);
        return StreamedAnswer();
      },
      ExecInto());
  t.Add(
      "GET", "/v1/jobs/{id}/port-forward", R::kRead,
      [self](const RouteCall& c) {
        self->HandlePortForward(c.id, *c.req, *c.by, c.res);
        return StreamedAnswer();
      },
      PortForward());
}

Result<TerminalBridges::Target> TerminalsApi::SessionTarget(int64_t id, int rank, SessionKind kind,
                                                            const Principal& by, bool audit) {
  auto target = kind == SessionKind::kAttach ? c_.core.reads().TerminalOf(id, rank)
                                             : c_.core.reads().PortOf(id, rank);
  if (!target.ok()) return target.status();
  const char* what = kind == SessionKind::kAttach ? "attaching to"
                     : kind == SessionKind::kExec ? "running a command in"
                                                  : "forwarding a port of";
  if (!MayActOn(by, target->row)) {
    return Status::Forbidden(fmt::format(
        "job {} belongs to {}: {} another user's job needs the operator role ({} is {})", id,
        target->row.user, what, by.user, RoleName(by.role)));
  }
  BERTH_RETURN_IF_ERROR(c_.terminals.CheckRoom(by.user));
  // An operator reaching into another user's job acts as that user: on the record first.
  if (audit && by.user != target->row.user) {
    BERTH_RETURN_IF_ERROR(c_.accounts.Audit(
        by,
        kind == SessionKind::kAttach ? "attach"
        : kind == SessionKind::kExec ? "exec"
                                     : "port-forward",
        fmt::format("job {}", id),
        fmt::format("rank {} of {}'s job, on {}", rank, target->row.user, target->node)));
  }
  return TerminalBridges::Target{.job = id,
                                 .attempt = target->row.attempt,
                                 .rank = rank,
                                 .node = target->node,
                                 .user = by.user};
}

void TerminalsApi::HandleAttach(int64_t id, const net::HttpRequest& req, const Principal& by,
                                std::shared_ptr<net::Responder> res) {
  if (!req.websocket_upgrade) {
    return res->Send(
        ErrorResponse(Status::Invalid("attach is a WebSocket (Upgrade: websocket, subprotocol " +
                                      std::string(kSessionSubprotocol) + "): use berth attach")));
  }
  auto rank = QueryInt(req, "rank", "0", 0, std::numeric_limits<int>::max());
  if (!rank.ok()) return res->Send(ErrorResponse(rank.status()));
  auto offset = QueryInt(req, "offset", "0", 0, std::numeric_limits<int64_t>::max());
  if (!offset.ok()) return res->Send(ErrorResponse(offset.status()));
  auto bridge = SessionTarget(id, static_cast<int>(*rank), SessionKind::kAttach, by, true);
  if (!bridge.ok()) return res->Send(ErrorResponse(bridge.status()));
  res->AcceptWebSocket(kSessionSubprotocol, [this, bridge = *bridge,
                                             offset = *offset](std::shared_ptr<net::WebSocket> ws) {
    (void)c_.terminals.Open(
        std::move(ws), bridge, c_.clock.Monotonic(), [&](const std::string& sid) {
          return proto::SessionMessage{sid, bridge.job, bridge.attempt, bridge.rank, offset};
        });
  });
}

void TerminalsApi::HandleExecInto(int64_t id, const net::HttpRequest& req, const Principal& by,
                                  std::shared_ptr<net::Responder> res) {
  if (!req.websocket_upgrade) {
    return res->Send(ErrorResponse(
        Status::Invalid("exec is a WebSocket (Upgrade: websocket, subprotocol " +
                        std::string(kSessionSubprotocol) + "): use berth exec --into")));
  }
  const std::string command = req.Query("command");
  if (command.empty() || command.size() > proto::kMaxExecCommand) {
    return res->Send(ErrorResponse(Status::Invalid("command must be 1 to 65536 bytes")));
  }
  auto rank = QueryInt(req, "rank", "0", 0, std::numeric_limits<int>::max());
  if (!rank.ok()) return res->Send(ErrorResponse(rank.status()));
  auto tty = QueryInt(req, "tty", "0", 0, 1);
  if (!tty.ok()) return res->Send(ErrorResponse(tty.status()));
  auto rows = QueryInt(req, "rows", "24", 1, 1000);
  if (!rows.ok()) return res->Send(ErrorResponse(rows.status()));
  auto cols = QueryInt(req, "cols", "80", 1, 1000);
  if (!cols.ok()) return res->Send(ErrorResponse(cols.status()));
  auto bridge = SessionTarget(id, static_cast<int>(*rank), SessionKind::kExec, by, true);
  if (!bridge.ok()) return res->Send(ErrorResponse(bridge.status()));
  proto::ExecMessage exec{.job = id,
                          .attempt = bridge->attempt,
                          .rank = bridge->rank,
                          .command = command,
                          .tty = *tty == 1,
                          .rows = static_cast<int>(*rows),
                          .cols = static_cast<int>(*cols)};
  res->AcceptWebSocket(kSessionSubprotocol, [this, bridge = *bridge, exec = std::move(exec)](
                                                std::shared_ptr<net::WebSocket> ws) mutable {
    (void)c_.terminals.Open(std::move(ws), bridge, c_.clock.Monotonic(),
                            [&](const std::string& sid) {
                              exec.sid = sid;
                              return exec;
                            });
  });
}

void TerminalsApi::HandlePortForward(int64_t id, const net::HttpRequest& req, const Principal& by,
                                     std::shared_ptr<net::Responder> res) {
  auto port = QueryInt(req, "port", "", 1, 65535);
  if (!port.ok()) return res->Send(ErrorResponse(port.status()));
  auto rank = QueryInt(req, "rank", "0", 0, std::numeric_limits<int>::max());
  if (!rank.ok()) return res->Send(ErrorResponse(rank.status()));
  // Without the upgrade, a check that reaches nothing (and so is not audited): may `by` forward
  // this port now? berth port-forward asks before it listens.
  auto bridge =
      SessionTarget(id, static_cast<int>(*rank), SessionKind::kPort, by, req.websocket_upgrade);
  if (!bridge.ok()) return res->Send(ErrorResponse(bridge.status()));
  if (!req.websocket_upgrade) {
    return res->Send(JsonResponse(
        200, json::object{{"job", id}, {"rank", *rank}, {"node", bridge->node}, {"port", *port}}));
  }
  res->AcceptWebSocket(net::kStreamSubprotocol, [this, bridge = *bridge,
                                                 port = *port](std::shared_ptr<net::WebSocket> ws) {
    (void)c_.terminals.Open(std::move(ws), bridge, c_.clock.Monotonic(),
                            [&](const std::string& sid) {
                              return proto::ForwardMessage{sid, bridge.job, bridge.attempt,
                                                           bridge.rank, static_cast<int>(port)};
                            });
  });
}

}  // namespace berth
