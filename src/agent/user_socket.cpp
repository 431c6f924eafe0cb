#include "agent/user_socket.h"

#include "common/json_util.h"
#include "common/log.h"
#include "common/unix_user.h"

namespace berth {

namespace {

net::HttpResponse Refuse(int status, const std::string& message) {
  net::HttpResponse r;
  r.status = status;
  r.body = SerializeJson(json::object{{"error", message}}) + "\n";
  return r;
}

}  // namespace

net::HttpHeaders UserSocket::ForwardedHeaders(const net::HttpRequest& request,
                                              const std::string& user) {
  // What the request means travels with it (a retried `berth exec` keeps its idempotency key, a
  // poll its ETag); who sent it is the kernel's word, never a header of the sender's.
  net::HttpHeaders out{{"X-Berth-On-Behalf-Of", user}};
  for (const char* name : {"idempotency-key", "content-type", "if-none-match", "accept"}) {
    if (std::string value = request.Header(name); !value.empty()) out.emplace_back(name, value);
  }
  return out;
}

UserSocket::UserSocket(std::string path, std::string server_url, net::HttpClientOptions client)
    : UserSocket(
          std::move(path), [url = std::move(server_url)] { return url; }, std::move(client)) {}

UserSocket::UserSocket(std::string path, std::function<std::string()> server_url,
                       net::HttpClientOptions client)
    : path_(std::move(path)), server_url_(std::move(server_url)), client_(std::move(client)) {}

UserSocket::~UserSocket() { Stop(); }

Status UserSocket::Start() {
  pool_ = std::make_unique<Executor>(kMaxInFlight, "berth-users");
  net::HttpServerOptions options;
  options.listen_tcp = false;
  options.unix_socket_path = path_;
  options.threads = 1;
  http_ = std::make_unique<net::HttpServer>(
      options, [this](net::HttpRequest&& request, std::shared_ptr<net::Responder> responder) {
        Forward(std::move(request), std::move(responder));
      });
  return http_->Start();
}

void UserSocket::Stop() {
  {
    MutexLock lock(mu_);
    stopped_ = true;
    for (net::HttpClient* client : active_) client->Abort();
  }
  if (pool_) pool_->Stop();  // the forwards end at once: their clients were aborted
  if (http_) http_->Stop();
}

void UserSocket::Send(const std::string& user, const net::HttpRequest& request,
                      const std::shared_ptr<net::Responder>& responder) {
  net::HttpClient http(server_url_(), client_);
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    active_.insert(&http);
  }
  auto answer = http.Request(request.method, request.target, request.body, 90'000,
                             ForwardedHeaders(request, user));
  {
    MutexLock lock(mu_);
    active_.erase(&http);
  }
  if (answer.ok()) {
    responder->Send(std::move(*answer));
  } else {
    responder->Send(Refuse(503, "cannot reach the server: " + answer.status().message()));
  }
}

void UserSocket::Forward(net::HttpRequest request, std::shared_ptr<net::Responder> responder) {
  if (request.peer.transport != net::PeerInfo::Transport::kUnix || !request.peer.uid) {
    responder->Send(Refuse(401, "use this node's unix socket " + path_));
    return;
  }
  std::optional<std::string> user = UserNameOf(*request.peer.uid);
  if (!user) {
    responder->Send(
        Refuse(401, "uid " + std::to_string(*request.peer.uid) + " has no name on this node"));
    return;
  }
  if (in_flight_.fetch_add(1) >= kMaxInFlight) {
    in_flight_.fetch_sub(1);
    responder->Send(Refuse(503, "this node's user socket is busy; try again"));
    return;
  }
  pool_->Post([this, user = *user, request = std::move(request), responder] {
    Send(user, request, responder);
    in_flight_.fetch_sub(1);
  });
}

}  // namespace berth
