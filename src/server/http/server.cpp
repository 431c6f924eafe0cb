#include "server/http/server.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/cpu_budget.h"
#include "common/files.h"
#include "common/heap.h"
#include "common/log.h"
#include "common/strings.h"
#include "net/http_client.h"
#include "net/tls.h"
#include "server/http/openapi.h"

namespace berth {

namespace {

// Reads the token file, or creates it (mode 0600) with a fresh random token.
Result<std::string> LoadOrCreateToken(const std::string& path) {
  std::string existing = Trim(ReadFileOr(path));
  if (!existing.empty()) return existing;
  std::string token = RandomHex(24);
  if (!WriteFileAtomic(path, token + "\n", /*sync=*/true, 0600)) {
    return Status::Internal("cannot write " + path + ": " + strerror(errno));
  }
  return token;
}

// A state dir from before per-user identity kept the jobs' logs world-readable: made private once
// (the logs dir's own mode says whether that was done).
void TightenOlderLogs(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    ::chmod(it->path().c_str(), it->is_directory(ec) ? 0700 : 0600);
  }
  ::chmod(dir.c_str(), 0700);
}

// The connections the server may keep open when none is set: the open-file limit it will raise
// itself to (the hard limit, net::HttpServer::Start), less a reserve for its own files (the store,
// logs, uploads, the agents' and sessions' relays).
size_t ConnectionsTheFdLimitAllows() {
  constexpr rlim_t kReserve = 1024;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  rlim_t most = lim.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : lim.rlim_max;
  return most > 2 * kReserve ? static_cast<size_t>(most - kReserve) : static_cast<size_t>(most / 2);
}

}  // namespace

Server::Server(ServerOptions options, const Clock& clock, std::unique_ptr<Store> store)
    : options_(std::move(options)), clock_(clock), store_(std::move(store)) {}

Server::~Server() { Stop(); }

Status Server::Start() {
  if (options_.state_dir.empty()) return Status::Invalid("the server needs a --state-dir");
  if (!store_) return Status::Invalid("the server needs a store");
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir, ec);
  if (ec) {
    return Status::Internal("cannot create state dir " + options_.state_dir + ": " + ec.message());
  }
  // The state dir holds the database (every job's spec and environment), the logs and the
  // cluster token: only the server's user may read it. Others may pass through (search, no read)
  // to reach the unix socket in it.
  ::chmod(options_.state_dir.c_str(), 0711);
  for (const char* name : {"berth.db", "berth.db-wal", "berth.db-shm", "token", "tls.key"}) {
    std::string path = options_.state_dir + "/" + name;
    if (::access(path.c_str(), F_OK) == 0) ::chmod(path.c_str(), 0600);
  }
  TightenOlderLogs(options_.state_dir + "/logs");
  if (!net::IsLoopbackHost(options_.host)) options_.require_token = true;
  if (!options_.token.empty()) {
    token_ = options_.token;
  } else {
    auto token = LoadOrCreateToken(options_.state_dir + "/token");
    if (!token.ok()) return token.status();
    token_ = *token;
  }
  if (options_.unix_socket.empty()) options_.unix_socket = options_.state_dir + "/berth.sock";
  if (options_.unix_socket == "-") options_.unix_socket.clear();
  control_ = std::make_unique<ControlPlane>(options_, clock_, *store_, streams_);
  BERTH_RETURN_IF_ERROR(control_->Open(Identity::BuiltinAdmins(system_users_)));
  sessions_ = std::make_unique<WebSessions>(clock_);
  identity_ = std::make_unique<Identity>(IdentityOptions{.cluster_token = token_,
                                                         .tokens_on_tcp = options_.require_token,
                                                         .owner_only = options_.owner_only},
                                         control_->accounts(), system_users_, sessions_.get());

  int cpus = ReadCpuBudget().usable;
  net::HttpServerOptions http;
  http.host = options_.host;
  http.port = options_.port;
  http.max_body_bytes = options_.max_body_bytes;
  body_admission_ = std::make_unique<BodyAdmission>(
      *identity_, BodyAdmission::Limits{.large_bytes = options_.max_body_bytes});
  http.admit = [this](const net::HttpRequest& head) { return body_admission_->Admit(head); };
  http.max_connections =
      options_.max_connections > 0 ? options_.max_connections : ConnectionsTheFdLimitAllows();
  http.max_connections_per_peer = options_.max_connections_per_peer;
  http.unix_socket_path = options_.unix_socket;
  BERTH_RETURN_IF_ERROR(SetUpTls(http));
  http.threads = options_.threads > 0 ? options_.threads : cpus;
  // Two connections or so per node (its watch stream and its calls), and users: 65,536 slots cost
  // ~0.5 MiB of kernel memory, and a cluster of that size never waits for the table to grow.
  http.reserve_fds = 65536;
  // Handlers waiting for the state lock sit here, not on the I/O threads. Several threads, so
  // that submissions queue for one group commit and a slow one does not hold up heartbeats.
  // The I/O threads and the readers keep the default priority; changes and passes run a little
  // below it, so that on a busy machine a health check or a listing is answered before a pass or a
  // big submission goes on.
  state_exec_ =
      std::make_unique<Executor>(std::max(4, cpus), "berth-state", ControlPlane::kWorkNice);
  read_exec_ = std::make_unique<Executor>(std::max(2, cpus), "berth-read");
  http_ = std::make_unique<net::HttpServer>(
      http, [this](net::HttpRequest&& req, std::shared_ptr<net::Responder> res) {
        Handle(std::move(req), res);
      });
  api_ = std::make_unique<ApiContext>(ApiContext{.options = options_,
                                                 .clock = clock_,
                                                 .store = *store_,
                                                 .core = control_->core(),
                                                 .logs = control_->logs(),
                                                 .uploads = control_->uploads(),
                                                 .accounts = control_->accounts(),
                                                 .sessions = *sessions_,
                                                 .identity = *identity_,
                                                 .streams = streams_,
                                                 .terminals = terminals_,
                                                 .gpu_usage = gpu_usage_,
                                                 .read_exec = *read_exec_,
                                                 .http = *http_,
                                                 .tls_fingerprint = tls_fingerprint_,
                                                 .stopping = stopping_});
  jobs_api_ = std::make_unique<JobsApi>(*api_);
  terminals_api_ = std::make_unique<TerminalsApi>(*api_);
  dashboard_api_ = std::make_unique<DashboardApi>(*api_);
  uploads_api_ = std::make_unique<UploadsApi>(*api_);
  admin_api_ = std::make_unique<AdminApi>(*api_);
  notify_api_ = std::make_unique<NotifyApi>(*api_);
  reservations_api_ = std::make_unique<ReservationsApi>(*api_);
  agents_api_ = std::make_unique<AgentsApi>(*api_);
  AddRoutes(routes_, this);
  openapi_json_ = SerializeJson(OpenApiDocument(routes_));
  BERTH_RETURN_IF_ERROR(http_->Start());
  started_ = true;
  control_->Start(HousekeepingHooks());
  LogInfo("listening on {}{} ({} I/O threads{})", url(),
          options_.unix_socket.empty() ? "" : " and unix:" + options_.unix_socket, http.threads,
          options_.require_token ? ", TCP clients need a token" : "");
  return Status::Ok();
}

