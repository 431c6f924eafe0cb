#include "server/http/web_sessions.h"

#include <algorithm>

#include "common/strings.h"
#include "server/accounts.h"

namespace berth {

WebSessions::WebSessions(const Clock& clock, DurationMs code_ttl, DurationMs session_ttl)
    : clock_(clock), code_ttl_(code_ttl), session_ttl_(session_ttl) {}

void WebSessions::DropExpired(int64_t now) {
  std::erase_if(codes_, [now](const auto& kv) { return kv.second.expires_mono <= now; });
  std::erase_if(sessions_, [now](const auto& kv) { return kv.second.expires_mono <= now; });
}

std::string WebSessions::NewLoginCode(const std::string& user, const std::string& token_secret) {
  std::string code = RandomHex(24);
  int64_t now = clock_.Monotonic();
  MutexLock lock(mu_);
  DropExpired(now);
  if (codes_.size() >= kMaxCodes) {  // a flood of unused codes: the oldest make room
    auto oldest = std::min_element(codes_.begin(), codes_.end(), [](const auto& a, const auto& b) {
      return a.second.expires_mono < b.second.expires_mono;
    });
    codes_.erase(oldest);
  }
  codes_[HashToken(code)] = Code{user, token_secret, now + code_ttl_};
  return code;
}

std::map<std::string, WebSession>::iterator WebSessions::FirstToExpire(const std::string* user) {
  auto found = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (user && it->second.user != *user) continue;
    if (found == sessions_.end() || it->second.expires_mono < found->second.expires_mono) {
      found = it;
    }
  }
  return found;
}

StartedSession WebSessions::StartLocked(const std::string& user, const std::string& token_secret,
                                        int64_t expires_mono) {
  // A user's (and the whole server's) live sessions are capped: past the cap, the one that would
  // expire first ends, as a new login on one more browser logs the oldest out.
  size_t of_user = std::count_if(sessions_.begin(), sessions_.end(),
                                 [&user](const auto& kv) { return kv.second.user == user; });
  for (; of_user >= kMaxSessionsPerUser; --of_user) sessions_.erase(FirstToExpire(&user));
  while (sessions_.size() >= kMaxSessions) sessions_.erase(FirstToExpire(nullptr));
  StartedSession s;
  s.id = RandomHex(32);
  s.session = WebSession{user, token_secret, RandomHex(16), expires_mono};
  sessions_[HashToken(s.id)] = s.session;
  return s;
}

Result<StartedSession> WebSessions::Redeem(const std::string& code) {
  std::string hash = HashToken(code);
  int64_t now = clock_.Monotonic();
  MutexLock lock(mu_);
  DropExpired(now);
  auto it = codes_.find(hash);
  if (it == codes_.end()) {
    return Status::Unauthorized(
        "this login link is unknown, used already or expired (links work once, for a few "
        "minutes): run `berth dashboard` for a new one");
  }
  Code c = std::move(it->second);
  codes_.erase(it);
  return StartLocked(c.user, c.token_secret, now + session_ttl_);
}

StartedSession WebSessions::Start(const std::string& user, const std::string& token_secret,
                                  std::optional<DurationMs> valid_for) {
  int64_t now = clock_.Monotonic();
  DurationMs ttl = valid_for ? std::clamp<DurationMs>(*valid_for, 0, session_ttl_) : session_ttl_;
  MutexLock lock(mu_);
  DropExpired(now);
  return StartLocked(user, token_secret, now + ttl);
}

std::optional<WebSession> WebSessions::Find(const std::string& id) const {
  if (id.empty()) return std::nullopt;
  std::string hash = HashToken(id);
  int64_t now = clock_.Monotonic();
  MutexLock lock(mu_);
  auto it = sessions_.find(hash);
  if (it == sessions_.end() || it->second.expires_mono <= now) return std::nullopt;
  return it->second;
}

std::optional<StartedSession> WebSessions::FindInCookies(const std::string& cookie_header) const {
  for (std::string& id : CookieValues(cookie_header, kCookie)) {
    if (auto s = Find(id)) return StartedSession{std::move(id), std::move(*s)};
  }
  return std::nullopt;
}

void WebSessions::End(const std::string& id) {
  std::string hash = HashToken(id);
  MutexLock lock(mu_);
  sessions_.erase(hash);
}

size_t WebSessions::sessions() const {
  int64_t now = clock_.Monotonic();
  MutexLock lock(mu_);
  return std::count_if(sessions_.begin(), sessions_.end(),
                       [now](const auto& kv) { return kv.second.expires_mono > now; });
}

std::vector<std::string> CookieValues(const std::string& header, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& part : Split(header, ';')) {
    std::string kv = Trim(part);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (name != prefix && name.rfind(prefix + "_", 0) != 0) continue;
    std::string v = kv.substr(eq + 1);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    if (!v.empty()) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace berth
