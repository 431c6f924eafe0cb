// TerminalBridges: the interactive sessions the server relays (docs/api.md "Interactive
// sessions"). A user's WebSocket (GET /v1/jobs/{id}/attach) waits here under a fresh session id,
// and the rank's node is invited to it (proto::SessionMessage, ExecMessage or ForwardMessage,
// through the AgentChannel); the node's agent opens its own WebSocket for that id
// (GET /v1/agent/sessions/{sid}), and from then on the two are relayed to each other, message by
// message: each side is read only once its last message was written to the other, so a session
// holds at most a message per direction (64 KiB frames) however fast either side is. When either
// side closes, the other is closed; a user whose node does not answer within `connect_ms` is
// closed with 4004.
//
// An invitation belongs to the node's session of the moment (server/core/agent_channel.h): one
// sent before the node registers again (a server just restarted, an agent that lost its lease)
// is dropped with that session's queue. So each waiting session keeps its invitation, and a
// node's new registration sends those again (InviteAgain); a session opened in between may be
// invited twice, and the agent's second answer is refused (404) without harm.
//
// Bounded: at most `max_sessions` open or waiting, and `max_per_user` for one user.
//
// Thread-safety: every method is thread-safe (one internal mutex, never held while calling into a
// WebSocket).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "net/http.h"
#include "server/core/agent_channel.h"

namespace berth {

class TerminalBridges {
 public:
  struct Target {
    int64_t job = 0;
    int attempt = 0;
    int rank = 0;
    std::string node;
    std::string user;  // whose session it is (the job's owner, or the operator who attached)
  };

  // What the node is sent for session `sid`.
  using Invitation = std::function<proto::WatchMessage(const std::string& sid)>;

  explicit TerminalBridges(AgentChannel& nodes, size_t max_sessions = 1024,
                           size_t max_per_user = 32, int64_t connect_ms = 10'000)
      : nodes_(nodes),
        max_sessions_(max_sessions),
        max_per_user_(max_per_user),
        connect_ms_(connect_ms) {}

  // Room for one more session of `user`? TooLarge (429) naming the cap when not.
  Status CheckRoom(const std::string& user) const EXCLUDES(mu_);
  // The user's WebSocket waits for the node's, and the node is sent `invite(sid)`: returns the
  // session id. TooLarge when the caps are reached (the WebSocket is then closed with 1013).
  Result<std::string> Open(std::shared_ptr<net::WebSocket> user, Target target, int64_t now_ms,
                           const Invitation& invite) EXCLUDES(mu_);
  // `node` registered again (a new session, whose queue starts empty): the sessions still waiting
  // for it are sent their invitations again.
  void InviteAgain(const std::string& node) EXCLUDES(mu_);
  // Whether session `sid` waits for node `node`: NotFound when no session of that id waits (it
  // expired, or was never opened); Forbidden when it is another node's.
  Status CheckWaiting(const std::string& sid, const std::string& node) const EXCLUDES(mu_);
  // The node's WebSocket for session `sid`: the two are relayed from now on. One that comes too
  // late (the session expired meanwhile) is closed.
  void Join(const std::string& sid, std::shared_ptr<net::WebSocket> agent) EXCLUDES(mu_);
  // Closes (4004) the users whose node has not joined within connect_ms of their Open.
  void ExpireWaiting(int64_t now_ms) EXCLUDES(mu_);
  // Sessions waiting or relayed now.
  size_t size() const EXCLUDES(mu_);
  // Sessions closed so far because their node did not join in time (ExpireWaiting).
  uint64_t unanswered() const EXCLUDES(mu_);
  // When each job last had a session (Lifecycle::EndIdleInteractive), as the calls see it: every
  // job with one open or waiting now is marked seen at `now_ms`. Entries older than `keep_ms` are
  // forgotten (a job unseen for that long is idle either way), and at most max_sessions * 64
  // are kept (the oldest go first).
  std::map<int64_t, int64_t> SeenAt(int64_t now_ms, int64_t keep_ms) EXCLUDES(mu_);

 private:
  struct Session {
    std::shared_ptr<net::WebSocket> user;
    Target target;
    proto::WatchMessage invitation;
    int64_t opened_at = 0;
    bool joined = false;
  };
  void Ended(const std::string& sid) EXCLUDES(mu_);

  AgentChannel& nodes_;
  const size_t max_sessions_;
  const size_t max_per_user_;
  const int64_t connect_ms_;
  mutable Mutex mu_;
  std::map<std::string, Session> sessions_ GUARDED_BY(mu_);  // by id
  std::map<std::string, size_t> per_user_ GUARDED_BY(mu_);
  std::map<int64_t, int64_t> seen_ GUARDED_BY(mu_);  // job -> when it last had a session
  uint64_t unanswered_ GUARDED_BY(mu_) = 0;
};

// Relays `from`'s messages to `to`, one at a time: the next is read only once the last is
// written. When `from` closes, `to` is closed (with `from`'s code and reason for a normal close or
// an application's 4000-4999, else 4001) and `ended` runs; likewise when a write to `to` fails.
void RelayWebSocket(std::shared_ptr<net::WebSocket> from, std::shared_ptr<net::WebSocket> to,
                    std::function<void()> ended);

}  // namespace berth
