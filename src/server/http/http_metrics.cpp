#include "server/http/http_metrics.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace berth {
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

void ObservedResponder::AcceptWebSocket(
    std::string subprotocol, std::function<void(std::shared_ptr<net::WebSocket>)> on_open) {
  Observe(101);  // an upgrade refused is observed as 101 too: the server's part is the same
  inner_->AcceptWebSocket(std::move(subprotocol), std::move(on_open));
}

void ObservedResponder::Observe(int status) {
  if (observed_.exchange(true)) return;
  seconds_.Observe(
      {route_, method_, std::to_string(status)},
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace berth
