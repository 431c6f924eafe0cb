// HTTP request metrics for /metrics: a Responder that observes how long the server took to answer,
// into berth_http_request_seconds{route,method,code}, `route` being the request's route template
// (server/http/routes.h: so that job ids and node names do not make a series each). A streamed
// answer (logs followed, agents' watch streams) is observed when its stream starts.
//
// Thread-safety: an ObservedResponder is used like the Responder it wraps (which
// may be called from any thread); it observes once, whichever thread answers.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "net/http.h"

namespace berth {

class ObservedResponder : public net::Responder {
 public:
  ObservedResponder(std::shared_ptr<net::Responder> inner, metrics::HistogramFamily& seconds,
                    std::string route, const std::string& method);
  void Send(net::HttpResponse response) override;
  void StartStream(int status, std::string content_type) override;
  bool Write(std::string chunk) override { return inner_->Write(std::move(chunk)); }
  void End() override { inner_->End(); }
  bool closed() const override { return inner_->closed(); }
  size_t backlog() const override { return inner_->backlog(); }
  void AcceptWebSocket(std::string subprotocol,
                       std::function<void(std::shared_ptr<net::WebSocket>)> on_open) override;

 private:
  void Observe(int status);
  std::shared_ptr<net::Responder> inner_;
  metrics::HistogramFamily& seconds_;
  const std::string route_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<bool> observed_{false};
};

}  // namespace berth
