#include "server/http_metrics.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace berth {
namespace {

bool OneOf(const std::string& s, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

}  // namespace

std::string RouteOf(const std::vector<std::string>& parts) {
  const size_t n = parts.size();
  if (n == 2 && parts[1] == "metrics") return "/metrics";
  if (n == 2 && parts[1] == "login") return "/login";
  if (n == 2) return "/{asset}";  // "/" and the dashboard's files (unknown ones: 404)
  if (n < 3 || parts[1] != "v1") return "other";
  const std::string& top = parts[2];
  if (!OneOf(top, {"health", "whoami", "jobs", "queue", "groups", "usage", "teams", "nodes",
                   "admin", "specs", "agent", "dashboard"})) {
    return "other";
  }
  const std::string route = "/v1/" + top;
  if (n == 3) return route;
  if (top == "jobs") {
    if (n == 4) return parts[3] == "cancel" ? route + "/cancel" : route + "/{id}";
    if (n == 5 && OneOf(parts[4], {"logs", "requeue"})) return route + "/{id}/" + parts[4];
  } else if (top == "nodes") {
    if (n == 5 && OneOf(parts[4], {"drain", "undrain"})) return route + "/{node}/" + parts[4];
  } else if (top == "dashboard") {
    if (n == 4 && OneOf(parts[3], {"link", "login", "logout", "session", "overview", "queue"})) {
      return route + "/" + parts[3];
    }
  } else if (top == "specs" || top == "groups") {
    if (n == 4) return route + "/{id}";
  } else if (top == "agent") {
    if (n == 4 && OneOf(parts[3], {"register", "heartbeat", "report", "logs", "watch"})) {
      return route + "/" + parts[3];
    }
  } else if (top == "admin") {
    const std::string& what = parts[3];
    if (n == 4 && OneOf(what, {"tokens", "users", "audit", "join-tokens"})) {
      return route + "/" + what;
    }
    if (n == 6 && what == "nodes" && OneOf(parts[5], {"revoke", "users"})) {
      return route + "/nodes/{name}/" + parts[5];
    }
    if (n == 5 && OneOf(what, {"users", "teams"})) return route + "/" + what + "/{name}";
    if (n == 6 && what == "tokens" && parts[5] == "revoke") return route + "/tokens/{name}/revoke";
  }
  return "other";
}

ObservedResponder::ObservedResponder(std::shared_ptr<net::Responder> inner,
                                     metrics::HistogramFamily& seconds, std::string route,
                                     const std::string& method)
    : inner_(std::move(inner)),
      seconds_(seconds),
      route_(std::move(route)),
      method_(method == "GET" || method == "POST" ? method : "other") {}

void ObservedResponder::Send(net::HttpResponse response) {
  Observe(response.status);
  inner_->Send(std::move(response));
}

void ObservedResponder::StartStream(int status, std::string content_type) {
  Observe(status);
  inner_->StartStream(status, std::move(content_type));
}

void ObservedResponder::Observe(int status) {
  if (observed_.exchange(true)) return;
  seconds_.Observe(
      {route_, method_, std::to_string(status)},
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace berth
