// AgentChannel: how the server core sends commands (launch, stop) to agents, without knowing how
// they travel. The HTTP server implements it with each node's watch stream
// (server/http/watch_streams.h); unit tests use a fake that records what was sent
// (tests/fakes/fake_channel.h).
//
// Messages belong to one session of a node (one agent registration). Open() starts a session and
// drops what was queued for the previous one; Send() queues for the current session and never
// blocks (a message for a node whose agent is not attached waits until it attaches). The core calls
// these only after the change that produced the message is committed to the store.
//
// Thread-safety: implementations are thread-safe and never call back into the core, so the core may
// call them while holding its own lock.
#pragma once

#include <string>

#include "protocol/agent_protocol.h"

namespace berth {

class AgentChannel {
 public:
  virtual ~AgentChannel() = default;
  // `node` has a new session: end the previous session's stream and drop its queued messages.
  virtual void Open(const std::string& node, const std::string& session) = 0;
  // `node`'s session ended (its lease expired): end the stream and drop queued messages.
  virtual void Close(const std::string& node) = 0;
  // Queues `message` for the current session of `node`.
  virtual void Send(const std::string& node, const proto::WatchMessage& message) = 0;
};

}  // namespace berth
