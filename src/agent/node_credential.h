// NodeCredential: how an agent comes by its node's own credential (docs/security.md "Node
// credentials"). Once obtained it is kept in STATE_DIR/node-credential (mode 0600) and presented
// on every call; at the first start it is obtained by exchanging a join token an admin made
// (`berth admin node join-token`) with the server (POST /v1/agent/join). The server then lets this
// agent act only as its own node, and an admin can revoke it (`berth admin node revoke NAME`).
//
// Thread-safety: a plain function, called once before the agent starts.
#pragma once

#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace berth {

// Exchanges `join_token` for node `node`'s credential with the server. Unavailable when no server
// answered (worth retrying); any other error is the server's refusal.
using JoinFunction =
    std::function<Result<std::string>(const std::string& join_token, const std::string& node)>;

// The node's credential: the one kept in `state_dir`/node-credential if there is one; else, with a
// `join_token`, one obtained through `join` (retried while the server is unavailable, up to
// `give_up_ms`) and kept there before it is returned. "" when there is neither (the agent presents
// the cluster token instead). A refusal (a used or revoked join token, a name that holds a
// credential already) is returned as is, with what to do.
Result<std::string> ObtainNodeCredential(const std::string& state_dir,
                                         const std::string& join_token, const std::string& node,
                                         const JoinFunction& join, DurationMs give_up_ms = 300'000);

}  // namespace berth
