// WebSessions: how the dashboard's browser is let in (docs/dashboard.md).
//
// A browser cannot show the kernel who it is (it is not the CLI on a unix socket), and must not be
// let in for being on the server's machine: any web page it opens could then act as its user. So
// `berth dashboard` (any identified user) asks for a one-time login code, valid a few minutes, and
// opens a URL carrying it (as Jupyter does). The page exchanges the code, once, for a session: a
// random id kept by the browser in an HttpOnly, SameSite=Strict cookie, and a CSRF secret the page
// reads once and sends back in the X-Berth-CSRF header with every change (a foreign page can make
// the browser send the cookie, never that header). A user's API token pasted into the login form
// starts a session too; such a session stays bound to its token, so revoking the token ends it.
//
// Codes and sessions live in this process's memory only, keyed by the SHA-256 of their secret (no
// lookup compares a presented secret byte by byte): a server restart logs browsers out, and they
// ask for a new link. Sessions last `session_ttl` from their start (no sliding renewal), capped by
// their token's expiry. A user holds at most kMaxSessionsPerUser live sessions (a new one ends
// their oldest), so no token can make the server keep sessions without bound.
//
// Thread-safety: every method is thread-safe (one internal mutex).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"

namespace berth {

struct WebSession {
  std::string user;
  // The API token the session stands on ("" for one started from a login code): checked again
  // with every request.
  std::string token_secret;
  std::string csrf;          // the value X-Berth-CSRF must carry on changes
  int64_t expires_mono = 0;  // Clock::Monotonic() ms
};

struct StartedSession {
  std::string id;  // the cookie's value
  WebSession session;
};

class WebSessions {
 public:
  static constexpr DurationMs kCodeTtl = 5 * 60'000;
  static constexpr DurationMs kSessionTtl = 12 * 3'600'000;
  static constexpr size_t kMaxCodes = 10'000;  // older unused codes are dropped beyond this
  // Live sessions per user, and in all: a new one past either cap ends the one that would expire
  // first (of that user, or of anyone).
  static constexpr size_t kMaxSessionsPerUser = 20;
  static constexpr size_t kMaxSessions = 10'000;
  // The cookie's name is this and the server's port ("berth_session_8765"): browsers keep cookies
  // per host, not per port, and two servers on one host must not overwrite each other's.
  static constexpr const char* kCookie = "berth_session";

  explicit WebSessions(const Clock& clock, DurationMs code_ttl = kCodeTtl,
                       DurationMs session_ttl = kSessionTtl);

  // A one-time login code for `user` (and the token the request presented, "" for none).
  std::string NewLoginCode(const std::string& user, const std::string& token_secret) EXCLUDES(mu_);
  // Exchanges a code for a new session; the code is gone afterwards. Unauthorized when it is
  // unknown, used already or expired.
  Result<StartedSession> Redeem(const std::string& code) EXCLUDES(mu_);
  // A session for a user who presented an API token in the login form; `valid_for` caps it (the
  // token's remaining life).
  StartedSession Start(const std::string& user, const std::string& token_secret,
                       std::optional<DurationMs> valid_for) EXCLUDES(mu_);
  // The live session with this id, if any.
  std::optional<WebSession> Find(const std::string& id) const EXCLUDES(mu_);
  // The first live session among the session cookies of a Cookie header (a browser sends those of
  // every berth server of the host).
  std::optional<StartedSession> FindInCookies(const std::string& cookie_header) const EXCLUDES(mu_);
  void End(const std::string& id) EXCLUDES(mu_);
  // Live sessions.
  size_t sessions() const EXCLUDES(mu_);

 private:
  struct Code {
    std::string user;
    std::string token_secret;
    int64_t expires_mono = 0;
  };
  void DropExpired(int64_t now) REQUIRES(mu_);
  StartedSession StartLocked(const std::string& user, const std::string& token_secret,
                             int64_t expires_mono) REQUIRES(mu_);
  // The live session (of `user`, when given) that expires first; end() when there is none.
  std::map<std::string, WebSession>::iterator FirstToExpire(const std::string* user) REQUIRES(mu_);

  const Clock& clock_;
  const DurationMs code_ttl_;
  const DurationMs session_ttl_;
  mutable Mutex mu_;
  std::map<std::string, Code> codes_ GUARDED_BY(mu_);           // by hash of the code
  std::map<std::string, WebSession> sessions_ GUARDED_BY(mu_);  // by hash of the id
};

// The values of every cookie whose name is `prefix` or starts with `prefix` + "_".
std::vector<std::string> CookieValues(const std::string& header, const std::string& prefix);

}  // namespace berth
