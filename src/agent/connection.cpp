#include "agent/connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/json_util.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/term_channel.h"
#include "net/http.h"
#include "net/http_client.h"

namespace berth {

struct HttpAgentConnection::Lane {
  Lane(const std::string& url, const net::HttpClientOptions& options) : client(url, options) {}
  std::mutex mu;
  net::HttpClient client;  // guarded by mu
};

HttpAgentConnection::HttpAgentConnection(std::string server_url, std::string token,
                                         std::string tls_fingerprint)
    : server_url_(std::move(server_url)),
      client_options_{
          .token = std::move(token), .tls_fingerprint = std::move(tls_fingerprint), .ca_file = ""},
      control_(std::make_unique<Lane>(server_url_, client_options_)),
      heartbeat_(std::make_unique<Lane>(server_url_, client_options_)),
      health_(std::make_unique<Lane>(server_url_, client_options_)),
      shipping_(std::make_unique<Lane>(server_url_, client_options_)),
      specs_(std::make_unique<Lane>(server_url_, client_options_)) {}

HttpAgentConnection::~HttpAgentConnection() = default;

namespace {

// The error text of a refusal: its JSON "error", or the body itself.
std::string ErrorOf(const net::HttpResponse& res) {
  auto v = ParseJson(res.body, "answer");
  if (v.ok() && v->is_object()) {
    if (const auto* e = v->as_object().if_contains("error"); e && e->is_string()) {
      return std::string(e->as_string());
    }
  }
  return res.body;
}

Status StatusOf(const net::HttpResponse& res, const std::string& what) {
  std::string error = ErrorOf(res);
  switch (res.status) {
    case 409:
      return Status::Conflict(error);
    case 401:
      return Status::Unauthorized(error);
    case 403:
      return Status::Forbidden(error);
    case 503:
      return Status::Unavailable(error);
    default:
      return Status::Invalid(fmt::format("{} refused ({}): {}", what, res.status, error));
  }
}

template <typename Answer>
Result<Answer> Call(std::mutex& mu, net::HttpClient& client, const std::string& what,
                    const std::string& target, const json::object& body, int64_t timeout_ms) {
  std::lock_guard lock(mu);
  auto res = client.Request("POST", target, json::serialize(body), timeout_ms);
  if (!res.ok()) return res.status();
  if (res->status != 200) return StatusOf(*res, what);
  auto v = ParseJson(res->body, what + " answer");
  if (!v.ok()) return v.status();
  return Answer::Decode(*v);
}

}  // namespace

Result<proto::RegisterAnswer> HttpAgentConnection::Register(const proto::RegisterRequest& request) {
  return Call<proto::RegisterAnswer>(control_->mu, control_->client, "registration",
                                     "/v1/agent/register", request.Encode(), 10'000);
}

Status HttpAgentConnection::Heartbeat(const proto::HeartbeatRequest& request) {
  auto answer = Call<proto::HeartbeatAnswer>(heartbeat_->mu, heartbeat_->client, "heartbeat",
                                             "/v1/agent/heartbeat", request.Encode(), 10'000);
  return answer.status();
}

Result<proto::HealthAnswer> HttpAgentConnection::SendHealth(const proto::HealthRequest& request) {
  return Call<proto::HealthAnswer>(health_->mu, health_->client, "health", "/v1/agent/health",
                                   request.Encode(), 10'000);
}

Result<proto::ReportAnswer> HttpAgentConnection::Report(const proto::ReportRequest& request,
                                                        int64_t timeout_ms) {
  return Call<proto::ReportAnswer>(shipping_->mu, shipping_->client, "report", "/v1/agent/report",
                                   request.Encode(), timeout_ms);
}

Result<std::string> HttpAgentConnection::FetchBlobs(const BlobFetch& fetch) {
  json::array want;
  for (const auto& [digest, offset] : fetch.want) want.push_back(json::array{digest, offset});
  json::object body{{"node", fetch.node},
                    {"session", fetch.session},
                    {"job", fetch.job},
                    {"want", std::move(want)}};
  std::lock_guard lock(specs_->mu);
  auto res = specs_->client.Request("POST", "/v1/agent/blobs", json::serialize(body), 120'000);
  if (!res.ok()) return res.status();
  if (res->status != 200) return StatusOf(*res, "blob fetch");
  return std::move(res->body);
}

Result<proto::LogBatchAnswer> HttpAgentConnection::AppendLogs(
    const std::string& node, const std::string& session, const std::vector<proto::LogPiece>& pieces,
    int64_t timeout_ms) {
  std::lock_guard lock(shipping_->mu);
  if (!one_piece_per_request_) {
    auto res = shipping_->client.Request(
        "POST",
        "/v1/agent/logs/batch?node=" + net::UrlEncode(node) + "&session=" + net::UrlEncode(session),
        proto::EncodeLogBatch(pieces), timeout_ms);
    if (!res.ok()) return res.status();
    if (res->status == 404) {
      LogInfo("the server takes output one rank per request (it has no /v1/agent/logs/batch)");
      one_piece_per_request_ = true;
    } else {
      if (res->status != 200) return StatusOf(*res, "log shipping");
      auto v = ParseJson(res->body, "logs batch answer");
      if (!v.ok()) return v.status();
      return proto::LogBatchAnswer::Decode(*v);
    }
  }
  // An older server: POST /v1/agent/logs for each piece, its answers put together as a batch's.
  proto::LogBatchAnswer answer;
  for (const proto::LogPiece& p : pieces) {
    proto::LogAppend where{node, session, p.job, p.attempt, p.rank, p.offset};
    auto res = shipping_->client.Request("POST", "/v1/agent/logs?" + where.ToQueryString(), p.data,
                                         timeout_ms);
    if (!res.ok()) return res.status();
    if (res->status == 403) {  // not the node's rank: refused, as a batch's piece would be
      answer.results.push_back({p.offset, ErrorOf(*res)});
      continue;
    }
    if (res->status != 200 && res->status != 409) return StatusOf(*res, "log shipping");
    auto v = ParseJson(res->body, "logs answer");
    if (!v.ok()) return v.status();
    auto one = proto::LogAppendAnswer::Decode(*v);
    if (!one.ok()) return one.status();
    answer.results.push_back(std::move(*one));
  }
  return answer;
}

Result<std::string> HttpAgentConnection::GetSpec(const SpecFetch& fetch) {
  std::lock_guard lock(specs_->mu);
  auto res = specs_->client.Request(
      "GET",
      fmt::format("/v1/specs/{}?node={}&session={}&job={}", fetch.spec_id,
                  net::UrlEncode(fetch.node), net::UrlEncode(fetch.session), fetch.job),
      "", 30'000);
  if (!res.ok()) return res.status();
  if (res->status == 404) return Status::NotFound(fmt::format("spec {} is unknown", fetch.spec_id));
  if (res->status != 200) return StatusOf(*res, "spec fetch");
  return std::move(res->body);
}

Result<std::unique_ptr<net::WebSocketClient>> HttpAgentConnection::OpenSession(
    const std::string& node, const std::string& session, const std::string& sid) {
  // A connection of its own: a session may last for days.
  net::HttpClient client(server_url_, client_options_);
  std::unique_ptr<net::WebSocketClient> ws;
  auto res = client.OpenWebSocket(fmt::format("/v1/agent/sessions/{}?node={}&session={}", sid,
                                              net::UrlEncode(node), net::UrlEncode(session)),
                                  kSessionSubprotocol, 10'000, &ws, 256 << 10);
  if (!res.ok()) return res.status();
  if (res->status == 404) return Status::NotFound("session " + sid + " is not waiting");
  if (!ws) return StatusOf(*res, "session");
  return ws;
}

Status HttpAgentConnection::Watch(
    const std::string& node, const std::string& session,
    const std::function<bool(const proto::WatchMessage&)>& on_message) {
  auto client = std::make_shared<net::HttpClient>(server_url_, client_options_);
  {
    std::lock_guard lock(watch_mu_);
    if (watch_aborted_) {
      watch_aborted_ = false;
      return Status::Unavailable("the watch was aborted");
    }
    watches_.insert(client);
  }
  std::string pending;
  int status = 0;
  Status st = client->Stream(
      "GET", "/v1/agent/watch?node=" + net::UrlEncode(node) + "&session=" + net::UrlEncode(session),
      "", 20'000,
      [&](std::string_view data) {
        pending.append(data);
        size_t nl;
        while ((nl = pending.find('\n')) != std::string::npos) {
          std::string line = pending.substr(0, nl);
          pending.erase(0, nl + 1);
          auto message = proto::DecodeWatchMessage(line);
          // Types this version does not know are skipped (a newer server may send them).
          if (message.ok() && !on_message(*message)) return false;
        }
        return true;
      },
      &status);
  {
    std::lock_guard lock(watch_mu_);
    watches_.erase(client);
  }
  if (st.ok() && status == 409) return Status::Conflict("unknown agent session; register again");
  return st;
}

void HttpAgentConnection::AbortWatch() {
  std::set<std::shared_ptr<net::HttpClient>> clients;
  {
    std::lock_guard lock(watch_mu_);
    clients = watches_;
    if (clients.empty()) watch_aborted_ = true;
  }
  // The shared pointers keep the clients alive while they are aborted, even if their Watch
  // returns meanwhile.
  for (const auto& client : clients) client->Abort();
}

void HttpAgentConnection::AbortWatchInProgress() {
  std::set<std::shared_ptr<net::HttpClient>> clients;
  {
    std::lock_guard lock(watch_mu_);
    clients = watches_;
  }
  // The shared pointers keep the clients alive while they are aborted, even if their Watch
  // returns meanwhile.
  for (const auto& client : clients) client->Abort();
}

std::vector<std::string> SplitServerUrls(const std::string& list) {
  std::vector<std::string> urls;
  for (const std::string& url : Split(list, ',')) {
    if (!Trim(url).empty()) urls.push_back(Trim(url));
  }
  return urls;
}

FailoverAgentConnection::FailoverAgentConnection(const std::vector<std::string>& server_urls,
                                                 const std::string& token,
                                                 const std::string& tls_fingerprint)
    : urls_(server_urls) {
  for (const std::string& url : urls_) {
    servers_.push_back(std::make_unique<HttpAgentConnection>(url, token, tls_fingerprint));
  }
}

const std::string& FailoverAgentConnection::current_url() const { return urls_[current_.load()]; }

template <typename Fn>
auto FailoverAgentConnection::OnCurrent(Fn&& call) {
  size_t at = current_.load();
  auto result = call(*servers_[at]);
  Status status = Status::Ok();
  if constexpr (std::is_same_v<decltype(result), Status>) {
    status = result;
  } else {
    if (!result.ok()) status = result.status();
  }
  if (servers_.size() > 1 && status.code() == Code::kUnavailable) {
    // A follower names the leader ("... the leader is URL"): go there if it is one of ours, else
    // to the next server.
    size_t next = (at + 1) % urls_.size();
    const size_t named = status.message().rfind(proto::kLeaderIs);
    if (named != std::string::npos) {
      auto it = std::find(urls_.begin(), urls_.end(),
                          status.message().substr(named + std::strlen(proto::kLeaderIs)));
      if (it != urls_.end() && it != urls_.begin() + at) next = it - urls_.begin();
    }
    // Only the first of several threads that saw the same server fail moves on.
    if (current_.compare_exchange_strong(at, next)) {
      LogInfo("server {} unavailable ({}); trying {} next", urls_[at], status.message(),
              urls_[next]);
    }
  }
  return result;
}

Result<proto::RegisterAnswer> FailoverAgentConnection::Register(
    const proto::RegisterRequest& request) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.Register(request); });
}

Status FailoverAgentConnection::Heartbeat(const proto::HeartbeatRequest& request) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.Heartbeat(request); });
}

Result<proto::HealthAnswer> FailoverAgentConnection::SendHealth(
    const proto::HealthRequest& request) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.SendHealth(request); });
}

