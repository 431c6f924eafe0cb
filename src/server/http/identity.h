// Identity: who sent a request, from what the kernel or a token says — never from what the request
// claims (docs/security.md).
//
//   1. `Authorization: Bearer SECRET`: the cluster token identifies a node, any node (agents'
//      protocol only, never a user); any other secret must be a token Accounts::ForToken knows: a
//      user's, a node's own credential (that node only), or a join token (joining only).
//   2. The dashboard's session cookie (server/http/web_sessions.h): its user, or its token's owner.
//      A change (any method but GET and HEAD) also needs the session's X-Berth-CSRF header; a
//      WebSocket upgrade (a GET that acts: exec, attach, port-forward) needs an Origin that is the
//      server's own (its scheme-less host:port equal to the Host header) and the CSRF secret as
//      the query parameter `csrf`, since a same-site page (another port of the host) gets the
//      cookie sent with its upgrades.
//   3. The unix socket: the peer's uid from SO_PEERCRED, named through the passwd database.
//   4. A TCP connection from this machine's loopback: the uid owning the client's socket, asked of
//      the kernel (net::LoopbackPeerUid) — unless the server requires tokens on TCP, and never for
//      a browser (a request with an Origin or Sec-Fetch-Site header), and never for a request
//      whose Host header is not a loopback address or localhost (a web page reaching 127.0.0.1
//      through a rebound DNS name): any page a local user opens could otherwise act as them.
//   Anything else is refused (Unauthorized, 401).
// A node (its credential, or the cluster token) may speak for a user of its own machine with
// `X-Berth-On-Behalf-Of` (agent/user_socket.h: the agent read the uid from its unix socket): never
// for a built-in admin, and never with more than the operator role; a node credential only for the
// users an admin named for it (Principal::speaks_for). uid 0 and the server's own uid
// are admins (Accounts' built-in admins) and may also act as nodes: they can read the cluster token
// anyway.
//
// The parts that ask the system (uid -> name, loopback peer uid) are behind SystemUsers, so that
// tests substitute a fake (tests/fakes/fake_system_users.h).
//
// Thread-safety: Identify() is thread-safe (Accounts is; the rest is immutable after
// construction); SystemUsers implementations must be thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/mutex.h"
#include "net/http.h"
#include "server/accounts.h"
#include "server/http/web_sessions.h"

namespace berth {

class SystemUsers {
 public:
  virtual ~SystemUsers() = default;
  // The login name of `uid`, or nullopt when the passwd database has none.
  virtual std::optional<std::string> NameOf(uint32_t uid) const = 0;
  // The uid owning the client end of a TCP connection from the loopback (see net/peer_identity.h).
  virtual Result<uint32_t> LoopbackPeerUid(const net::PeerInfo& peer) const = 0;
  // The uid this process runs as.
  virtual uint32_t OwnUid() const = 0;
};

// The real thing: getpwuid_r, NETLINK_SOCK_DIAG, geteuid. Names are cached for a minute, so that
// a slow name service (LDAP, sssd) is asked once per user, not once per request.
class RealSystemUsers final : public SystemUsers {
 public:
  std::optional<std::string> NameOf(uint32_t uid) const override;
  Result<uint32_t> LoopbackPeerUid(const net::PeerInfo& peer) const override;
  uint32_t OwnUid() const override;

 private:
  struct Cached {
    std::optional<std::string> name;
    int64_t at = 0;  // monotonic ms
  };
  mutable Mutex mu_;
  mutable std::map<uint32_t, Cached> names_ GUARDED_BY(mu_);
};

struct IdentityOptions {
  std::string cluster_token;
  bool tokens_on_tcp = false;  // refuse loopback peer identification: TCP clients need a token
  // A private server (the local cluster): only its own user and root are let in (403 for others).
  bool owner_only = false;
};

class Identity {
 public:
  // `accounts`, `system` and `sessions` (when given) must outlive this.
  Identity(IdentityOptions options, const Accounts& accounts, const SystemUsers& system,
           const WebSessions* sessions = nullptr);

  // Who sent `request`. Unauthorized (with what to do about it) when nobody is identified.
  Result<Principal> Identify(const net::HttpRequest& request) const;

  // The names that are always admins: root and the server's own user.
  static std::set<std::string> BuiltinAdmins(const SystemUsers& system);

 private:
  Result<Principal> ForUid(uint32_t uid, const std::string& via) const;
  // `node`: the node whose credential vouches ("": the cluster token).
  // `node`: the credential's principal; nullptr for the cluster token (any node, any user).
  Result<Principal> VouchedByNode(const std::string& user, const Principal* node) const;
  Result<Principal> BySession(const net::HttpRequest& request) const;

  IdentityOptions options_;
  const Accounts& accounts_;
  const SystemUsers& system_;
  const WebSessions* sessions_;
};

// Whether a request was sent by a web browser (it carries Origin or Sec-Fetch-Site).
bool FromBrowser(const net::HttpRequest& request);
// Ok when the request's Origin is the server's own as the client addressed it: `http(s)://` and
// then exactly the Host header. Forbidden otherwise (another port or host of the same site too).
Status CheckOwnOrigin(const net::HttpRequest& request);
// Whether its Host header names a loopback address or localhost (or it has none).
bool AddressedToLoopback(const net::HttpRequest& request);

// Constant-time comparison, so that response timing does not leak a secret.
bool SameSecret(const std::string& a, const std::string& b);

}  // namespace berth
