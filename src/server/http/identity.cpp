#include "server/http/identity.h"

#include <fmt/format.h>
#include <unistd.h>

#include <string_view>

#include "common/clock.h"
#include "common/unix_user.h"
#include "net/http_client.h"
#include "net/peer_identity.h"

namespace berth {

bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::optional<std::string> RealSystemUsers::NameOf(uint32_t uid) const {
  int64_t now = MonotonicMs();
  {
    MutexLock lock(mu_);
    auto it = names_.find(uid);
    if (it != names_.end() && now - it->second.at < 60'000) return it->second.name;
  }
  std::optional<std::string> name = UserNameOf(uid);
  MutexLock lock(mu_);
  if (names_.size() > 10'000) names_.clear();
  names_[uid] = Cached{name, now};
  return name;
}

Result<uint32_t> RealSystemUsers::LoopbackPeerUid(const net::PeerInfo& peer) const {
  return net::LoopbackPeerUid(peer);
}

uint32_t RealSystemUsers::OwnUid() const { return ::geteuid(); }

std::set<std::string> Identity::BuiltinAdmins(const SystemUsers& system) {
  std::set<std::string> admins = {"root"};
  if (auto own = system.NameOf(system.OwnUid())) admins.insert(*own);
  return admins;
}

Identity::Identity(IdentityOptions options, const Accounts& accounts, const SystemUsers& system,
                   const WebSessions* sessions)
    : options_(std::move(options)), accounts_(accounts), system_(system), sessions_(sessions) {}

bool FromBrowser(const net::HttpRequest& request) {
  return !request.Header("origin").empty() || !request.Header("sec-fetch-site").empty();
}

bool AddressedToLoopback(const net::HttpRequest& request) {
  std::string host = request.Header("host");
  if (host.empty()) return true;  // HTTP/1.0: no name to check
  if (host.front() == '[') {      // [::1]:8765
    const size_t close = host.find(']');
    host = close == std::string::npos ? "" : host.substr(1, close - 1);
  } else if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(':') == colon) {
    host.resize(colon);
  }
  return net::IsLoopbackHost(host);
}

Status CheckOwnOrigin(const net::HttpRequest& request) {
  const std::string origin = request.Header("origin");
  const std::string host = request.Header("host");
  std::string_view rest = origin;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (rest.substr(0, scheme.size()) == scheme) {
      rest.remove_prefix(scheme.size());
      break;
    }
  }
  if (origin.empty() || host.empty() || rest.size() == origin.size() || rest != host) {
    return Status::Forbidden(
        "a WebSocket opened with a dashboard session must come from the "
        "server's own page (Origin " +
        (origin.empty() ? std::string("missing") : origin) + ", Host " +
        (host.empty() ? std::string("missing") : host) + ")");
  }
  return Status::Ok();
}

Result<Principal> Identity::BySession(const net::HttpRequest& request) const {
  std::optional<StartedSession> found = sessions_->FindInCookies(request.Header("cookie"));
  if (!found) {
    return Status::Unauthorized(
        "your dashboard session has ended (it expired, you logged out, or the server restarted): "
        "run `berth dashboard` for a new login link");
  }
  const WebSession* session = &found->session;
  if (request.websocket_upgrade) {
    // An upgrade is a GET that acts (exec, attach, port-forward), and a same-site page (another
    // port of this host: a job's notebook behind port-forward) makes the browser send the cookie
    // with it: the page must be this server's own, and hold the session's CSRF secret.
    BERTH_RETURN_IF_ERROR(CheckOwnOrigin(request));
    if (!SameSecret(request.Query("csrf"), session->csrf)) {
      return Status::Forbidden(
          "a WebSocket opened with a dashboard session needs the session's CSRF secret (the "
          "query parameter csrf=): only the dashboard's own page has it");
    }
  } else if (request.method != "GET" && request.method != "HEAD" &&
             !SameSecret(request.Header("x-berth-csrf"), session->csrf)) {
    return Status::Forbidden(
        "a change made with a dashboard session needs the session's X-Berth-CSRF header (the "
        "dashboard's own page sends it; a page of another site cannot)");
  }
  Principal p;
  if (!session->token_secret.empty()) {
    auto by_token = accounts_.ForToken(session->token_secret);  // revoked or expired: refused
    if (!by_token.ok()) return by_token.status();
    p = std::move(*by_token);
  } else {
    p = accounts_.ForUser(session->user, "dashboard");
  }
  p.via = "dashboard (" + p.via + ")";
  return p;
}

Result<Principal> Identity::ForUid(uint32_t uid, const std::string& via) const {
  std::optional<std::string> name = system_.NameOf(uid);
  if (!name) {
    return Status::Unauthorized("uid " + std::to_string(uid) +
                                " has no user name on the server's machine (passwd database)");
  }
  bool owner = uid == 0 || uid == system_.OwnUid();
  if (options_.owner_only && !owner) {
    return Status::Forbidden("this is a private server (a local cluster) of " +
                             system_.NameOf(system_.OwnUid()).value_or("another user") + "; " +
                             *name + " may not use it");
  }
  Principal p = accounts_.ForUser(*name, via);
  p.is_node = owner;
  return p;
}

Result<Principal> Identity::VouchedByNode(const std::string& user, const Principal* node) const {
  BERTH_RETURN_IF_ERROR(CheckAccountName("the user a node speaks for", user));
  if (options_.owner_only || accounts_.IsBuiltinAdmin(user)) {
    return Status::Forbidden(
        "a node may not speak for " + user +
        (options_.owner_only ? " on a private server" : ": use the server's machine or a token"));
  }
  if (node != nullptr && !NodeSpeaksFor(node->speaks_for, user)) {
    return Status::Forbidden(fmt::format(
        "node {} may not speak for {} (it speaks for {}): an admin lets it with `berth admin node "
        "users {} {}`, or {} uses a token",
        node->node, user, node->speaks_for.empty() ? "no one" : node->speaks_for, node->node,
        node->speaks_for.empty() || node->speaks_for == "*" ? user : node->speaks_for + "," + user,
        user));
  }
  Principal p = accounts_.ForUser(
      user, node == nullptr ? "a node's socket" : "node " + node->node + "'s socket");
  // A stolen node credential (or cluster token) must not make anyone an admin.
  if (p.role == Role::kAdmin) p.role = Role::kOperator;
  return p;
}

Result<Principal> Identity::Identify(const net::HttpRequest& request) const {
  std::string auth = request.Header("authorization");
  if (!auth.empty()) {
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) != 0) {
      return Status::Unauthorized("the Authorization header must be 'Bearer TOKEN'");
    }
    std::string secret = auth.substr(prefix.size());
    if (!options_.cluster_token.empty() && SameSecret(secret, options_.cluster_token)) {
      std::string on_behalf_of = request.Header("x-berth-on-behalf-of");
      if (!on_behalf_of.empty()) return VouchedByNode(on_behalf_of, nullptr);
      Principal node;
      node.via = "cluster token";
      node.is_node = true;
      return node;
    }
    auto p = accounts_.ForToken(secret);
    if (std::string on_behalf_of = request.Header("x-berth-on-behalf-of"); !on_behalf_of.empty()) {
      if (p.ok() && p->is_node) return VouchedByNode(on_behalf_of, &*p);
      return Status::Forbidden("only nodes may speak for another user");
    }
    if (p.ok() && options_.owner_only && !accounts_.IsBuiltinAdmin(p->user)) {
      return Status::Forbidden("this is a private server (a local cluster): " + p->user +
                               " may not use it");
    }
    return p;
  }
  if (!request.Header("x-berth-on-behalf-of").empty()) {
    return Status::Forbidden("only nodes (the cluster token) may speak for another user");
  }
  if (sessions_ != nullptr) {
    if (!CookieValues(request.Header("cookie"), WebSessions::kCookie).empty()) {
      return BySession(request);
    }
  }
  const net::PeerInfo& peer = request.peer;
  if (peer.transport == net::PeerInfo::Transport::kUnix) {
    if (!peer.uid) return Status::Unauthorized("the unix socket did not say who connected");
    return ForUid(*peer.uid, "socket");
  }
  if (peer.transport == net::PeerInfo::Transport::kTcp && FromBrowser(request)) {
    return Status::Unauthorized(
        "a browser is let in by a dashboard session, not by the machine it runs on (any page it "
        "opens could act as you): open the link `berth dashboard` prints, or log in with a token");
  }
  if (peer.transport == net::PeerInfo::Transport::kTcp && !AddressedToLoopback(request)) {
    // A name that resolves to 127.0.0.1 may be a web page's (DNS rebinding), whatever headers
    // its browser left out.
    return Status::Unauthorized(
        "a request to this server's loopback by another name (Host: " + request.Header("host") +
        ") is not identified by the loopback: use 127.0.0.1 or localhost, or present a token");
  }
  if (peer.transport == net::PeerInfo::Transport::kTcp && !options_.tokens_on_tcp) {
    auto uid = system_.LoopbackPeerUid(peer);
    if (uid.ok()) return ForUid(*uid, "loopback");
  }
  return Status::Unauthorized(
      "this berth server does not know who you are: on its machine use its unix socket "
      "(--server unix:STATE_DIR/berth.sock); elsewhere present a token (berth login, --token, "
      "BERTH_TOKEN or BERTH_TOKEN_FILE)");
}

}  // namespace berth
