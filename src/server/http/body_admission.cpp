// How big a body the server reads for a request (server/http/body_admission.h).
#include "server/http/body_admission.h"

#include <fmt/format.h>

#include <memory>

#include "server/http/responses.h"

namespace berth {

BodyAdmission::BodyAdmission(const Identity& identity, Limits limits)
    : identity_(identity), limits_(limits) {}

bool BodyAdmission::TakesLargeBody(const std::string& method, const std::string& path) {
  if (method != "POST" && method != "PUT") return false;
  return path.starts_with("/v1/jobs") || path.starts_with("/v1/uploads/") ||
         path.starts_with("/v1/agent/");
}

net::Admission BodyAdmission::Admit(const net::HttpRequest& head) {
  net::Admission out;
  const size_t declared = [&]() -> size_t {
    const std::string length = head.Header("content-length");
    if (length.empty()) return SIZE_MAX;  // chunked: whatever the limit allows
    try {
      return static_cast<size_t>(std::stoull(length));
    } catch (...) {
      return SIZE_MAX;
    }
  }();
  Result<Principal> who = identity_.Identify(head);
  if (!who.ok()) {
    // Small bodies are read, and the handler answers them as it would have (a login code's
    // exchange needs no identity); anything bigger is answered now, unread.
    out.max_body_bytes = limits_.unidentified_bytes;
    if (declared != SIZE_MAX && declared > limits_.unidentified_bytes) {
      out.refuse = ErrorResponse(who.status());
    }
    return out;
  }
  out.max_body_bytes =
      TakesLargeBody(head.method, head.path) ? limits_.large_bytes : limits_.small_bytes;
  // The cluster token (every node at once) and the server's own admins are not held to a budget:
  // one sender for a whole cluster's agents would be refused for their sum.
  if (who->is_node && who->node.empty()) return out;
  const size_t reserve = std::min(declared, out.max_body_bytes);
  std::string sender = who->is_node && !who->node.empty() ? "node " + who->node
                       : !who->user.empty()               ? who->user
                                                          : who->via;
  {
    MutexLock lock(mu_);
    size_t& used = in_flight_[sender];
    if (used > 0 && used + reserve > limits_.in_flight_per_sender) {
      net::HttpResponse busy = ErrorResponse(
          503, fmt::format("{} is sending {} bytes of request bodies already, the most at once; "
                           "try again when one has arrived",
                           sender, used));
      busy.headers.emplace_back("Retry-After", "1");
      out.refuse = std::move(busy);
      return out;
    }
    used += reserve;
  }
  out.hold = std::shared_ptr<void>(nullptr, [this, sender = std::move(sender), reserve](void*) {
    MutexLock lock(mu_);
    auto it = in_flight_.find(sender);
    if (it == in_flight_.end()) return;
    it->second -= std::min(it->second, reserve);
    if (it->second == 0) in_flight_.erase(it);
  });
  return out;
}

}  // namespace berth
