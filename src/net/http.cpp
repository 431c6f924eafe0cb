#include "net/http.h"

#include <strings.h>

#include "common/strings.h"

namespace berth::net {

std::string HttpResponse::Header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
  }
  return "";
}

void Responder::AcceptWebSocket(std::string, std::function<void(std::shared_ptr<WebSocket>)>) {
  HttpResponse r;
  r.status = 501;
  r.body = R"({"error":"this connection cannot become a WebSocket"})";
  Send(std::move(r));
}

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string UrlDecode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string UrlEncode(const std::string& s) { return PercentEncode(s); }

void ParseTarget(const std::string& target, std::string* path,
                 std::map<std::string, std::string>* query) {
  size_t q = target.find('?');
  *path = UrlDecode(target.substr(0, q), false);
  query->clear();
  if (q == std::string::npos) return;
  std::string rest = target.substr(q + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t amp = rest.find('&', start);
    std::string part =
        rest.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    if (!part.empty()) {
      size_t eq = part.find('=');
      if (eq == std::string::npos) {
        (*query)[UrlDecode(part, true)] = "";
      } else {
        (*query)[UrlDecode(part.substr(0, eq), true)] = UrlDecode(part.substr(eq + 1), true);
      }
    }
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
}

}  // namespace berth::net
