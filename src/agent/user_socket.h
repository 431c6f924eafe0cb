// UserSocket: the users' door on a node. The agent listens on a unix socket (mode 0666) and
// forwards each request to the server with the node's credential (or the cluster token), saying
// whom it comes from: the
// peer's uid (SO_PEERCRED, the kernel's word) named through this node's passwd database, in
// `X-Berth-On-Behalf-Of`. So `berth queue` on a node needs no token, as on the server's machine.
//
// The server believes a node about its own users, with limits (server/http/identity.h): never a
// built-in admin (root, the server's user) and never the admin role, so a stolen cluster token
// (or node credential) cannot make anyone an admin. Requests for which the kernel gives no uid, or
// whose uid has no name here, are refused (401) without reaching the server.
//
// Thread-safety: Start/Stop from one thread. Requests are forwarded on a pool of kMaxInFlight
// threads (a log long poll holds one for up to a minute); more at once get 503. Stop() aborts the
// forwards in flight and joins the pool.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "common/executor.h"
#include "common/mutex.h"
#include "common/status.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace berth {

class UserSocket {
 public:
  static constexpr int kMaxInFlight = 16;

  UserSocket(std::string path, std::string server_url, net::HttpClientOptions client);
  // With several servers (docs/ha.md): each request goes to the URL `server_url` answers then (the
  // agent's current server; thread-safe).
  UserSocket(std::string path, std::function<std::string()> server_url,
             net::HttpClientOptions client);
  ~UserSocket();
  UserSocket(const UserSocket&) = delete;
  UserSocket& operator=(const UserSocket&) = delete;

  Status Start();
  void Stop();

  // The headers a forwarded request carries: X-Berth-On-Behalf-Of (`user`), and the request's own
  // Idempotency-Key, Content-Type, If-None-Match and Accept (so that a retried submission through
  // a node is still made once). Never the sender's Authorization or On-Behalf-Of.
  static net::HttpHeaders ForwardedHeaders(const net::HttpRequest& request,
                                           const std::string& user);

 private:
  void Forward(net::HttpRequest request, std::shared_ptr<net::Responder> responder);
  void Send(const std::string& user, const net::HttpRequest& request,
            const std::shared_ptr<net::Responder>& responder) EXCLUDES(mu_);

  std::string path_;
  std::function<std::string()> server_url_;
  net::HttpClientOptions client_;
  std::unique_ptr<net::HttpServer> http_;
  std::unique_ptr<Executor> pool_;
  std::atomic<int> in_flight_{0};
  Mutex mu_;
  std::set<net::HttpClient*> active_ GUARDED_BY(mu_);  // forwards in flight, for Stop()
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace berth
