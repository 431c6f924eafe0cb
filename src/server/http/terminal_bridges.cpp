#include "server/http/terminal_bridges.h"

#include <openssl/rand.h>

#include <algorithm>
#include <vector>

namespace berth {

namespace {

// 128 random bits, hex.
std::string NewSessionId() {
  unsigned char raw[16];
  RAND_bytes(raw, sizeof(raw));
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (unsigned char c : raw) {
    id.push_back(kHex[c >> 4]);
    id.push_back(kHex[c & 15]);
  }
  return id;
}

}  // namespace

void RelayWebSocket(std::shared_ptr<net::WebSocket> from, std::shared_ptr<net::WebSocket> to,
                    std::function<void()> ended) {
  from->Read([from, to, ended](std::optional<std::string> message) {
    if (!message) {
      // A normal close, or the application's (4000-4999: a refusal with its reason), goes on as it
      // came; anything else is the other end gone.
      const int code = from->close_code();
      if (code == 1000 || (code >= 4000 && code <= 4999)) {
        to->Close(code, code == 1000 ? "" : from->close_reason());
      } else {
        to->Close(4001, "the other end of the session went away");
      }
      ended();
      return;
    }
    to->Write(std::move(*message), [from, to, ended](bool written) {
      if (!written) {
        from->Close(4001, "the other end of the session went away");
        ended();
        return;
      }
      RelayWebSocket(from, to, ended);
    });
  });
}

Status TerminalBridges::CheckRoom(const std::string& user) const {
  MutexLock lock(mu_);
  if (sessions_.size() >= max_sessions_) {
    return Status::TooLarge("the server relays " + std::to_string(max_sessions_) +
                            " interactive sessions already, its limit; try again later");
  }
  auto it = per_user_.find(user);
  if (it != per_user_.end() && it->second >= max_per_user_) {
    return Status::TooLarge(user + " has " + std::to_string(max_per_user_) +
                            " interactive sessions open, the limit per user; close one first");
  }
  return Status::Ok();
}

Result<std::string> TerminalBridges::Open(std::shared_ptr<net::WebSocket> user, Target target,
                                          int64_t now_ms, const Invitation& invite) {
  if (Status room = CheckRoom(target.user); !room.ok()) {
    user->Close(1013, room.message().substr(0, 123));
    return room;
  }
  std::string sid = NewSessionId();
  const std::string node = target.node;
  proto::WatchMessage invitation = invite(sid);
  {
    MutexLock lock(mu_);
    ++per_user_[target.user];
    sessions_[sid] = Session{std::move(user), std::move(target), invitation, now_ms, false};
  }
  nodes_.Send(node, invitation);
  return sid;
}

void TerminalBridges::InviteAgain(const std::string& node) {
  std::vector<proto::WatchMessage> invitations;
  {
    MutexLock lock(mu_);
    for (const auto& [sid, session] : sessions_) {
      if (!session.joined && session.target.node == node) {
        invitations.push_back(session.invitation);
      }
    }
  }
  for (const auto& invitation : invitations) nodes_.Send(node, invitation);
}

Status TerminalBridges::CheckWaiting(const std::string& sid, const std::string& node) const {
  MutexLock lock(mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end() || it->second.joined) {
    return Status::NotFound("no interactive session " + sid + " waits for a node");
  }
  if (it->second.target.node != node) {
    return Status::Forbidden("session " + sid + " is another node's");
  }
  return Status::Ok();
}

void TerminalBridges::Join(const std::string& sid, std::shared_ptr<net::WebSocket> agent) {
  std::shared_ptr<net::WebSocket> user;
  {
    MutexLock lock(mu_);
    auto it = sessions_.find(sid);
    if (it != sessions_.end() && !it->second.joined) {
      it->second.joined = true;
      user = it->second.user;
    }
  }
  if (!user) {
    agent->Close(4004, "the session is no longer waiting");
    return;
  }
  // Each direction ends the session once; the second call finds it gone.
  auto ended = [this, sid] { Ended(sid); };
  RelayWebSocket(user, agent, ended);
  RelayWebSocket(agent, user, ended);
}

void TerminalBridges::Ended(const std::string& sid) {
  MutexLock lock(mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) return;
  auto count = per_user_.find(it->second.target.user);
  if (count != per_user_.end() && --count->second == 0) per_user_.erase(count);
  sessions_.erase(it);
}

void TerminalBridges::ExpireWaiting(int64_t now_ms) {
  std::vector<std::pair<std::string, std::shared_ptr<net::WebSocket>>> expired;
  {
    MutexLock lock(mu_);
    for (const auto& [sid, session] : sessions_) {
      if (!session.joined && now_ms - session.opened_at >= connect_ms_) {
        expired.emplace_back(sid, session.user);
      }
    }
    unanswered_ += expired.size();
  }
  for (auto& [sid, user] : expired) {
    user->Close(4004, "the job's node did not answer");
    Ended(sid);
  }
}

std::map<int64_t, int64_t> TerminalBridges::SeenAt(int64_t now_ms, int64_t keep_ms) {
  MutexLock lock(mu_);
  for (const auto& [sid, session] : sessions_) seen_[session.target.job] = now_ms;
  std::erase_if(seen_, [&](const auto& entry) { return now_ms - entry.second > keep_ms; });
  const size_t cap = max_sessions_ * 64;
  if (seen_.size() > cap) {
    std::vector<std::pair<int64_t, int64_t>> by_age;  // (seen at, job)
    for (const auto& [job, at] : seen_) by_age.emplace_back(at, job);
    std::sort(by_age.begin(), by_age.end());
    const size_t excess = seen_.size() - cap;
    for (size_t i = 0; i < excess; ++i) seen_.erase(by_age[i].second);
  }
  return seen_;
}

size_t TerminalBridges::size() const {
  MutexLock lock(mu_);
  return sessions_.size();
}

uint64_t TerminalBridges::unanswered() const {
  MutexLock lock(mu_);
  return unanswered_;
}

}  // namespace berth