Status Server::SetUpTls(net::HttpServerOptions& http) {
  if (!options_.tls && options_.tls_cert.empty() && net::IsLoopbackHost(options_.host)) {
    return Status::Ok();
  }
  if (options_.tls_cert.empty() != options_.tls_key.empty()) {
    return Status::Invalid(
        "give both --tls-cert and --tls-key, or neither (for a self-signed pair)");
  }
  std::string cert = options_.tls_cert;
  std::string key = options_.tls_key;
  if (cert.empty()) {
    cert = options_.state_dir + "/tls.crt";
    key = options_.state_dir + "/tls.key";
    std::vector<std::string> names = {"localhost", "127.0.0.1", "::1"};
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') names.push_back(host);
    if (options_.host != "0.0.0.0" && options_.host != "::" && options_.host != "localhost" &&
        !net::IsLoopbackHost(options_.host)) {
      names.push_back(options_.host);
    }
    BERTH_RETURN_IF_ERROR(net::EnsureSelfSignedCertificate(cert, key, names));
  }
  auto fingerprint = net::CertificateFingerprint(cert);
  if (!fingerprint.ok()) return fingerprint.status();
  tls_fingerprint_ = *fingerprint;
  WriteFileAtomic(options_.state_dir + "/tls.fingerprint", tls_fingerprint_ + "\n",
                  /*sync=*/false, 0644);
  LogInfo("tls certificate {} fingerprint {}", cert, tls_fingerprint_);
  http.tls_cert_file = cert;
  http.tls_key_file = key;
  return Status::Ok();
}

int Server::port() const { return http_ ? http_->port() : 0; }

std::string Server::url() const { return UrlFor(options_.host, port(), !tls_fingerprint_.empty()); }

void Server::Stop() {
  if (!started_.exchange(false)) return;
  stopping_ = true;
  // End every stream and long poll so that clients notice at once and reconnect elsewhere/later.
  streams_.EndAll();
  control_->Stop();
  http_->Stop();
  state_exec_->Stop();
  read_exec_->Stop();
  streams_.EndAll();
}

ControlPlane::Hooks Server::HousekeepingHooks() {
  return {
      .tick =
          [this](int64_t mono) {
            terminals_.ExpireWaiting(mono);
            // Every stream gets a ping about every 5 s (25 ticks of 200 ms), a 25th of them per
            // tick.
            streams_.PingSome(25);
          },
      .sessions_seen = [this](int64_t mono,
                              DurationMs limit) { return terminals_.SeenAt(mono, limit); },
      .gpu_readings =
          [this](TimeMs now) {
            std::vector<Lifecycle::GpuReading> readings;
            for (const auto& [attempt, use] : gpu_usage_.All(now)) {
              if (!use.known) continue;
              readings.push_back(
                  {attempt.first, attempt.second, use.idle_for_ms, use.mean_sm, use.idle_ms});
            }
            return readings;
          },
      .post_read = [this](std::function<void()> work) { read_exec_->Post(std::move(work)); },
      .on_each_request_thread =
          [this](std::function<void()> work) {
            return state_exec_->PostToEachThread(work) + read_exec_->PostToEachThread(work);
          },
  };
}

}  // namespace berth
