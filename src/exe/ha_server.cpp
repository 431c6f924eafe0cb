#include "exe/ha_server.h"

#include <time.h>
#include <unistd.h>

#include <mutex>
#include <random>

#include "common/log.h"
#include "protocol/agent_protocol.h"
#include "server/http/responses.h"
#include "server/leadership.h"
#include "store/log_bytes.h"
#include "store/pg_leader_lease.h"
#include "store/pg_store.h"

namespace berth {
namespace {

// Waits up to `ms` for a stop signal: the signal, or 0 when none came.
int WaitForSignal(const sigset_t& set, DurationMs ms) {
  timespec ts{.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1'000'000};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// host:pid:random: unique per process, so a restarted server never inherits a lease.
std::string HolderId() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  return fmt::format("{}:{}:{:08x}", host, ::getpid(), rd());
}

// What GET /v1/health says under "ha", updated by the election loop, read by I/O threads.
class HaStatus {
 public:
  void Set(json::object o) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(o);
  }
  json::object Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  json::object status_;
};

json::object Describe(const Elector& elector, LeaderLease& lease, const std::string& holder,
                      const std::string& store) {
  json::object o{
      {"role", elector.leading() ? "leader" : "follower"}, {"server", holder}, {"store", store}};
  if (!elector.last_error().empty()) o["store_error"] = elector.last_error();
  Result<LeaderInfo> info = lease.Current();
  if (info.ok()) {
    o["leader"] = json::object{{"server", info->holder},
                               {"url", info->url},
                               {"since", info->since},
                               {"token", info->token},
                               {"lease_expires_in_ms", info->expires_in}};
  }
  return o;
}

// The database, once it is there (and its schema current): its leader lease; nullptr when a stop
// signal came first.
std::unique_ptr<PgLeaderLease> OpenWhenReady(const HaOptions& ha, const std::string& store_name,
                                             const sigset_t& stop_signals) {
  for (DurationMs wait = 500;; wait = std::min<DurationMs>(wait * 2, 5'000)) {
    Result<std::unique_ptr<PgStore>> migrated = PgStore::Open(ha.store);
    Result<std::unique_ptr<PgLeaderLease>> opened =
        migrated.ok() ? PgLeaderLease::Open(ha.store) : migrated.status();
    if (opened.ok()) return std::move(*opened);
    LogWarn("cannot open the store {}: {}; retrying", store_name, opened.status().message());
    if (WaitForSignal(stop_signals, wait) != 0) return nullptr;
  }
}

// What a follower answers: its health (with who leads), and to anything else 503 naming the
// leader, so that clients go there.
net::HttpResponse FollowerAnswer(const net::HttpRequest& req, const json::object& ha) {
  if (req.path == "/v1/health" && req.method == "GET") {
    return JsonResponse(200, json::object{{"ok", true}, {"version", BERTH_VERSION}, {"ha", ha}});
  }
  std::string leader;
  if (const json::value* l = ha.if_contains("leader"); l && l->is_object()) {
    if (const json::value* u = l->as_object().if_contains("url"); u && u->is_string()) {
      leader = std::string(u->as_string());
    }
  }
  net::HttpResponse answer = JsonResponse(
      503, json::object{{"error", leader.empty() ? "this berth server is a follower and no server "
                                                   "leads at the moment; retry shortly"
                                                 : "this berth server is a follower; " +
                                                       std::string(proto::kLeaderIs) + leader},
                        {"role", "follower"},
                        {"leader", leader}});
  answer.headers.emplace_back("X-Berth-Leader", leader);
  answer.headers.emplace_back("Retry-After", "1");
  // No keep-alive: a client must not hold a connection to a follower that is about to stop
  // listening and hand its port to the leading server.
  answer.headers.emplace_back("Connection", "close");
  return answer;
}

// The leader trims the output of jobs that ended over --log-retention ago, a bounded batch per
// call (the calling thread renews the lease); the monotonic time of the next call.
int64_t TrimEndedLogs(const HaOptions& ha) {
  constexpr int64_t kBatch = 10'000;
  Result<int64_t> gone =
      DeletePgLogsEndedBefore(ha.store, SystemClock::Get().Now() - ha.log_retention_ms, kBatch);
  if (!gone.ok()) {
    LogWarn("log retention: {}", gone.status().message());
  } else if (*gone > 0) {
    LogInfo("log retention: deleted {} chunks of output older than {} ms", *gone,
            ha.log_retention_ms);
  }
  const bool more = gone.ok() && *gone == kBatch;
  return MonotonicMs() + (more ? 0 : 10 * 60'000);
}

}  // namespace

int RunHaServer(ServerOptions options, const HaOptions& ha, const sigset_t& stop_signals,
                const std::function<void(const std::string& url)>& on_listening) {
  const std::string holder = HolderId();
  const std::string store_name = PgUrlWithoutPassword(ha.store);
  LogInfo("high availability: server {} on {} (lease {} ms)", holder, store_name, ha.lease_ms);
  if (options.unix_socket.empty()) options.unix_socket = options.state_dir + "/berth.sock";
  if (options.unix_socket == "-") options.unix_socket.clear();

  // The database must be there (and its schema current) before anything else.
  std::unique_ptr<PgLeaderLease> lease = OpenWhenReady(ha, store_name, stop_signals);
  if (!lease) return 0;

  auto status = std::make_shared<HaStatus>();
  std::unique_ptr<Elector> elector;
  std::string my_url;
  bool announced = false;
  for (;;) {
    // ---- Following: a small server that says who leads.
    net::HttpServerOptions http{.host = options.host,
                                .port = options.port,
                                .threads = 1,
                                .unix_socket_path = options.unix_socket,
                                .tls_cert_file = options.tls_cert,
                                .tls_key_file = options.tls_key};
    net::HttpServer standby(http,
                            [status](net::HttpRequest&& req, std::shared_ptr<net::Responder> res) {
                              res->Send(FollowerAnswer(req, status->Get()));
                            });
    Status started = standby.Start();
    if (!started.ok()) {
      LogError("cannot listen as a follower: {}", started.message());
      return 1;
    }
    options.port = standby.port();  // keep the port a first bind to 0 chose, for every phase
    if (!elector) {
      my_url = !ha.advertise_url.empty()
                   ? ha.advertise_url
                   : UrlFor(options.host, options.port, !options.tls_cert.empty());
      elector = std::make_unique<Elector>(
          ElectorOptions{.holder = holder, .url = my_url, .lease_ms = ha.lease_ms}, *lease,
          SystemClock::Get());
    }
    if (!announced) {
      on_listening(my_url);
      announced = true;
    }
    LogInfo("following (serving {} as a follower)", my_url);
    for (;;) {
      const Elector::Action action = elector->Tick();
      status->Set(Describe(*elector, *lease, holder, store_name));
      if (action == Elector::Action::kLead) break;
      if (WaitForSignal(stop_signals, elector->tick_ms()) != 0) {
        standby.Stop();
        return 0;
      }
    }
    standby.Stop();

    // ---- Leading: the whole server, its writes fenced by the token.
    LogInfo("leading with fencing token {}", elector->token());
    Result<std::unique_ptr<PgStore>> store = PgStore::Open(ha.store);
    if (!store.ok()) {
      LogError("cannot open the store to lead: {}", store.status().message());
      elector->Release();
      if (WaitForSignal(stop_signals, elector->tick_ms()) != 0) return 0;
      continue;
    }
    (*store)->SetFence(elector->token());
    const PgStore* leading_store =
        store->get();  // owned by the server below, which outlives its use
    ServerOptions leading = options;
    leading.ha_status = [status] { return status->Get(); };
    leading.log_store = ha.store;
    leading.upload_store = ha.store;
    leading.log_store_fence = elector->token();
    auto server = std::make_unique<Server>(leading, SystemClock::Get(), std::move(*store));
    Status st = server->Start();
    if (!st.ok()) {
      LogError("cannot start leading: {}", st.message());
      server.reset();
      elector->Release();
      if (WaitForSignal(stop_signals, elector->tick_ms()) != 0) return 0;
      continue;
    }
    status->Set(Describe(*elector, *lease, holder, store_name));
    int64_t next_retention = MonotonicMs();
    for (;;) {
      if (ha.log_retention_ms > 0 && MonotonicMs() >= next_retention) {
        next_retention = TrimEndedLogs(ha);  // every 10 min, until nothing is left
      }
      if (int sig = WaitForSignal(stop_signals, elector->tick_ms()); sig != 0) {
        LogInfo("received signal {}; giving up the lead and shutting down", sig);
        server->Stop();
        elector->Release();
        return 0;
      }
      // A commit whose outcome is unknown: a write may have landed that this server's memory
      // does not have. Lead afresh from what the database holds: give the lease up, and the next
      // round this or another server loads the state again.
      const bool uncertain = leading_store->commit_uncertain();
      const bool step_down = uncertain || elector->Tick() == Elector::Action::kStepDown;
      if (step_down) {
        LogWarn("stepping down: {}",
                uncertain ? "a commit's outcome is unknown (the database connection broke "
                            "during COMMIT); giving up the lead to load the state again"
                          : elector->last_error());
        server->Stop();
        if (uncertain) elector->Release();
      }
      status->Set(Describe(*elector, *lease, holder, store_name));
      if (step_down) break;
    }
  }
}

}  // namespace berth