Result<proto::ReportAnswer> FailoverAgentConnection::Report(const proto::ReportRequest& request,
                                                            int64_t timeout_ms) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.Report(request, timeout_ms); });
}

Result<proto::LogBatchAnswer> FailoverAgentConnection::AppendLogs(
    const std::string& node, const std::string& session, const std::vector<proto::LogPiece>& pieces,
    int64_t timeout_ms) {
  return OnCurrent(
      [&](HttpAgentConnection& c) { return c.AppendLogs(node, session, pieces, timeout_ms); });
}

Result<std::string> FailoverAgentConnection::GetSpec(const SpecFetch& fetch) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.GetSpec(fetch); });
}

Result<std::string> FailoverAgentConnection::FetchBlobs(const BlobFetch& fetch) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.FetchBlobs(fetch); });
}

Result<std::unique_ptr<net::WebSocketClient>> FailoverAgentConnection::OpenSession(
    const std::string& node, const std::string& session, const std::string& sid) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.OpenSession(node, session, sid); });
}

Status FailoverAgentConnection::Watch(
    const std::string& node, const std::string& session,
    const std::function<bool(const proto::WatchMessage&)>& on_message) {
  return OnCurrent([&](HttpAgentConnection& c) { return c.Watch(node, session, on_message); });
}

