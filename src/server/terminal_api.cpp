// The user's end of interactive sessions (docs/api.md "Interactive sessions"): GET
// /v1/jobs/{id}/attach, a WebSocket that server/terminal_bridges.h relays to the one the rank's
// node opens (HandleAgentSession, agent_api.cpp).
#include <fmt/format.h>

#include "common/term_channel.h"
#include "protocol/agent_protocol.h"
#include "server/accounts.h"
#include "server/responses.h"
#include "server/server.h"

namespace berth {

void Server::HandleAttach(int64_t id, const net::HttpRequest& req, const Principal& by,
                          std::shared_ptr<net::Responder> res) {
  if (!req.websocket_upgrade) {
    return res->Send(
        ErrorResponse(Status::Invalid("attach is a WebSocket (Upgrade: websocket, subprotocol " +
                                      std::string(kSessionSubprotocol) + "): use berth attach")));
  }
  int rank = 0;
  int64_t offset = 0;
  try {
    rank = std::stoi(req.Query("rank", "0"));
    offset = std::stoll(req.Query("offset", "0"));
  } catch (...) {
    return res->Send(ErrorResponse(Status::Invalid("rank and offset must be integers")));
  }
  if (rank < 0 || offset < 0) {
    return res->Send(ErrorResponse(Status::Invalid("rank and offset must not be negative")));
  }
  auto target = core_->TerminalOf(id, rank);
  if (!target.ok()) return res->Send(ErrorResponse(target.status()));
  if (!MayActOn(by, target->row)) {
    return res->Send(ErrorResponse(Status::Forbidden(fmt::format(
        "job {} belongs to {}: attaching to another user's job needs the operator role ({} is {})",
        id, target->row.user, by.user, RoleName(by.role)))));
  }
  if (Status room = terminals_.CheckRoom(by.user); !room.ok()) {
    return res->Send(ErrorResponse(room));
  }
  // An operator typing into another user's job acts as that user: on the record first.
  if (by.user != target->row.user) {
    Status audited = accounts_->Audit(by, "attach", fmt::format("job {}", id),
                                      fmt::format("rank {} of {}'s interactive job, on {}", rank,
                                                  target->row.user, target->node));
    if (!audited.ok()) return res->Send(ErrorResponse(audited));
  }
  TerminalBridges::Target bridge{.job = id,
                                 .attempt = target->row.attempt,
                                 .rank = rank,
                                 .node = target->node,
                                 .user = by.user};
  res->AcceptWebSocket(
      kSessionSubprotocol, [this, bridge, offset](std::shared_ptr<net::WebSocket> ws) {
        auto sid = terminals_.Open(std::move(ws), bridge, clock_.Monotonic());
        if (!sid.ok()) return;
        streams_.Send(bridge.node,
                      proto::SessionMessage{*sid, bridge.job, bridge.attempt, bridge.rank, offset});
      });
}

}  // namespace berth