void FailoverAgentConnection::AbortWatch() {
  // A watch may still be reading from a server the agent has moved away from: end those too, but
  // leave "end the next watch" to the server calls go to now.
  const size_t at = current_.load();
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (i == at) {
      servers_[i]->AbortWatch();
    } else {
      servers_[i]->AbortWatchInProgress();
    }
  }
}

Result<std::string> JoinCluster(const std::vector<std::string>& servers,
                                const std::string& tls_fingerprint, const std::string& join_token,
                                const std::string& node) {
  Status last = Status::Unavailable("no server to join");
  for (const std::string& url : servers) {
    net::HttpClient client(
        url, net::HttpClientOptions{
                 .token = join_token, .tls_fingerprint = tls_fingerprint, .ca_file = ""});
    auto res = client.Request("POST", "/v1/agent/join",
                              json::serialize(json::object{{"node", node}}), 30'000);
    if (!res.ok()) {
      last = res.status();
      continue;
    }
    if (res->status == 503) {  // a follower, or a server that cannot commit now: the next one
      last = StatusOf(*res, "join");
      continue;
    }
    if (res->status != 201) return StatusOf(*res, "join");
    auto v = ParseJson(res->body, "join answer");
    if (!v.ok()) return v.status();
    const auto* credential = v->is_object() ? v->as_object().if_contains("credential") : nullptr;
    if (!credential || !credential->is_string()) {
      return Status::Internal("join answer holds no credential");
    }
    return std::string(credential->as_string());
  }
  return last;
}

}  // namespace berth
